"""The audit log in seq order with `Memory.events`' filters, one page at a time (pure).

Beyond `Memory.events`' filters (kind, session), a page may be narrowed by actor and by
text (a case-insensitive substring of a message's content, a document's name or text, a
recall's query, a deletion's reason), and read backwards (`before_seq`: the last `limit`
matching events before it), so a timeline pages through millions of records either way
without loading them all. The text filter never matches an event deleted in `state`
(the newest state, even when the page reads an earlier one): what a deleted event said
is not searchable, as it is not readable in a view.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from typing import NamedTuple

from projector.audit.state import MemoryState
from schemas.audit import EVENT_KINDS, Deletion, Document, Erasure, Message, Recall

__all__ = ["EventsPage", "event_text", "select_events"]

AnyEvent = Message | Document | Recall | Deletion | Erasure

MAX_TEXT_FILTER = 1_000  # characters of a text filter


class EventsPage(NamedTuple):
    """Events in ascending seq order; `next_after_seq` continues the listing (None: done);
    `prev_before_seq` reads the page before it (None: no matching event precedes it)."""

    events: list[AnyEvent]
    next_after_seq: int | None
    prev_before_seq: int | None = None


def event_text(event: AnyEvent) -> str:
    """The words of an event a text filter looks in."""
    if isinstance(event, Message):
        return event.content
    if isinstance(event, Document):
        return f"{event.name}\n{event.text}"
    if isinstance(event, Recall):
        return event.query
    return event.reason


def _seq(event: AnyEvent) -> int:
    return event.seq  # type: ignore[return-value]


def select_events(
    state: MemoryState,
    *,
    kind: str | None = None,
    session_id: str | None = None,
    actor: str | None = None,
    text: str | None = None,
    after_seq: int | None = None,
    before_seq: int | None = None,
    up_to_seq: int | None = None,
    limit: int | None = None,
) -> EventsPage:
    """`Memory.events`, paged: at most `limit` matching events after `after_seq` (or, with
    `before_seq`, the last `limit` of them before it), in ascending seq order."""
    if kind is not None and kind not in EVENT_KINDS:
        raise ValueError(f"kind: expected one of {', '.join(EVENT_KINDS)}, got {kind!r}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit: expected a non-negative integer, got {limit}")
    if text is not None and len(text) > MAX_TEXT_FILTER:
        raise ValueError(f"text: expected at most {MAX_TEXT_FILTER} characters, got {len(text)}")
    if after_seq is not None and before_seq is not None:
        raise ValueError("before_seq: give after_seq or before_seq, not both")
    memory = state.at(up_to_seq)
    events: Sequence[AnyEvent] = memory.events
    needle = text.casefold() if text else None
    deleted = state.deleted  # of the newest state: deleted later is deleted too

    def matches(event: AnyEvent) -> bool:
        if kind is not None and event.kind != kind:
            return False
        if session_id is not None and event.session_id != session_id:
            return False
        if actor is not None and event.actor != actor:
            return False
        if needle is not None:
            if event.id in deleted or needle not in event_text(event).casefold():
                return False
        return True

    if before_seq is not None:
        return _backwards(events, matches, bisect_left(events, before_seq, key=_seq), limit)
    start = 0 if after_seq is None else bisect_right(events, after_seq, key=_seq)
    out: list[AnyEvent] = []
    for position in range(start, len(events)):
        event = events[position]
        if not matches(event):
            continue
        if limit is not None and len(out) == limit:
            return EventsPage(
                out, _seq(out[-1]) if out else after_seq, _before(events, out, start, matches)
            )
        out.append(event)
    return EventsPage(out, None, _before(events, out, start, matches))


def _before(
    events: Sequence[AnyEvent], out: list[AnyEvent], start: int, matches: Callable[[AnyEvent], bool]
) -> int | None:
    """The seq to read the page before `out` with, if any matching event precedes it."""
    first = bisect_left(events, _seq(out[0]), key=_seq) if out else start
    for position in range(first - 1, -1, -1):
        if matches(events[position]):
            return _seq(out[0]) if out else _seq(events[position]) + 1
    return None


def _backwards(
    events: Sequence[AnyEvent], matches: Callable[[AnyEvent], bool], end: int, limit: int | None
) -> EventsPage:
    """The last `limit` matching events of ``events[:end]``, in ascending order."""
    out: list[AnyEvent] = []
    position = end - 1
    while position >= 0 and (limit is None or len(out) < limit):
        if matches(events[position]):
            out.append(events[position])
        position -= 1
    out.reverse()
    prev = None
    while position >= 0:
        if matches(events[position]):
            prev = _seq(out[0]) if out else None
            break
        position -= 1
    # what follows this page: any matching event from `end` on
    following = any(matches(events[p]) for p in range(end, len(events)))
    next_after = _seq(out[-1]) if out and following else None
    if not out and following:
        next_after = _seq(events[end]) - 1 if end < len(events) else None
    return EventsPage(out, next_after, prev)
