"""The live routes: a log's lifecycle stream as server-sent events.

All streams of a log are served by its one shared reader (`queryd.daemon.streams`); at
most `max_streams` are open at once, all logs together (a 503 beyond).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from queryd.daemon.dependencies import Served
from queryd.daemon.errors import ERROR_RESPONSES, ApiError
from queryd.daemon.models import ErrorBody
from queryd.daemon.streams import hub_stream

__all__ = ["router"]

router = APIRouter(tags=["live"], responses=ERROR_RESPONSES)


@router.get(
    "/logs/{log}/lifecycle",
    summary="server-sent events: the lifecycle stream from an offset",
    description="Each event's id is its lifecycle offset; reconnect with Last-Event-ID "
    "to resume after it (it takes precedence over from_offset). `limit` ends the "
    "stream after that many events. All streams of a log are served by one shared "
    "reader; at most --max-streams are open at once (503 beyond).",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}},
        503: {"model": ErrorBody, "description": "too many streams open, or not ready"},
    },
)
async def lifecycle(
    served: Served,
    from_offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    limit: Annotated[int | None, Query(ge=1)] = None,
    after_seq: Annotated[
        int | None,
        Query(
            ge=-1,
            le=2**62,
            description="send only the events caused by log records after this seq (a "
            "view that loaded the log up to it follows what comes next)",
        ),
    ] = None,
    last_event_id: Annotated[
        str | None, Header(alias="Last-Event-ID", description="resume after this id")
    ] = None,
) -> StreamingResponse:
    start = from_offset
    if last_event_id is not None and last_event_id.strip():
        try:
            start = int(last_event_id.strip()) + 1
        except ValueError:
            raise ApiError(
                422,
                f"header.Last-Event-ID: expected an event id (an integer offset), "
                f"got {last_event_id[:80]!r}",
            ) from None
        if not 0 <= start <= 2**62:
            raise ApiError(422, "header.Last-Event-ID: expected an offset from 0 to 2**62")
    handle, daemon = served.handle, served.daemon
    handle.current()
    if handle.memory is None:
        raise ApiError(503, handle.not_ready_message())
    streams = daemon.streams
    if not streams.try_acquire():
        raise ApiError(
            503,
            f"lifecycle: {streams.limit} streams are open, the daemon's limit "
            "(--max-streams); retry later",
        )
    settings = daemon.settings
    hub = handle.lifecycle_hub(settings.hub)
    if after_seq is not None and last_event_id is None:
        hinted = hub.offset_after_seq(after_seq)
        if hinted is not None and hinted > start:
            start = hinted  # what precedes it was caused by records up to after_seq
    stream = hub_stream(
        hub, start, limit=limit, keepalive=settings.sse_keepalive, after_seq=after_seq
    )
    return _SlotStreamingResponse(
        streams.release,
        stream,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class _SlotStreamingResponse(StreamingResponse):
    """A stream that gives its slot back however it ends (even if never started)."""

    def __init__(self, release: Callable[[], None], *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._release: Callable[[], None] | None = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                await aclose()
