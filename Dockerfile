# memstream's services (projector, queryd) for docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY producers ./producers
COPY projector ./projector
COPY queryd ./queryd
COPY memstream ./memstream
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 memstream
USER memstream
ENTRYPOINT ["memstream"]
CMD ["--help"]
