"""The query daemon's HTTP surface: FastAPI routes around the pure queries.

`create_app(locations)` builds the app; its lifespan hydrates, follows and probes every
log in background threads (`queryd.daemon.handles`). Reads take the current state of a
log (or wait, bounded, for `min_seq`), call a pure query of `queryd.audit` /
`queryd.graph`, and answer with the seq the state reflects, in the body (`seq`) and the
`X-Memstream-Seq` header. No route makes a blocking call on the event loop: what needs
the broker, Redis or the disk is done by those threads, whose last findings the routes
read; heavy answers (`/state`, `/events` pages) are built and serialized in a small pool
of threads. Only `POST /logs/{log}/recall` appends to a log (its Recall, through
`Memory.recall`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

from fastapi import Depends, FastAPI, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from projector.graph.selection import filter_items, page, sort_items
from projector.record_fold import LogState
from queryd.audit import search
from queryd.audit.events import select_events
from queryd.audit.state_page import select_state
from queryd.daemon import models as m
from queryd.daemon.guards import LOCAL_HOSTS, BodyLimit, HostAllowList
from queryd.daemon.handles import (
    LogHandle,
    LogRegistry,
    NotReady,
    SeqTimeout,
    Unavailable,
)
from queryd.daemon.jsonbody import dump_chunked
from queryd.daemon.jsonlog import printable
from queryd.daemon.metrics import Metrics, MetricsMiddleware
from queryd.daemon.streams import HubSettings, StreamLimit, hub_stream
from queryd.graph.costs import cost_function
from queryd.graph.edges import get_edge_by_id, get_edges
from queryd.graph.integrity import (
    get_alias_group,
    get_aliases,
    get_contradictions,
    get_dependents,
    get_stale_items,
)
from queryd.graph.intents import get_intent_by_id, get_intents
from queryd.graph.navigation import get_children, get_parents, get_related_items
from queryd.graph.retrieval import get_support_set, get_support_tree, smart_retrieve
from queryd.graph.scoring import get_scored_items
from queryd.graph.stats import get_stats
from queryd.graph.tasks import get_task_by_id, get_tasks
from queryd.graph.transplant import export_slice
from schemas.errors import MemstreamError
from schemas.graph.errors import MemexError
from schemas.graph.items import MemoryItem

__all__ = ["DaemonSettings", "create_app", "SEQ_HEADER"]

log = logging.getLogger("memstream.queryd")

SEQ_HEADER = "X-Memstream-Seq"
MAX_PAGE = 10_000
STATE_PAGE = 1_000  # content events in a /state page unless `limit` says otherwise


@dataclass(frozen=True)
class DaemonSettings:
    """How the daemon waits, probes and bounds what it serves.

    `min_seq_timeout`: how long a read with `min_seq` waits; `poll_interval`: how often
    each log is checked for new records; `probe_interval` / `probe_timeout`: how often the
    log's storage is asked for its head, and how long an unanswered probe takes to make
    the log unavailable; `reopen_interval`: at most this long between attempts to open a
    log that cannot be opened (one that does not exist yet included); `max_streams`:
    lifecycle streams open at once, all logs together (503 beyond); `allowed_hosts`: the
    Host names served (None or "*": any); `max_body_bytes`: the largest request body;
    `heavy_workers`: threads that build large answers.
    """

    min_seq_timeout: float = 5.0
    poll_interval: float = 0.02
    sse_keepalive: float = 15.0
    probe_interval: float = 1.0
    probe_timeout: float = 2.0
    reopen_interval: float = 10.0
    max_streams: int = 100
    allowed_hosts: tuple[str, ...] | None = LOCAL_HOSTS
    max_body_bytes: int = 1024 * 1024
    heavy_workers: int = 2
    hub: HubSettings = field(default_factory=HubSettings)


# --- errors -------------------------------------------------------------------------------------


T = TypeVar("T")


class ApiError(Exception):
    """An answer other than 200: status and a message naming what is at fault."""

    def __init__(
        self, status: int, message: str, seq: int | None = None, detail: Any = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.seq, self.detail = status, message, seq, detail


def _loc(loc: Iterable[Any]) -> str:
    return ".".join(str(part) for part in loc)


def _error_response(
    status: int, message: str, detail: Any = None, seq: int | None = None
) -> JSONResponse:
    body = {"detail": message if detail is None else detail, "message": message, "seq": seq}
    headers = {SEQ_HEADER: _seq_text(seq)} if seq is not None else {}
    if status == 503:
        headers["Retry-After"] = "1"
    return JSONResponse(body, status_code=status, headers=headers or None)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        message = "; ".join(f"{_loc(e['loc'])}: {e['msg']}" for e in errors) or "invalid request"
        return _error_response(422, message, errors)

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.message, exc.detail, exc.seq)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail)
        path = printable(request.url.path, 200)
        method = printable(request.method, 20)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such endpoint: {method} {path}"
        elif exc.status_code == 405:
            message = f"method {method} is not allowed on {path}"
        return _error_response(exc.status_code, message)

    @app.exception_handler(NotReady)
    async def _not_ready(request: Request, exc: NotReady) -> JSONResponse:
        return _error_response(503, str(exc))

    @app.exception_handler(Unavailable)
    async def _unavailable(request: Request, exc: Unavailable) -> JSONResponse:
        return _error_response(503, str(exc), seq=exc.reached)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error(
            "%s %s failed", printable(request.method, 20), printable(request.url.path), exc_info=exc
        )
        return _error_response(500, f"internal error: {type(exc).__name__}")


def _seq_text(seq: int | None) -> str:
    return "none" if seq is None else str(seq)


# --- the app ------------------------------------------------------------------------------------

MinSeq = Annotated[
    int | None,
    Query(
        ge=0,
        description="answer only once the state reflects at least this seq; wait for it up "
        "to the daemon's --min-seq-timeout, then 504",
    ),
]
Limit = Annotated[int | None, Query(ge=0, le=MAX_PAGE, description="at most this many")]
Offset = Annotated[int, Query(ge=0, le=2**53, description="skip this many first")]
LogName = Annotated[str, Path(description="the log's name (directory name or Kafka topic)")]
ItemId = Annotated[str, Path(description="a memory item id")]


async def handle_of(request: Request, log: LogName) -> LogHandle:
    """The served log named in the path; 404 naming the served ones otherwise."""
    registry: LogRegistry = request.app.state.registry
    handle = registry.get(log)
    if handle is None:
        served = ", ".join(sorted(registry.handles)) or "none"
        raise ApiError(404, f"log: unknown log {log!r} (serving: {served})")
    return handle


Handle = Annotated[LogHandle, Depends(handle_of)]


def create_app(
    logs: Iterable[str] | LogRegistry,
    settings: DaemonSettings | None = None,
) -> FastAPI:
    """The daemon over the logs at these locations (or an existing registry)."""
    settings = settings or DaemonSettings()
    registry = (
        logs
        if isinstance(logs, LogRegistry)
        else LogRegistry.from_locations(
            logs,
            poll_interval=settings.poll_interval,
            probe_interval=settings.probe_interval,
            probe_timeout=settings.probe_timeout,
            reopen_interval=settings.reopen_interval,
        )
    )
    streams = StreamLimit(settings.max_streams)
    metrics = Metrics(registry, streams)
    pools: list[ThreadPoolExecutor] = []  # the heavy pool, made on first use

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Counted: the logs stop when the last user (this lifespan, another one over the
        # same registry, a caller that acquired it first) releases them.
        registry.acquire(asyncio.get_running_loop())
        try:
            yield
        finally:
            await asyncio.to_thread(registry.release)
            while pools:
                pools.pop().shutdown(wait=False)

    async def off_loop(call: Callable[[], T]) -> T:
        """Run `call` in the heavy pool (bounded: `heavy_workers` at once)."""
        if not pools:
            pools.append(
                ThreadPoolExecutor(settings.heavy_workers, thread_name_prefix="memstream-heavy")
            )
        return await asyncio.get_running_loop().run_in_executor(pools[0], call)

    app = FastAPI(
        title="memstream queryd",
        version="0.1.0",
        summary="Reads of memstream logs: audit memory and the epistemic graph, with the seq "
        "each answer reflects.",
        lifespan=lifespan,
        responses={
            404: {"model": m.ErrorBody, "description": "unknown log, id or endpoint"},
            422: {"model": m.ErrorBody, "description": "a malformed parameter or body"},
            503: {
                "model": m.ErrorBody,
                "description": "the log is hydrating, does not exist, or is unavailable",
            },
        },
    )
    app.state.registry = registry
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.streams = streams
    app.add_middleware(BodyLimit, max_body=settings.max_body_bytes)
    app.add_middleware(HostAllowList, allowed=settings.allowed_hosts)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    _install_error_handlers(app)

    # -- dependencies -----------------------------------------------------------------------

    async def state_of(handle: LogHandle, min_seq: int | None) -> LogState:
        """The state to answer from: what the log's follower last folded (reads keep
        working while the log is unavailable), or, with `min_seq`, at least that seq."""
        try:
            return await handle.at_least(min_seq, settings.min_seq_timeout)
        except NotReady as exc:
            raise ApiError(503, str(exc)) from None
        except Unavailable as exc:
            raise ApiError(503, str(exc), seq=exc.reached) from None
        except SeqTimeout as exc:
            raise ApiError(504, str(exc), seq=exc.reached) from None

    def seq_of(response: Response, state: LogState) -> int | None:
        response.headers[SEQ_HEADER] = _seq_text(state.last_seq)
        return state.last_seq

    def found_or_404(
        found: T | None, field: str, what: str, key: object, state: LogState, handle: LogHandle
    ) -> T:
        """`found`, or a 404 naming the field and the id that matched nothing."""
        if found is None:
            raise ApiError(
                404, f"{field}: no {what} {key!r} in log {handle.name!r}", seq=state.last_seq
            )
        return found

    def item_or_404(state: LogState, handle: LogHandle, item_id: str) -> MemoryItem:
        return found_or_404(
            state.graph.items.get(item_id), "item_id", "memory item", item_id, state, handle
        )

    def pure(call: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a pure query; what it refuses of the client's input is a 422."""
        try:
            return call(*args, **kwargs)
        except (ValueError, TypeError, MemexError, MemstreamError) as exc:
            raise ApiError(422, str(exc) or type(exc).__name__) from None

    # -- service ------------------------------------------------------------------------------

    @app.get(
        "/healthz",
        tags=["service"],
        summary="alive: the daemon answers (it asks neither the logs, the broker nor Redis)",
    )
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        tags=["service"],
        summary="ready when every log is hydrated and its storage answers",
        description="Each log's status (ready, hydrating, missing, unavailable) and why, its "
        "seq, head and lag, and on Kafka its projector (state, heartbeat age, lag, "
        "lifecycle lag). The projector does not gate readiness: reads are served without "
        "it. Pass require_projector=true to also require every Kafka log's projector up "
        "(for a daemon whose job is the lifecycle streams).",
        response_model=m.ReadyAnswer,
        responses={503: {"model": m.ReadyAnswer, "description": "some log is not ready"}},
    )
    async def readyz(
        require_projector: Annotated[
            bool, Query(description="also 503 when a Kafka log's projector is not up")
        ] = False,
    ) -> JSONResponse:
        summaries = [_summary(h) for h in registry.handles.values()]
        ready = all(s.ready for s in summaries)
        if require_projector:
            ready = ready and all(
                s.projector is not None and s.projector.state == "up"
                for s in summaries
                if s.mode == "kafka"
            )
        body = {"ready": ready, "logs": [s.model_dump() for s in summaries]}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get(
        "/metrics",
        tags=["service"],
        summary="Prometheus metrics",
        response_class=PlainTextResponse,
    )
    async def metrics_endpoint() -> Response:
        body, content_type = await asyncio.to_thread(metrics.render)
        return Response(body, media_type=content_type)

    @app.get("/logs", tags=["service"], summary="the served logs")
    async def list_logs() -> m.LogsAnswer:
        return m.LogsAnswer(logs=[_summary(h) for h in registry.handles.values()])

    @app.get("/logs/{log}", tags=["service"], summary="one log: its seq, lag and sizes")
    async def log_info(handle: Handle, response: Response, min_seq: MinSeq = None) -> m.LogAnswer:
        state = await state_of(handle, min_seq)
        return m.LogAnswer(
            seq=seq_of(response, state),
            log=_summary(handle),
            audit_events=len(state.memory),
            items=len(state.graph.items),
            edges=len(state.graph.edges),
            intents=len(state.intents.intents),
            tasks=len(state.tasks.tasks),
            rejections=len(state.rejections),
        )

    # -- audit memory -------------------------------------------------------------------------

    @app.get("/logs/{log}/events/{event_id}", tags=["audit"], summary="one event, deleted or not")
    async def get_event(
        handle: Handle, event_id: UUID, response: Response, min_seq: MinSeq = None
    ) -> m.EventAnswer:
        state = await state_of(handle, min_seq)
        event = found_or_404(
            state.memory.get(event_id), "event_id", "event", str(event_id), state, handle
        )
        return m.EventAnswer.model_construct(seq=seq_of(response, state), event=event)

    async def json_off_loop(build: Callable[[], Any], seq: int | None) -> Response:
        """The answer `build` makes, built and serialized (in chunks: `dump_chunked`) in
        the heavy pool: a page of thousands of events takes tens of ms, not on the loop."""

        def dump() -> bytes:
            return dump_chunked(build())

        try:
            body = await off_loop(dump)
        except (ValueError, TypeError, MemstreamError) as exc:
            raise ApiError(422, str(exc) or type(exc).__name__) from None
        return Response(body, media_type="application/json", headers={SEQ_HEADER: _seq_text(seq)})

    @app.get(
        "/logs/{log}/events",
        tags=["audit"],
        summary="the log in seq order, filtered, paged",
        response_model=m.EventsAnswer,
    )
    async def list_events(
        handle: Handle,
        kind: Annotated[
            Literal["message", "document", "recall", "deletion"] | None, Query()
        ] = None,
        session_id: Annotated[str | None, Query()] = None,
        after_seq: Annotated[int | None, Query(ge=-1)] = None,
        up_to_seq: Annotated[int | None, Query(ge=-1)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
        min_seq: MinSeq = None,
    ) -> Response:
        state = await state_of(handle, min_seq)

        def build() -> m.EventsAnswer:
            found = select_events(
                state.memory,
                kind=kind,
                session_id=session_id,
                after_seq=after_seq,
                up_to_seq=up_to_seq,
                limit=limit,
            )
            return m.EventsAnswer.model_construct(
                seq=state.last_seq, events=found.events, next_after_seq=found.next_after_seq
            )

        return await json_off_loop(build, state.last_seq)

    @app.get(
        "/logs/{log}/state",
        tags=["audit"],
        summary="the audit state at the head or as of a seq, one page at a time",
        description="The state's lists (visible messages and documents, deleted items, "
        "recall statistics) for the content events (messages and documents) with a seq "
        f"after `after_seq`, at most `limit` of them (default {STATE_PAGE}) in seq order, "
        "each in the list it belongs to. `next_after_seq` is set when more follow: pass it "
        "as `after_seq`, with `up_to_seq` set to the first page's `up_to_seq` so that every "
        "page reads the same state. A state of up to `limit` content events comes whole.",
        response_model=m.StateAnswer,
    )
    async def get_state(
        handle: Handle,
        up_to_seq: Annotated[
            int | None, Query(ge=-1, description="the state as it stood after this seq")
        ] = None,
        after_seq: Annotated[
            int | None, Query(ge=-1, description="the page after this content seq")
        ] = None,
        limit: Annotated[
            int, Query(ge=1, le=MAX_PAGE, description="content events in this page at most")
        ] = STATE_PAGE,
        min_seq: MinSeq = None,
    ) -> Response:
        state = await state_of(handle, min_seq)
        seq = state.last_seq
        if up_to_seq is not None and seq is not None and up_to_seq < seq:
            seq = up_to_seq

        def build() -> m.StateAnswer:
            memory = state.memory.at(up_to_seq)
            found = select_state(memory, after_seq=after_seq, limit=limit)
            return m.StateAnswer.model_construct(
                seq=seq,
                up_to_seq=memory.last_seq,
                visible_messages=found.visible_messages,
                visible_documents=found.visible_documents,
                deleted=[
                    m.DeletedItem.model_construct(id=k, tombstone=v) for k, v in found.deleted
                ],
                recall_stats=[
                    m.RecallStat.model_construct(
                        id=k, num_recalled=v.num_recalled, last_recalled_at=v.last_recalled_at
                    )
                    for k, v in found.recall_stats
                ],
                next_after_seq=found.next_after_seq,
            )

        return await json_off_loop(build, seq)

    @app.get("/logs/{log}/search", tags=["audit"], summary="keyword search of visible memory")
    async def search_memory(
        handle: Handle,
        response: Response,
        q: Annotated[str, Query(max_length=10_000, description="the query words")],
        limit: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 5,
        up_to_seq: Annotated[int | None, Query(ge=-1)] = None,
        min_seq: MinSeq = None,
    ) -> m.SearchAnswer:
        state = await state_of(handle, min_seq)
        seq = seq_of(response, state)
        memory = state.memory
        if up_to_seq is not None:
            memory = memory.at(up_to_seq)
            if seq is not None and up_to_seq < seq:
                seq = up_to_seq
                response.headers[SEQ_HEADER] = _seq_text(seq)
        items = search(memory, q, limit=limit)
        return m.SearchAnswer.model_construct(seq=seq, query=q, items=items)

    @app.post(
        "/logs/{log}/recall",
        tags=["audit"],
        summary="search, and append a Recall naming exactly what was returned",
    )
    async def recall(
        handle: Handle,
        body: m.strict(m.RecallRequest),
        response: Response,  # type: ignore[valid-type]
    ) -> m.RecallAnswer:
        handle.current()  # 503 while hydrating
        memory = handle.memory
        if memory is None:
            raise ApiError(503, handle.not_ready_message())
        health = handle.health()
        if health.status == "unavailable":  # the append could only wait, then fail
            raise ApiError(503, f"recall: not appended: {health.cause}")
        try:
            stored, items = await asyncio.to_thread(
                memory.recall,
                body.query,
                limit=body.limit,
                session_id=body.session_id,
                source=body.source,
                actor=body.actor,
            )
        except ValueError as exc:
            raise ApiError(422, str(exc)) from None
        except MemstreamError as exc:
            raise ApiError(503, f"recall on log {handle.name!r} failed: {exc}") from None
        try:  # so that reads right after this answer see the Recall (bounded wait)
            await handle.at_least(stored.seq, settings.min_seq_timeout)
        except MemstreamError:
            pass
        response.headers[SEQ_HEADER] = _seq_text(stored.seq)
        return m.RecallAnswer.model_construct(seq=stored.seq, recall=stored, items=items)

    @app.get("/logs/{log}/rejections", tags=["audit"], summary="records the fold refused")
    async def rejections(
        handle: Handle,
        response: Response,
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> m.RejectionsAnswer:
        state = await state_of(handle, min_seq)
        chosen = page(list(state.rejections), offset, limit)
        return m.RejectionsAnswer(
            seq=seq_of(response, state),
            rejections=[m.RejectionOut(seq=r.seq, reason=r.reason, error=r.error) for r in chosen],
        )

    # -- graph --------------------------------------------------------------------------------

    @app.post("/logs/{log}/graph/items/query", tags=["graph"], summary="get_items")
    async def query_items(
        handle: Handle,
        body: m.strict(m.ItemsQuery),
        response: Response,  # type: ignore[valid-type]
        min_seq: MinSeq = None,
    ) -> m.ItemsAnswer:
        state = await state_of(handle, min_seq)
        options = body.options
        matched = pure(filter_items, state.graph, body.filter)
        ordered = matched
        if options is not None and options.sort is not None:
            ordered = pure(sort_items, matched, options.sort)
        chosen = (
            page(ordered, options.offset, options.limit) if options is not None else list(ordered)
        )
        return m.ItemsAnswer.model_construct(
            seq=seq_of(response, state), items=chosen, total=len(matched)
        )

    @app.get("/logs/{log}/graph/items/{item_id}", tags=["graph"], summary="one item")
    async def get_item(
        handle: Handle, item_id: ItemId, response: Response, min_seq: MinSeq = None
    ) -> m.ItemAnswer:
        state = await state_of(handle, min_seq)
        item = item_or_404(state, handle, item_id)
        return m.ItemAnswer.model_construct(seq=seq_of(response, state), item=item)

    @app.post("/logs/{log}/graph/scored", tags=["graph"], summary="get_scored_items")
    async def scored(
        handle: Handle,
        body: m.strict(m.ScoredQuery),
        response: Response,  # type: ignore[valid-type]
        min_seq: MinSeq = None,
    ) -> m.ScoredAnswer:
        state = await state_of(handle, min_seq)
        items = pure(get_scored_items, state.graph, body.weights, body.options)
        return m.ScoredAnswer.model_construct(seq=seq_of(response, state), items=items)

    @app.post(
        "/logs/{log}/graph/smart_retrieve",
        tags=["graph"],
        summary="score, contradiction policy, diversity, budget pack (named cost function)",
    )
    async def smart(
        handle: Handle,
        body: m.strict(m.SmartRetrieveQuery),
        response: Response,  # type: ignore[valid-type]
        min_seq: MinSeq = None,
    ) -> m.ScoredAnswer:
        state = await state_of(handle, min_seq)
        items = pure(
            smart_retrieve,
            state.graph,
            budget=body.budget,
            cost_fn=cost_function(body.cost),
            weights=body.weights,
            filter=body.filter,
            contradictions=body.contradictions,
            diversity=body.diversity,
        )
        return m.ScoredAnswer.model_construct(seq=seq_of(response, state), items=items)

    @app.get(
        "/logs/{log}/graph/items/{item_id}/support_tree",
        tags=["graph"],
        summary="the provenance tree of an item, flat in pre-order",
    )
    async def support_tree(
        handle: Handle, item_id: ItemId, response: Response, min_seq: MinSeq = None
    ) -> m.SupportTreeAnswer:
        state = await state_of(handle, min_seq)
        item_or_404(state, handle, item_id)
        root = get_support_tree(state.graph, item_id)
        nodes: list[m.SupportNodeOut] = []
        stack = [root] if root is not None else []
        while stack:
            node = stack.pop()
            nodes.append(
                m.SupportNodeOut.model_construct(
                    item=node.item, parents=[p.item.id for p in node.parents]
                )
            )
            stack.extend(reversed(node.parents))
        return m.SupportTreeAnswer.model_construct(
            seq=seq_of(response, state), root=item_id, nodes=nodes
        )

    def item_list_route(path: str, summary: str, query: Any) -> None:
        async def endpoint(
            handle: Handle, item_id: ItemId, response: Response, min_seq: MinSeq = None
        ) -> m.ItemListAnswer:
            state = await state_of(handle, min_seq)
            item_or_404(state, handle, item_id)
            items = pure(query, state.graph, item_id)
            return m.ItemListAnswer.model_construct(seq=seq_of(response, state), items=items)

        endpoint.__name__ = "item_" + path.replace("/", "_")
        app.get(f"/logs/{{log}}/graph/items/{{item_id}}/{path}", tags=["graph"], summary=summary)(
            endpoint
        )

    item_list_route("support_set", "get_support_set: the item, then its ancestors", get_support_set)
    item_list_route("aliases", "get_aliases: direct alias targets", get_aliases)
    item_list_route("alias_group", "get_alias_group: the whole alias component", get_alias_group)
    item_list_route("parents", "get_parents", get_parents)
    item_list_route("children", "get_children", get_children)

    @app.get(
        "/logs/{log}/graph/items/{item_id}/dependents",
        tags=["graph"],
        summary="get_dependents: children, or all descendants",
    )
    async def dependents(
        handle: Handle,
        item_id: ItemId,
        response: Response,
        transitive: Annotated[bool, Query()] = False,
        min_seq: MinSeq = None,
    ) -> m.ItemListAnswer:
        state = await state_of(handle, min_seq)
        item_or_404(state, handle, item_id)
        items = get_dependents(state.graph, item_id, transitive=transitive)
        return m.ItemListAnswer.model_construct(seq=seq_of(response, state), items=items)

    @app.get(
        "/logs/{log}/graph/items/{item_id}/related",
        tags=["graph"],
        summary="get_related_items: items joined by active edges",
    )
    async def related(
        handle: Handle,
        item_id: ItemId,
        response: Response,
        direction: Annotated[Literal["from", "to", "both"], Query()] = "both",
        min_seq: MinSeq = None,
    ) -> m.ItemListAnswer:
        state = await state_of(handle, min_seq)
        item_or_404(state, handle, item_id)
        items = get_related_items(state.graph, item_id, direction)
        return m.ItemListAnswer.model_construct(seq=seq_of(response, state), items=items)

    @app.get("/logs/{log}/graph/contradictions", tags=["graph"], summary="get_contradictions")
    async def contradictions(
        handle: Handle,
        response: Response,
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> m.ContradictionsAnswer:
        state = await state_of(handle, min_seq)
        found = page(get_contradictions(state.graph), offset, limit)
        return m.ContradictionsAnswer.model_construct(
            seq=seq_of(response, state),
            contradictions=[m.Contradiction.model_construct(**c._asdict()) for c in found],
        )

    @app.get("/logs/{log}/graph/stale", tags=["graph"], summary="get_stale_items")
    async def stale(
        handle: Handle,
        response: Response,
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> m.StaleAnswer:
        state = await state_of(handle, min_seq)
        found = page(get_stale_items(state.graph), offset, limit)
        return m.StaleAnswer.model_construct(
            seq=seq_of(response, state),
            stale=[m.StaleItem.model_construct(**s._asdict()) for s in found],
        )

    @app.post("/logs/{log}/graph/edges/query", tags=["graph"], summary="get_edges")
    async def query_edges(
        handle: Handle,
        body: m.strict(m.EdgesQuery),
        response: Response,  # type: ignore[valid-type]
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> m.EdgesAnswer:
        state = await state_of(handle, min_seq)
        edges = page(pure(get_edges, state.graph, body.filter), offset, limit)
        return m.EdgesAnswer.model_construct(seq=seq_of(response, state), edges=edges)

    @app.get("/logs/{log}/graph/edges/{edge_id}", tags=["graph"], summary="one edge")
    async def get_edge(
        handle: Handle, edge_id: str, response: Response, min_seq: MinSeq = None
    ) -> m.EdgeAnswer:
        state = await state_of(handle, min_seq)
        edge = found_or_404(
            get_edge_by_id(state.graph, edge_id), "edge_id", "edge", edge_id, state, handle
        )
        return m.EdgeAnswer.model_construct(seq=seq_of(response, state), edge=edge)

    @app.post("/logs/{log}/graph/intents/query", tags=["graph"], summary="get_intents")
    async def query_intents(
        handle: Handle,
        body: m.strict(m.IntentsQuery),
        response: Response,  # type: ignore[valid-type]
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> m.IntentsAnswer:
        state = await state_of(handle, min_seq)
        intents = page(pure(get_intents, state.intents, body.filter), offset, limit)
        return m.IntentsAnswer.model_construct(seq=seq_of(response, state), intents=intents)

    @app.get("/logs/{log}/graph/intents/{intent_id}", tags=["graph"], summary="one intent")
    async def get_intent(
        handle: Handle, intent_id: str, response: Response, min_seq: MinSeq = None
    ) -> m.IntentAnswer:
        state = await state_of(handle, min_seq)
        intent = found_or_404(
            get_intent_by_id(state.intents, intent_id),
            "intent_id",
            "intent",
            intent_id,
            state,
            handle,
        )
        return m.IntentAnswer.model_construct(seq=seq_of(response, state), intent=intent)

    @app.post("/logs/{log}/graph/tasks/query", tags=["graph"], summary="get_tasks")
    async def query_tasks(
        handle: Handle,
        body: m.strict(m.TasksQuery),
        response: Response,  # type: ignore[valid-type]
        limit: Limit = None,
        offset: Offset = 0,
        min_seq: MinSeq = None,
    ) -> m.TasksAnswer:
        state = await state_of(handle, min_seq)
        tasks = page(pure(get_tasks, state.tasks, body.filter), offset, limit)
        return m.TasksAnswer.model_construct(seq=seq_of(response, state), tasks=tasks)

    @app.get("/logs/{log}/graph/tasks/{task_id}", tags=["graph"], summary="one task")
    async def get_task(
        handle: Handle, task_id: str, response: Response, min_seq: MinSeq = None
    ) -> m.TaskAnswer:
        state = await state_of(handle, min_seq)
        task = found_or_404(
            get_task_by_id(state.tasks, task_id), "task_id", "task", task_id, state, handle
        )
        return m.TaskAnswer.model_construct(seq=seq_of(response, state), task=task)

    @app.get("/logs/{log}/graph/stats", tags=["graph"], summary="get_stats")
    async def stats(handle: Handle, response: Response, min_seq: MinSeq = None) -> m.StatsAnswer:
        state = await state_of(handle, min_seq)
        return m.StatsAnswer.model_construct(
            seq=seq_of(response, state), stats=m.GraphStats.of(get_stats(state.graph))
        )

    @app.post("/logs/{log}/graph/export_slice", tags=["graph"], summary="export_slice")
    async def export(
        handle: Handle,
        body: m.strict(m.ExportQuery),
        response: Response,  # type: ignore[valid-type]
        min_seq: MinSeq = None,
    ) -> m.ExportAnswer:
        state = await state_of(handle, min_seq)
        found = pure(export_slice, state.graph, state.intents, state.tasks, options=body)
        return m.ExportAnswer.model_construct(seq=seq_of(response, state), slice=found)

    # -- live ---------------------------------------------------------------------------------

    @app.get(
        "/logs/{log}/lifecycle",
        tags=["live"],
        summary="server-sent events: the lifecycle stream from an offset",
        description="Each event's id is its lifecycle offset; reconnect with Last-Event-ID "
        "to resume after it (it takes precedence over from_offset). `limit` ends the "
        "stream after that many events. All streams of a log are served by one shared "
        "reader; at most --max-streams are open at once (503 beyond).",
        response_class=StreamingResponse,
        responses={
            200: {"content": {"text/event-stream": {}}},
            503: {"model": m.ErrorBody, "description": "too many streams open, or not ready"},
        },
    )
    async def lifecycle(
        handle: Handle,
        from_offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int | None, Query(ge=1)] = None,
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
        handle.current()
        if handle.memory is None:
            raise ApiError(503, handle.not_ready_message())
        if not streams.try_acquire():
            raise ApiError(
                503,
                f"lifecycle: {streams.limit} streams are open, the daemon's limit "
                "(--max-streams); retry later",
            )
        hub = handle.lifecycle_hub(settings.hub)
        stream = hub_stream(hub, start, limit=limit, keepalive=settings.sse_keepalive)
        return _SlotStreamingResponse(
            streams.release,
            stream,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return app


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


def _projector_out(handle: LogHandle) -> m.ProjectorOut | None:
    report = handle.projector
    if handle.mode != "kafka":
        return None
    if report is None:
        return m.ProjectorOut(state="unknown", cause="not asked yet")
    status = report.status
    head = handle.head()
    lag = None
    if status is not None and head is not None:
        lag = max(0, head - (-1 if status.folded_seq is None else status.folded_seq))
    return m.ProjectorOut(
        state=report.state,
        cause=report.cause,
        owner=None if status is None else status.owner,
        heartbeat_age_s=None if report.age_s is None else round(report.age_s, 3),
        folded_seq=None if status is None else status.folded_seq,
        published_seq=None if status is None else status.published_seq,
        lag=lag,
        lifecycle_lag=handle.lifecycle_lag(),
    )


def _summary(handle: LogHandle) -> m.LogSummary:
    """A log as /readyz, /logs and /logs/NAME report it (what its threads last saw)."""
    state = handle.state
    health = handle.health()
    hydrated = handle.ready.is_set()
    return m.LogSummary(
        name=handle.name,
        mode=handle.mode,  # type: ignore[arg-type]
        ready=health.ready,
        status=health.status,
        hydrated=hydrated,
        seq=None if state is None else state.last_seq,
        head=handle.head() if hydrated else None,
        lag=handle.lag() if hydrated else 0,
        error=health.cause,
        projector=_projector_out(handle),
    )
