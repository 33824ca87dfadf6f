"""Event envelopes for an append-only log, and the strict envelope timestamp parser."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from schemas.graph.commands import MemoryLifecycleEvent
from schemas.graph.errors import InvalidTimestampError
from schemas.graph.ids import uuid7
from schemas.graph.items import Edge, MemoryItem

T = TypeVar("T")


class EventEnvelope(BaseModel, Generic[T]):
    """One log record: id (UUIDv7), namespace, type, ts (ISO-8601), trace_id, payload."""

    model_config = ConfigDict(frozen=True)

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


# ASCII digits only ([0-9], not \d, which also matches other scripts' digits); seconds may
# carry 1 to 3 fractional digits (ms precision), the offset is Z or +hh:mm / -hh:mm.
_ISO_RE = re.compile(
    r"^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})"
    r"(?:\.([0-9]{1,3}))?(Z|[+-][0-9]{2}:[0-9]{2})$"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_iso_ms(ts: str) -> int:
    """Milliseconds since the epoch of a strict ISO-8601 timestamp.

    InvalidTimestampError unless the string is ``YYYY-MM-DDTHH:MM:SS[.f{1,3}](Z|±HH:MM)``
    naming a real calendar instant (no Feb 30, no hour 24, no leap second).
    """
    if not isinstance(ts, str):
        raise InvalidTimestampError(ts, "timestamp must be a string")
    m = _ISO_RE.match(ts)
    if m is None:
        raise InvalidTimestampError(ts, "not a strict ISO-8601 timestamp with offset")
    year, month, day, hour, minute, second, frac, offset = m.groups()
    if offset == "Z":
        tz = UTC
    else:
        oh, om = int(offset[1:3]), int(offset[4:6])
        if oh > 23 or om > 59:
            raise InvalidTimestampError(ts, "invalid UTC offset")
        sign = 1 if offset[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=oh, minutes=om))
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second),
                      tzinfo=tz)  # fmt: skip
    except ValueError as exc:
        raise InvalidTimestampError(ts, f"invalid calendar date/time ({exc})") from None
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
    return EventEnvelope[Any](
        id=uuid7(), namespace=namespace, type=type, ts=now_iso(), trace_id=trace_id,
        payload=payload,
    )  # fmt: skip


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def wrap_lifecycle_event(
    event: MemoryLifecycleEvent, cause_id: str, trace_id: str | None = None
) -> EventEnvelope[dict[str, Any]]:
    """Envelope of a lifecycle event: its type and namespace; payload holds its set fields
    (item / edge / cause_type) plus ``cause_id``."""
    payload: dict[str, Any] = {}
    if event.item is not None:
        payload["item"] = _dump(event.item)
    if event.edge is not None:
        payload["edge"] = _dump(event.edge)
    if event.cause_type is not None:
        payload["cause_type"] = event.cause_type
    payload["cause_id"] = cause_id
    return EventEnvelope[dict[str, Any]](
        id=uuid7(), namespace=event.namespace, type=event.type, ts=now_iso(),
        trace_id=trace_id, payload=payload,
    )  # fmt: skip


def wrap_state_event(
    item: MemoryItem, cause_id: str, trace_id: str | None = None
) -> EventEnvelope[dict[str, Any]]:
    """A ``state.memory`` snapshot of an item."""
    return EventEnvelope[dict[str, Any]](
        id=uuid7(), namespace="memory", type="state.memory", ts=now_iso(), trace_id=trace_id,
        payload={"item": _dump(item), "cause_id": cause_id},
    )  # fmt: skip


def wrap_edge_state_event(
    edge: Edge, cause_id: str, trace_id: str | None = None
) -> EventEnvelope[dict[str, Any]]:
    """A ``state.edge`` snapshot of an edge."""
    return EventEnvelope[dict[str, Any]](
        id=uuid7(), namespace="memory", type="state.edge", ts=now_iso(), trace_id=trace_id,
        payload={"edge": _dump(edge), "cause_id": cause_id},
    )  # fmt: skip


__all__ = [
    "EventEnvelope",
    "create_event_envelope",
    "now_iso",
    "parse_iso_ms",
    "wrap_edge_state_event",
    "wrap_lifecycle_event",
    "wrap_state_event",
]
