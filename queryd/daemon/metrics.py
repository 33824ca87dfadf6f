"""Prometheus metrics: request latency; per log its seq, head, lag, readiness and projector.

Labels are bounded: the method is one of the standard HTTP methods or ``other``, the route
is the matched route template or ``unmatched``, the status a code the daemon sent. So no
request, whatever its method or path, adds a series of its own. Per-log values are what
the log's threads last saw (`LogHandle`): rendering the metrics asks nothing of the logs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queryd.daemon.handles import LogRegistry
from queryd.daemon.jsonlog import printable
from queryd.daemon.streams import StreamLimit

__all__ = ["Metrics", "MetricsMiddleware", "METHODS", "method_label"]

_access = logging.getLogger("memstream.queryd.access")

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


def method_label(method: str | None) -> str:
    """The method as a metric label: a standard method, or ``other``."""
    return method if method in METHODS else "other"


class _LogCollector(Collector):
    def __init__(self, logs: LogRegistry, streams: StreamLimit | None) -> None:
        self._logs = logs
        self._streams = streams
        self.connections: Callable[[], Any] | None = None  # the server's ConnectionGuard

    def collect(self) -> Iterator[Metric]:
        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["log"])

        seq = gauge("memstream_queryd_log_seq", "the seq the served state reflects (-1: none)")
        head = gauge(
            "memstream_queryd_log_head", "the seq of the last record in the log (-1: none)"
        )
        lag = gauge(
            "memstream_queryd_log_lag_records",
            "records in the log that the served state does not reflect yet",
        )
        ready = gauge("memstream_queryd_log_ready", "1 once the log is hydrated")
        available = gauge(
            "memstream_queryd_log_available",
            "1 when the log is hydrated and its storage (broker, disk) answers",
        )
        up = gauge(
            "memstream_queryd_projector_up",
            "1 when the log's projector has a fresh heartbeat (Kafka logs)",
        )
        age = gauge(
            "memstream_queryd_projector_heartbeat_age_seconds",
            "seconds since the projector's last heartbeat (Kafka logs)",
        )
        plag = gauge(
            "memstream_queryd_projector_lag_records",
            "records the projector had not folded at its last heartbeat",
        )
        llag = gauge(
            "memstream_queryd_lifecycle_lag_records",
            "records whose lifecycle events are not published yet (Kafka logs)",
        )
        for name, handle in self._logs.handles.items():
            is_ready = handle.ready.is_set()
            ready.add_metric([name], 1.0 if is_ready else 0.0)
            available.add_metric([name], 1.0 if handle.health().ready else 0.0)
            state = handle.state
            last = -1 if state is None or state.last_seq is None else state.last_seq
            seq.add_metric([name], float(last))
            if is_ready:
                h = handle.head()
                head.add_metric([name], float(-1 if h is None else h))
                lag.add_metric([name], float(handle.lag()))
            report = handle.projector
            if handle.mode == "kafka":
                up.add_metric([name], 1.0 if report is not None and report.up else 0.0)
            if report is not None and report.status is not None:
                if report.age_s is not None:
                    age.add_metric([name], report.age_s)
                h = handle.head()
                folded = report.status.folded_seq
                if h is not None:
                    plag.add_metric([name], float(max(0, h - (-1 if folded is None else folded))))
                lifecycle_lag = handle.lifecycle_lag()
                if lifecycle_lag is not None:
                    llag.add_metric([name], float(lifecycle_lag))
        yield from (seq, head, lag, ready, available, up, age, plag, llag)
        streams = self._streams
        if streams is not None:
            yield GaugeMetricFamily(
                "memstream_queryd_lifecycle_streams",
                "lifecycle (SSE) streams open now",
                value=streams.open,
            )
            yield GaugeMetricFamily(
                "memstream_queryd_lifecycle_streams_limit",
                "lifecycle streams allowed at once (--max-streams)",
                value=streams.limit,
            )
            yield CounterMetricFamily(
                "memstream_queryd_lifecycle_streams_refused",
                "lifecycle streams refused at the limit",
                value=streams.refused,
            )
        guard = self.connections() if self.connections is not None else None
        if guard is not None:
            yield GaugeMetricFamily(
                "memstream_queryd_connections",
                "HTTP connections open now",
                value=len(guard.open),
            )
            for what, doc in (
                ("evicted", "idle connections closed to admit a new one"),
                ("refused", "connections refused at the cap (all busy)"),
                ("timed_out", "connections that did not send a request in time"),
            ):
                yield CounterMetricFamily(
                    f"memstream_queryd_connections_{what}", doc, value=getattr(guard, what)
                )


class Metrics:
    def __init__(self, logs: LogRegistry, streams: StreamLimit | None = None) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "memstream_queryd_request_seconds",
            "time from request to response start, by method (standard or other), route "
            "template and status",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=_BUCKETS,
        )
        self.logs = _LogCollector(logs, streams)
        self.registry.register(self.logs)

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Times each HTTP request up to its response start; logs one access line at the end
    (method and path escaped: a ``%0A`` in a path cannot start a line of its own)."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: dict[str, Any] = {"code": 500}

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                self.metrics.latency.labels(
                    method_label(scope.get("method")), template, str(message["status"])
                ).observe(time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            if _access.isEnabledFor(logging.INFO):
                self._log(scope, status["code"], start)

    @staticmethod
    def _log(scope: Scope, status: int, start: float) -> None:
        method = printable(str(scope.get("method", "?")), 20)
        path = printable(str(scope.get("path", "?")), 2000)
        duration = (time.perf_counter() - start) * 1000
        extra: dict[str, Any] = {
            "method": method,
            "path": path,
            "status": status,
            "duration_ms": round(duration, 3),
        }
        # With access control on: who (the token's agent and id; never the token itself).
        grant = scope.get("memstream.grant")
        if grant is None:
            _access.info("%s %s %d %.1fms", method, path, status, duration, extra=extra)
            return
        extra["agent"], extra["token_id"] = printable(grant.agent, 255), grant.token_id
        _access.info(
            "%s %s %d %.1fms agent=%s token=%s",
            method,
            path,
            status,
            duration,
            extra["agent"],
            grant.token_id,
            extra=extra,
        )
