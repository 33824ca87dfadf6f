"""Connections the daemon accepts: a cap, and a deadline for reading each request.

What uvicorn offers and what it lacks (0.29-0.55): ``timeout_keep_alive`` closes a
connection idle *between* requests, ``h11_max_incomplete_event_size`` bounds the request
head, ``limit_concurrency`` answers 503 once that many connections or requests are open.
It has no deadline for *reading* a request: a client that connects and sends nothing, or
sends its headers a byte at a time (slowloris), holds a connection and a file descriptor
for ever. And ``limit_concurrency`` does not help against that: once slow sockets fill
it, every new request (``/healthz`` included) gets a 503, and past the process's file
descriptor limit the accept loop fails and logs on every retry.

`guarded_protocol` wraps uvicorn's h11 protocol with both:

- **a read deadline**: a request must arrive whole (head and body) within
  `read_timeout` seconds of its first byte (of the connection, for the first request);
  a connection that misses it is closed;
- **a connection cap**, below the file descriptor limit: at the cap, a new connection
  closes the oldest one that is not serving a request (waiting for a request head, or
  idle between requests) instead of being refused. Slow sockets are evicted oldest
  first, so a client that sends its request at once (a health probe) gets in.
  A connection is only evicted once it has had its chance: bytes read from it, or
  `GRACE_S` since it was accepted. Without that, a probe accepted early in a burst of
  slow sockets was evicted by the later ones before its request (already sent) was read,
  and the probe saw its connection reset. When no open connection is evictable, the new
  one is admitted anyway up to one accept burst (`BACKLOG`) past the cap; past that it is
  answered 503 and closed.

asyncio accepts up to ``backlog`` connections in one go before any of them reaches the
protocol (where the cap is applied), and an evicted socket is closed an iteration later;
so the cap leaves room for two such bursts below the limit, and the daemon listens with a
small `BACKLOG` (uvicorn's default of 2048 would let one burst exhaust the descriptors,
and then asyncio's accept loop logs the failure once per queued connection).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["BACKLOG", "GRACE_S", "ConnectionGuard", "default_max_connections", "guarded_protocol"]

log = logging.getLogger("memstream.queryd.connections")

_BUSY_MESSAGE = b"connections: every connection is serving a request (the daemon's cap)"
_BUSY_BODY = b'{"detail":"%s","message":"%s","seq":null}' % (_BUSY_MESSAGE, _BUSY_MESSAGE)
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"connection: close\r\nretry-after: 1\r\ncontent-length: "
    + str(len(_BUSY_BODY)).encode()
    + b"\r\n\r\n"
    + _BUSY_BODY
)


BACKLOG = 64  # connections accepted at most in one go (and queued by the kernel)
GRACE_S = 1.0  # a silent connection is not evicted for this long after it is accepted


def default_max_connections(backlog: int = BACKLOG) -> int:
    """The file descriptor limit less a reserve for the logs, Kafka clients and threads,
    and less two accept bursts (see the module docstring)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 65536
    return max(16, soft - max(64, soft // 8) - 2 * backlog)


class ConnectionGuard:
    """The open connections of one server, oldest first, and what was done to them."""

    def __init__(self, max_connections: int, read_timeout: float) -> None:
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.open: dict[Any, None] = {}  # insertion order: oldest first
        self.evicted = 0
        self.refused = 0
        self.timed_out = 0

    def admit(self, protocol: Any) -> bool:
        """Make room for `protocol` (evicting the oldest evictable connection) or say no.

        Past the cap with nothing evictable (every connection busy, or too fresh to have
        been read), `protocol` is admitted up to `BACKLOG` past the cap, then refused."""
        if len(self.open) >= self.max_connections:
            victim = next((p for p in self.open if p.evictable()), None)
            if victim is not None:
                self.evicted += 1
                self.open.pop(victim, None)
                victim.evict()
            elif len(self.open) >= self.max_connections + BACKLOG:
                self.refused += 1
                return False
        self.open[protocol] = None
        return True

    def forget(self, protocol: Any) -> None:
        self.open.pop(protocol, None)


def guarded_protocol(guard: ConnectionGuard) -> type[H11Protocol]:
    """uvicorn's h11 protocol with `guard`'s cap and read deadline (pass as ``http=``)."""

    class GuardedH11Protocol(H11Protocol):
        _read_timer: asyncio.TimerHandle | None = None
        _admitted = False
        _heard = False  # bytes were read from it: it had its chance
        _accepted_at = 0.0

        # uvicorn narrows asyncio's BaseTransport to Transport here (and ignores it too).
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._accepted_at = self.loop.time()
            if not guard.admit(self):
                transport.write(_BUSY)
                transport.close()
                return
            self._admitted = True
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            guard.forget(self)
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            self._heard = True
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the first bytes of a request: it must be whole in time
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()

        def idle(self) -> bool:
            """Not serving a request: waiting for a request head, or between requests."""
            cycle = self.cycle
            return self.conn.their_state is h11.IDLE and (cycle is None or cycle.response_complete)

        def evictable(self) -> bool:
            """Idle, and had its chance: read from, or accepted `GRACE_S` ago."""
            return self.idle() and (self._heard or self.loop.time() - self._accepted_at >= GRACE_S)

        def evict(self) -> None:
            self._disarm()
            if self.transport is not None and not self.transport.is_closing():
                self.transport.abort()

        def _arm(self) -> None:
            if self._read_timer is None and self._admitted:
                self._read_timer = self.loop.call_later(guard.read_timeout, self._timed_out)

        def _disarm(self) -> None:
            timer, self._read_timer = self._read_timer, None
            if timer is not None:
                timer.cancel()

        def _timed_out(self) -> None:
            self._read_timer = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not (
                self.transport is None or self.transport.is_closing()
            ):
                guard.timed_out += 1
                log.debug(
                    "closing a connection that did not send its request in %g s", guard.read_timeout
                )
                self.transport.abort()

    return GuardedH11Protocol
