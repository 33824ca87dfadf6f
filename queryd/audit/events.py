"""The audit log in seq order with `Memory.events`' filters, one page at a time (pure)."""

from __future__ import annotations

from bisect import bisect_right
from typing import NamedTuple

from projector.audit.state import MemoryState
from schemas.audit import EVENT_KINDS, Deletion, Document, Erasure, Message, Recall

__all__ = ["EventsPage", "select_events"]

AnyEvent = Message | Document | Recall | Deletion | Erasure


class EventsPage(NamedTuple):
    """Events in ascending seq order; `next_after_seq` continues the listing (None: done)."""

    events: list[AnyEvent]
    next_after_seq: int | None


def select_events(
    state: MemoryState,
    *,
    kind: str | None = None,
    session_id: str | None = None,
    after_seq: int | None = None,
    up_to_seq: int | None = None,
    limit: int | None = None,
) -> EventsPage:
    """`Memory.events`, paged: at most `limit` events after `after_seq`."""
    if kind is not None and kind not in EVENT_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(EVENT_KINDS)}, got {kind!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit: expected a non-negative integer, got {limit}")
    events = state.at(up_to_seq).events
    if after_seq is not None:
        events = events[bisect_right(events, after_seq, key=lambda e: e.seq) :]  # type: ignore[arg-type,return-value]
    out: list[AnyEvent] = []
    for event in events:
        if kind is not None and event.kind != kind:
            continue
        if session_id is not None and event.session_id != session_id:
            continue
        if limit is not None and len(out) == limit:
            return EventsPage(out, out[-1].seq if out else after_seq)
        out.append(event)
    return EventsPage(out, None)
