"""Prometheus metrics: request latency, and per log its current seq, head and lag."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queryd.daemon.handles import LogRegistry

__all__ = ["Metrics", "MetricsMiddleware"]

_access = logging.getLogger("memstream.queryd.access")

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _LogCollector(Collector):
    def __init__(self, logs: LogRegistry) -> None:
        self._logs = logs

    def collect(self) -> Iterator[Metric]:
        seq = GaugeMetricFamily(
            "memstream_queryd_log_seq", "the seq the served state reflects (-1: none)",
            labels=["log"],
        )  # fmt: skip
        head = GaugeMetricFamily(
            "memstream_queryd_log_head", "the seq of the last record in the log (-1: none)",
            labels=["log"],
        )  # fmt: skip
        lag = GaugeMetricFamily(
            "memstream_queryd_log_lag_records",
            "records in the log that the served state does not reflect yet",
            labels=["log"],
        )
        ready = GaugeMetricFamily(
            "memstream_queryd_log_ready", "1 once the log is hydrated", labels=["log"]
        )
        for name, handle in self._logs.handles.items():
            is_ready = handle.ready.is_set()
            ready.add_metric([name], 1.0 if is_ready else 0.0)
            state = handle.state
            last = -1 if state is None or state.last_seq is None else state.last_seq
            seq.add_metric([name], float(last))
            if is_ready:
                try:
                    h = handle.head()
                except Exception:
                    h = None
                head.add_metric([name], float(-1 if h is None else h))
                lag.add_metric([name], float(max(0, (-1 if h is None else h) - last)))
        yield from (seq, head, lag, ready)


class Metrics:
    def __init__(self, logs: LogRegistry) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "memstream_queryd_request_seconds",
            "time from request to response start, by route template and status",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=_BUCKETS,
        )
        self.registry.register(_LogCollector(logs))

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Times each HTTP request up to its response start; logs one access line at the end."""

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
                    scope.get("method", "?"), template, str(message["status"])
                ).observe(time.perf_counter() - start)
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            _access.info(
                "%s %s %d %.1fms",
                scope.get("method", "?"),
                scope.get("path", "?"),
                status["code"],
                (time.perf_counter() - start) * 1000,
                extra={
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status["code"],
                    "duration_ms": round((time.perf_counter() - start) * 1000, 3),
                },
            )

