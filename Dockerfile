# memstream's services (projector, queryd) for docker-compose.yml.
# The wheel is built where a C compiler is (projector/graph/_native.c), then installed alone.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY schemas ./schemas
COPY producers ./producers
COPY projector ./projector
COPY queryd ./queryd
COPY memstream ./memstream
RUN pip wheel --no-cache-dir --no-deps -w /wheels .

FROM python:3.11-slim
WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --system --uid 10001 memstream
USER memstream
ENTRYPOINT ["memstream"]
CMD ["--help"]
