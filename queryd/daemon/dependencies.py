"""What routes are given: the daemon's shared parts, the log a path names, its state.

`DaemonContext` is what one app's routes share (its logs, settings, metrics, stream slots
and heavy pool), kept in ``app.state.daemon``. The `Served` dependency resolves the
``{log}`` of a path to a `ServedLog` (a 404 naming the served logs otherwise); a route then
takes the state to answer from with `ServedLog.state`, which waits for ``min_seq``
(read-your-writes) in the route's body, after FastAPI validated every parameter.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from producers.keys.agent_keys import AgentKeyring
from projector.record_fold import LogState
from queryd.daemon.access import TokenVerifier
from queryd.daemon.errors import ApiError
from queryd.daemon.handles import LogHandle, LogRegistry, NotReady, SeqTimeout, Unavailable
from queryd.daemon.heavy import HeavyPool
from queryd.daemon.metrics import Metrics
from queryd.daemon.params import LogName
from queryd.daemon.settings import DaemonSettings
from queryd.daemon.streams import StreamLimit
from schemas.errors import MemstreamError
from schemas.graph.errors import MemexError
from schemas.graph.items import MemoryItem

__all__ = ["DaemonContext", "Served", "ServedLog", "daemon_of", "query_or_422", "served_log"]

T = TypeVar("T")


@dataclass(frozen=True)
class DaemonContext:
    """The parts one app's routes share."""

    registry: LogRegistry
    settings: DaemonSettings
    metrics: Metrics
    streams: StreamLimit
    heavy: HeavyPool
    access: TokenVerifier | None = None  # None: access control off
    keyring: AgentKeyring | None = None  # None: no agent keys, no signed HTTP recall


def daemon_of(request: Request) -> DaemonContext:
    """The context of the app serving `request`."""
    context: DaemonContext = request.app.state.daemon
    return context


@dataclass(frozen=True, slots=True)
class ServedLog:
    """The log a request's path names, and the daemon serving it."""

    handle: LogHandle
    daemon: DaemonContext

    async def state(self, min_seq: int | None) -> LogState:
        """The state to answer from: what the log's follower last folded (reads keep
        working while the log is unavailable), or, with `min_seq`, at least that seq
        (waiting up to the daemon's `min_seq_timeout`: a 504 then)."""
        try:
            return await self.handle.at_least(min_seq, self.daemon.settings.min_seq_timeout)
        except NotReady as exc:
            raise ApiError(503, str(exc)) from None
        except Unavailable as exc:
            raise ApiError(503, str(exc), seq=exc.reached) from None
        except SeqTimeout as exc:
            raise ApiError(504, str(exc), seq=exc.reached) from None

    def found(self, found: T | None, field: str, what: str, key: object, state: LogState) -> T:
        """`found`, or a 404 naming the field and the id that matched nothing."""
        if found is None:
            raise ApiError(
                404,
                f"{field}: no {what} {key!r} in log {self.handle.name!r}",
                seq=state.last_seq,
            )
        return found

    def item(self, state: LogState, item_id: str) -> MemoryItem:
        """The memory item `item_id` of `state`, or a 404 naming it."""
        return self.found(state.graph.items.get(item_id), "item_id", "memory item", item_id, state)


async def served_log(request: Request, log: LogName) -> ServedLog:
    """The served log named in the path; 404 naming the served ones otherwise."""
    daemon = daemon_of(request)
    handle = await daemon.registry.serve(log, daemon.settings.min_seq_timeout)
    if handle is None:
        served = ", ".join(sorted(daemon.registry.handles)) or "none"
        raise ApiError(404, f"log: unknown log {log!r} (serving: {served})")
    return ServedLog(handle, daemon)


Served = Annotated[ServedLog, Depends(served_log)]


def query_or_422(query: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a pure query; what it refuses of the client's input is a 422."""
    try:
        return query(*args, **kwargs)
    except (ValueError, TypeError, MemexError, MemstreamError) as exc:
        raise ApiError(422, str(exc) or type(exc).__name__) from None
