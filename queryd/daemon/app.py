"""The query daemon's HTTP app: FastAPI routers around the pure queries.

`create_app(locations)` builds the app; its lifespan hydrates, follows and probes every
log in background threads (`queryd.daemon.handles`). Reads take the current state of a
log (or wait, bounded, for `min_seq`), call a pure query of `queryd.audit` /
`queryd.graph`, and answer with the seq the state reflects, in the body (`seq`) and the
`X-Memstream-Seq` header. No route makes a blocking call on the event loop: what needs
the broker, Redis or the disk is done by those threads, whose last findings the routes
read; heavy answers (`/state`, `/events` pages) are built and serialized in a small pool
of threads. The routes are grouped by router (`queryd.daemon.routes`): service, audit,
graph, live.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from producers.keys.agent_keys import AgentKeyring
from queryd.daemon.access import AccessControl, TokenVerifier
from queryd.daemon.dependencies import DaemonContext
from queryd.daemon.errors import install_error_handlers
from queryd.daemon.guards import BodyLimit, HostAllowList
from queryd.daemon.handles import LogRegistry
from queryd.daemon.heavy import HeavyPool
from queryd.daemon.metrics import Metrics, MetricsMiddleware
from queryd.daemon.routes import audit, evidence, graph, history, live, service
from queryd.daemon.settings import DaemonSettings
from queryd.daemon.streams import StreamLimit

__all__ = ["ROUTERS", "create_app"]

ROUTERS = (
    service.router,
    audit.router,
    history.router,
    graph.router,
    live.router,
    evidence.router,
)  # in the order they match


def create_app(
    logs: Iterable[str] | LogRegistry,
    settings: DaemonSettings | None = None,
) -> FastAPI:
    """The daemon over the logs at these locations (or an existing registry); its parts
    are in ``app.state.daemon`` (a `DaemonContext`)."""
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
            idle_seconds=settings.idle_seconds,
        )
    )
    streams = StreamLimit(settings.max_streams)
    access = (
        None
        if settings.tokens is None
        else TokenVerifier.open(settings.tokens, settings.tokens_refresh)
    )
    daemon = DaemonContext(
        registry=registry,
        settings=settings,
        metrics=Metrics(registry, streams),
        streams=streams,
        heavy=HeavyPool(settings.heavy_workers),
        access=access,
        keyring=None if settings.agent_keys is None else AgentKeyring(settings.agent_keys),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Counted: the logs stop when the last user (this lifespan, another one over the
        # same registry, a caller that acquired it first) releases them.
        registry.acquire(asyncio.get_running_loop())
        if access is not None:
            access.start()
        try:
            yield
        finally:
            if access is not None:
                await asyncio.to_thread(access.stop)
            await asyncio.to_thread(registry.release)
            daemon.heavy.shutdown()

    app = FastAPI(
        title="memstream queryd",
        version="0.1.0",
        summary="Reads of memstream logs: audit memory and the epistemic graph, with the seq "
        "each answer reflects.",
        lifespan=lifespan,
    )
    app.state.daemon = daemon
    app.add_middleware(BodyLimit, max_body=settings.max_body_bytes)
    # Inside the Host check and the metrics (refusals are counted and access-logged),
    # outside the body limit (a request without a token is refused before its body is read).
    from queryd.ui.router import install as install_ui
    from queryd.ui.router import refusal_page

    if access is not None:
        app.add_middleware(AccessControl, verifier=access, page_refusal=refusal_page)
    app.add_middleware(HostAllowList, allowed=settings.allowed_hosts)
    app.add_middleware(MetricsMiddleware, metrics=daemon.metrics)
    install_error_handlers(app)
    # The routers' routes themselves, not `include_router`: this FastAPI resolves an
    # included router on every request, which costs a cheap read 10-50 us more.
    for router in ROUTERS:
        app.router.routes.extend(router.routes)
    # The web view over these routes, after them (its paths are under /ui/). Imported
    # above, in this function: queryd.ui's modules import this package's, whose __init__
    # imports this module.
    install_ui(app)
    return app
