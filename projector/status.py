"""The projector's status record: what a running projector tells readers about itself.

The projector service writes it to Redis (key `status_key(prefix)`, JSON, with a time to
live of a few lease periods) every time it renews its lease; queryd reads it to report
projector liveness and lifecycle lag in ``/readyz`` and ``/metrics``. Pure: the format
only, no Redis. The bytes come back from Redis, so `decode_status` bounds and checks them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

__all__ = ["ProjectorStatus", "status_key", "encode_status", "decode_status", "MAX_STATUS_BYTES"]

MAX_STATUS_BYTES = 4096


def status_key(prefix: str) -> str:
    """The key of a log's projector status, given the log's key prefix (`memstream:LOG:`)."""
    return f"{prefix}projector:status"


@dataclass(frozen=True)
class ProjectorStatus:
    """One projector's report.

    `folded_seq`: the last seq folded (None: nothing yet); `log_end`: the partition's end as
    the projector last saw it; `published_seq`: the seq whose lifecycle events were last
    published; `heartbeat_ms`: wall-clock time of this report (ms since the epoch);
    `lease_ms`: the lease period (a report older than a few of them is stale).
    """

    owner: str
    host: str
    pid: int
    folded_seq: int | None
    log_end: int
    published_seq: int | None
    heartbeat_ms: int
    lease_ms: int

    def lag(self) -> int:
        """Records in the log the projector had not folded at its last report."""
        return max(0, self.log_end - (-1 if self.folded_seq is None else self.folded_seq) - 1)


def encode_status(status: ProjectorStatus) -> bytes:
    return json.dumps(asdict(status), separators=(",", ":")).encode()


_INT_FIELDS = ("pid", "log_end", "heartbeat_ms", "lease_ms")
_OPTIONAL_INT_FIELDS = ("folded_seq", "published_seq")


def decode_status(raw: bytes | None) -> ProjectorStatus | None:
    """The status in `raw`; None when absent or not a status (untrusted bytes: bounded,
    every field's type checked, nothing else kept)."""
    if raw is None or len(raw) > MAX_STATUS_BYTES:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    for name in ("owner", "host"):
        if not isinstance(data.get(name), str):
            return None
    for name in _INT_FIELDS:
        if type(data.get(name)) is not int:
            return None
    for name in _OPTIONAL_INT_FIELDS:
        if data.get(name) is not None and type(data.get(name)) is not int:
            return None
    return ProjectorStatus(
        owner=data["owner"],
        host=data["host"],
        pid=data["pid"],
        folded_seq=data.get("folded_seq"),
        log_end=data["log_end"],
        published_seq=data.get("published_seq"),
        heartbeat_ms=data["heartbeat_ms"],
        lease_ms=data["lease_ms"],
    )
