"""Questions an auditor asks of the audit log's history (pure): what changed between two
seqs, how busy the log was over time, and what a Recall put into a model's context.

- `diff`: between the states after `from_seq` and after `to_seq`, the content events that
  appeared (and are visible at `to_seq`), those deleted in between (with their tombstone),
  and those whose recall count changed.
- `activity`: events per time bucket and kind, the bucket chosen so that the whole log
  fits in a bounded number of buckets unless the caller names one.
- `recall_context`: a Recall, the items it named (each with the tombstone that deleted it,
  if any, as of the state read), and the messages of its session logged just before and
  just after it (the prompt, and the answer when the Assistant wrote them).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple
from uuid import UUID

from projector.audit.state import MemoryState
from schemas.audit import EVENT_KINDS, Deletion, Document, Erasure, Message, Recall

__all__ = [
    "ActivityBucket",
    "ActivityPage",
    "DiffPage",
    "NamedItem",
    "RecallChange",
    "RecallContext",
    "activity",
    "diff",
    "recall_context",
]

AnyEvent = Message | Document | Recall | Deletion | Erasure

# The bucket sizes `activity` picks from, and how many buckets it may give at most.
BUCKET_CHOICES = (60, 300, 900, 3_600, 21_600, 86_400, 604_800)
MAX_BUCKETS = 2_000
MAX_CONTEXT = 50  # messages before / after a Recall at most


def _seq(event: AnyEvent) -> int:
    return event.seq  # type: ignore[return-value]


class RecallChange(NamedTuple):
    id: UUID
    before: int  # times recalled in the state after from_seq
    after: int  # ... and after to_seq


class DiffPage(NamedTuple):
    from_seq: int
    to_seq: int
    appeared: list[Message | Document]
    deleted: list[tuple[Message | Document, Deletion]]
    recalls: list[RecallChange]
    truncated: bool  # some list was cut at `limit`


def diff(state: MemoryState, from_seq: int, to_seq: int, limit: int = 1_000) -> DiffPage:
    """What changed from the state after `from_seq` to the state after `to_seq`."""
    if from_seq < -1:
        raise ValueError(f"from_seq: expected -1 or more, got {from_seq}")
    if to_seq < from_seq:
        raise ValueError(f"to_seq: expected at least from_seq ({from_seq}), got {to_seq}")
    if limit < 1:
        raise ValueError(f"limit: expected a positive integer, got {limit}")
    old, new = state.at(from_seq), state.at(to_seq)
    events: Sequence[AnyEvent] = new.events
    changed = events[bisect_right(events, from_seq, key=_seq) :]
    appeared: list[Message | Document] = []
    deleted: list[tuple[Message | Document, Deletion]] = []
    truncated = False
    for event in changed:
        if isinstance(event, Message | Document) and event.id not in new.deleted:
            if len(appeared) < limit:
                appeared.append(event)
            else:
                truncated = True
        elif isinstance(event, Deletion):
            for target in event.targets:
                gone = new.get(target)
                if isinstance(gone, Message | Document) and target not in old.deleted:
                    if len(deleted) < limit:
                        deleted.append((gone, event))
                    else:
                        truncated = True
    before, after = old.recall_stats, new.recall_stats
    recalls = [
        RecallChange(item, before[item].num_recalled if item in before else 0, stat.num_recalled)
        for item, stat in after.items()
        if item not in before or before[item].num_recalled != stat.num_recalled
    ]
    if len(recalls) > limit:
        recalls, truncated = recalls[:limit], True
    return DiffPage(from_seq, to_seq, appeared, deleted, recalls, truncated)


class ActivityBucket(NamedTuple):
    start: datetime
    counts: dict[str, int]  # by kind, every kind present


class ActivityPage(NamedTuple):
    bucket_seconds: int
    buckets: list[ActivityBucket]  # ascending, only buckets holding events


def _bucket_of(moment: datetime, size: int) -> int:
    return int(moment.timestamp()) // size * size


def activity(
    state: MemoryState, *, bucket_seconds: int | None = None, up_to_seq: int | None = None
) -> ActivityPage:
    """Events per `bucket_seconds` by kind, by each event's timestamp; when no bucket is
    named, the smallest of `BUCKET_CHOICES` that keeps the log within `MAX_BUCKETS`."""
    events: Sequence[AnyEvent] = state.at(up_to_seq).events
    if bucket_seconds is not None and not 1 <= bucket_seconds <= BUCKET_CHOICES[-1]:
        raise ValueError(
            f"bucket_seconds: expected 1 to {BUCKET_CHOICES[-1]}, got {bucket_seconds}"
        )
    size = bucket_seconds
    if size is None:
        size = BUCKET_CHOICES[-1]
        if events:
            stamps = [int(e.timestamp.timestamp()) for e in events]
            span = max(stamps) - min(stamps)
            size = next((s for s in BUCKET_CHOICES if span // s < MAX_BUCKETS), size)
    counts: dict[int, dict[str, int]] = {}
    for event in events:
        bucket = counts.setdefault(_bucket_of(event.timestamp, size), dict.fromkeys(EVENT_KINDS, 0))
        bucket[event.kind] += 1
    if len(counts) > MAX_BUCKETS:
        raise ValueError(
            f"bucket_seconds: {len(counts)} buckets of {size} s, more than {MAX_BUCKETS}; "
            "name a larger bucket"
        )
    buckets = [
        ActivityBucket(datetime.fromtimestamp(start, UTC), counts[start])
        for start in sorted(counts)
    ]
    return ActivityPage(size, buckets)


class NamedItem(NamedTuple):
    """An item a Recall named: its id, the event (None if the log never held it), the
    Deletion that removed it as of the state read (None if visible)."""

    id: UUID
    event: Message | Document | None
    deletion: Deletion | None


class RecallContext(NamedTuple):
    recall: Recall
    items: list[NamedItem]
    before: list[Message]  # the session's messages just before the Recall, in seq order
    after: list[Message]  # ... and just after it


def recall_context(state: MemoryState, recall_id: UUID, around: int = 5) -> RecallContext | None:
    """The Recall `recall_id` with its items and the messages around it; None if the
    state holds no Recall with that id."""
    if not 0 <= around <= MAX_CONTEXT:
        raise ValueError(f"around: expected 0 to {MAX_CONTEXT}, got {around}")
    recall = state.get(recall_id)
    if not isinstance(recall, Recall):
        return None
    items = []
    for item_id in recall.recalled:
        found = state.get(item_id)
        event = found if isinstance(found, Message | Document) else None
        items.append(NamedItem(item_id, event, state.deleted.get(item_id)))
    session = recall.session_id
    messages = [m for m in state.messages if m.session_id == session]
    split = bisect_left(messages, _seq(recall), key=_seq)
    before = messages[max(0, split - around) : split]
    after = messages[split : split + around]
    return RecallContext(recall, items, before, after)
