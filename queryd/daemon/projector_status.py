"""The projector's liveness as queryd sees it: its status record, read back from Redis.

The projector writes `projector.status.ProjectorStatus` under `status_key(prefix)` on every
lease renewal. queryd reads it (bounded: short socket timeouts, `decode_status` checks the
bytes) and reports what it found, never blocking a request: the prober thread of each
Kafka log calls `ProjectorStatusReader.read` and the routes read the last report.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

import redis

from producers.logs.location import KafkaLocation
from projector.status import ProjectorStatus, decode_status, status_key

__all__ = ["ProjectorReport", "ProjectorStatusReader", "STALE_LEASES", "redis_address"]

log = logging.getLogger("memstream.queryd.projector")

# A heartbeat older than this many lease periods means the projector is gone: it renews its
# lease (and writes its status) several times a period while it runs.
STALE_LEASES = 3

ProjectorState = Literal["up", "stale", "missing", "unknown"]


@dataclass(frozen=True)
class ProjectorReport:
    """What queryd last learnt of a log's projector.

    `state`: ``up`` (a fresh heartbeat), ``stale`` (a heartbeat older than `STALE_LEASES`
    lease periods: the projector stopped), ``missing`` (no status record: never ran, or its
    record expired), ``unknown`` (Redis could not be asked; `cause` says why).
    """

    state: ProjectorState
    cause: str | None = None
    status: ProjectorStatus | None = None
    age_s: float | None = None

    @property
    def up(self) -> bool:
        return self.state == "up"


def redis_address(url: str) -> str:
    """HOST:PORT/DB of a Redis URL, without credentials (they never go into messages)."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return f"{host}{port}{parts.path or ''}"


class ProjectorStatusReader:
    """Reads one log's projector status from Redis, each call bounded by `timeout` s."""

    def __init__(self, location: KafkaLocation, timeout: float = 1.0) -> None:
        self.key = status_key(location.key_prefix)
        self.address = redis_address(location.redis_url)
        self._url = location.redis_url
        self._timeout = timeout
        self._client: redis.Redis | None = None

    def _redis(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(
                self._url,
                socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
                retry_on_timeout=False,
            )
        return self._client

    def read(self) -> ProjectorReport:
        try:
            raw = self._redis().get(self.key)
        except (redis.RedisError, OSError) as exc:
            return ProjectorReport(
                "unknown", f"Redis at {self.address} did not answer: {type(exc).__name__}: {exc}"
            )
        if raw is None:
            return ProjectorReport(
                "missing", f"no projector status at {self.key} in Redis (no projector running)"
            )
        status = decode_status(raw if isinstance(raw, bytes) else None)
        if status is None:
            return ProjectorReport("unknown", f"the projector status at {self.key} is malformed")
        age = max(0.0, time.time() - status.heartbeat_ms / 1000)
        stale_after = STALE_LEASES * max(status.lease_ms, 1) / 1000
        if age > stale_after:
            return ProjectorReport(
                "stale",
                f"the projector's last heartbeat was {age:.1f} s ago "
                f"(stale after {stale_after:g} s: {STALE_LEASES} lease periods)",
                status,
                age,
            )
        return ProjectorReport("up", None, status, age)

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a cache client: nothing to lose
                log.debug("closing the Redis client failed", exc_info=True)
