"""The service routes: liveness, readiness, metrics, and the served logs."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from queryd.daemon.access import granted_log
from queryd.daemon.dependencies import Served, daemon_of
from queryd.daemon.errors import ERROR_RESPONSES
from queryd.daemon.handles import LogHandle
from queryd.daemon.models import LogAnswer, LogsAnswer, LogSummary, ProjectorOut, ReadyAnswer
from queryd.daemon.params import MinSeq
from queryd.daemon.seq import stamp_seq

__all__ = ["router", "summary"]

router = APIRouter(tags=["service"], responses=ERROR_RESPONSES)


@router.get(
    "/healthz",
    summary="alive: the daemon answers (it asks neither the logs, the broker nor Redis)",
)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="ready when every log is hydrated and its storage answers",
    description="Each log's status (ready, hydrating, missing, unavailable) and why, its "
    "seq, head and lag, and on Kafka its projector (state, heartbeat age, lag, "
    "lifecycle lag). The projector does not gate readiness: reads are served without "
    "it. Pass require_projector=true to also require every Kafka log's projector up "
    "(for a daemon whose job is the lifecycle streams).",
    response_model=ReadyAnswer,
    responses={503: {"model": ReadyAnswer, "description": "some log is not ready"}},
)
async def readyz(
    request: Request,
    require_projector: Annotated[
        bool, Query(description="also 503 when a Kafka log's projector is not up")
    ] = False,
) -> JSONResponse:
    summaries = [summary(h) for h in daemon_of(request).registry.handles.values()]
    ready = all(s.ready for s in summaries)
    if require_projector:
        ready = ready and all(
            s.projector is not None and s.projector.state == "up"
            for s in summaries
            if s.mode == "kafka"
        )
    body = {"ready": ready, "logs": [s.model_dump() for s in summaries]}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse)
async def metrics_endpoint(request: Request) -> Response:
    body, content_type = await asyncio.to_thread(daemon_of(request).metrics.render)
    return Response(body, media_type=content_type)


@router.get("/logs", summary="the served logs (with access control on: the token's log)")
async def list_logs(request: Request) -> LogsAnswer:
    only = granted_log(request.scope)
    handles = daemon_of(request).registry.handles.values()
    return LogsAnswer(logs=[summary(h) for h in handles if only in (None, h.name)])


@router.get("/logs/{log}", summary="one log: its seq, lag and sizes")
async def log_info(served: Served, response: Response, min_seq: MinSeq = None) -> LogAnswer:
    state = await served.state(min_seq)
    return LogAnswer(
        seq=stamp_seq(response, state.last_seq),
        log=summary(served.handle),
        audit_events=len(state.memory),
        items=len(state.graph.items),
        edges=len(state.graph.edges),
        intents=len(state.intents.intents),
        tasks=len(state.tasks.tasks),
        rejections=len(state.rejections),
    )


def summary(handle: LogHandle) -> LogSummary:
    """A log as /readyz, /logs and /logs/NAME report it (what its threads last saw)."""
    state = handle.state
    health = handle.health()
    hydrated = handle.ready.is_set()
    return LogSummary(
        name=handle.name,
        mode=handle.mode,
        ready=health.ready,
        status=health.status,
        hydrated=hydrated,
        seq=None if state is None else state.last_seq,
        head=handle.head() if hydrated else None,
        lag=handle.lag() if hydrated else 0,
        error=health.cause,
        projector=_projector_out(handle),
    )


def _projector_out(handle: LogHandle) -> ProjectorOut | None:
    report = handle.projector
    if handle.mode != "kafka":
        return None
    if report is None:
        return ProjectorOut(state="unknown", cause="not asked yet")
    status = report.status
    head = handle.head()
    lag = None
    if status is not None and head is not None:
        lag = max(0, head - (-1 if status.folded_seq is None else status.folded_seq))
    return ProjectorOut(
        state=report.state,
        cause=report.cause,
        owner=None if status is None else status.owner,
        heartbeat_age_s=None if report.age_s is None else round(report.age_s, 3),
        folded_seq=None if status is None else status.folded_seq,
        published_seq=None if status is None else status.published_seq,
        lag=lag,
        lifecycle_lag=handle.lifecycle_lag(),
    )
