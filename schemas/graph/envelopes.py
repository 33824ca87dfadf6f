"""Event envelopes for an append-only log, and the strict envelope timestamp parser."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from schemas.graph.commands import MemoryLifecycleEvent
from schemas.graph.errors import InvalidTimestampError
from schemas.graph.ids import uuid7
from schemas.graph.items import Edge, MemoryItem

T = TypeVar("T")


class EventEnvelope(BaseModel, Generic[T]):
    """One log record: id (UUIDv7), namespace, type, ts (ISO-8601), trace_id, payload."""

    id: str
    namespace: str
    type: str
    ts: str
    trace_id: str | None = None
    payload: T


def now_iso() -> str:
    """Now as JavaScript's Date.toISOString() writes it: ms precision, UTC, ``Z``."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


# As the seed reads ``ts``: \d (any script's decimal digits, which int() reads), seconds
# with 1 to 3 fractional digits (ms precision), the offset Z or +hh:mm / -hh:mm.
_ISO_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(Z|[+-]\d{2}:\d{2})$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _bad_ts(ts: str, why: str) -> InvalidTimestampError:
    return InvalidTimestampError(f'Invalid envelope timestamp: "{ts}" ({why})')


def parse_iso_ms(ts: str) -> int:
    """Milliseconds since the epoch of a strict ISO-8601 timestamp.

    InvalidTimestampError unless the string is ``YYYY-MM-DDTHH:MM:SS[.f{1,3}](Z|±HH:MM)``
    naming a real calendar instant (no Feb 30, no hour 24, no leap second); a ``ts`` that
    is not a string raises TypeError (as ``re.match`` does), as in the seed.
    """
    m = _ISO_RE.match(ts)
    if m is None:
        raise _bad_ts(ts, "expected ISO 8601")
    year, month, day, hour, minute, second, frac, offset = m.groups()
    if offset == "Z":
        tz = UTC
    else:
        oh, om = int(offset[1:3]), int(offset[4:6])
        if oh > 23 or om > 59:
            raise _bad_ts(ts, "bad offset")
        sign = 1 if offset[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=oh, minutes=om))
    try:
        dt = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=tz
        )
    except ValueError:
        raise _bad_ts(ts, "calendar fields out of range") from None
    ms = int((frac or "0").ljust(3, "0"))
    return (dt - _EPOCH) // timedelta(milliseconds=1) + ms


def create_event_envelope(
    type: str,
    payload: Any,
    *,
    trace_id: str | None = None,
    namespace: str = "memory",
) -> EventEnvelope[Any]:
    """An envelope with a fresh UUIDv7 id and the current time."""
    return EventEnvelope(
        id=uuid7(),
        namespace=namespace,
        type=type,
        ts=now_iso(),
        trace_id=trace_id,
        payload=payload,
    )


def wrap_lifecycle_event(
    event: MemoryLifecycleEvent, cause_id: str, trace_id: str | None = None
) -> EventEnvelope[dict[str, Any]]:
    """Envelope of a lifecycle event, as the seed builds it: its namespace and type, and a
    payload of the event's set fields (``namespace``, ``type``, then ``item`` / ``edge`` /
    ``cause_type`` when not None; the models themselves, not dumps) plus ``cause_id``."""
    payload: dict[str, Any] = {"namespace": event.namespace, "type": event.type}
    if event.item is not None:
        payload["item"] = event.item
    if event.edge is not None:
        payload["edge"] = event.edge
    if event.cause_type is not None:
        payload["cause_type"] = event.cause_type
    payload["cause_id"] = cause_id
    return EventEnvelope(
        id=uuid7(),
        namespace=event.namespace,
        type=event.type,
        ts=now_iso(),
        trace_id=trace_id,
        payload=payload,
    )


def wrap_state_event(
    item: MemoryItem, cause_id: str, trace_id: str | None = None
) -> EventEnvelope[dict[str, Any]]:
    """A ``state.memory`` snapshot of an item (the model itself in the payload)."""
    return EventEnvelope(
        id=uuid7(),
        namespace="memory",
        type="state.memory",
        ts=now_iso(),
        trace_id=trace_id,
        payload={"item": item, "cause_id": cause_id},
    )


def wrap_edge_state_event(
    edge: Edge, cause_id: str, trace_id: str | None = None
) -> EventEnvelope[dict[str, Any]]:
    """A ``state.edge`` snapshot of an edge (the model itself in the payload)."""
    return EventEnvelope(
        id=uuid7(),
        namespace="memory",
        type="state.edge",
        ts=now_iso(),
        trace_id=trace_id,
        payload={"edge": edge, "cause_id": cause_id},
    )


__all__ = [
    "EventEnvelope",
    "create_event_envelope",
    "now_iso",
    "parse_iso_ms",
    "wrap_edge_state_event",
    "wrap_lifecycle_event",
    "wrap_state_event",
]
