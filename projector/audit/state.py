"""`MemoryState` and its fold.

The log only grows, so the fold keeps one append-only ledger per log and a state is a
view of that ledger up to a seq. Folding the next event onto the newest state appends in
place (O(1)); folding onto an older state first branches a private copy of the prefix.
Either way the input state never changes: what it shows is fixed by its own last seq.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from functools import cached_property
from typing import Any, NamedTuple
from uuid import UUID

from projector.audit.index import WordIndex
from schemas.audit import Deletion, Document, Message, Recall

__all__ = ["Ledger", "MemoryState", "RecallStats", "fold", "replay"]

AnyEvent = Message | Document | Recall | Deletion


class RecallStats(NamedTuple):
    """How often an item was recalled, and when last (the last Recall in log order)."""

    num_recalled: int
    last_recalled_at: datetime | None


class Ledger:
    """Everything folded from one log, append-only, indexed for the reads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[AnyEvent] = []
        self.seqs: list[int] = []
        self.by_id: dict[UUID, AnyEvent] = {}
        self.content_by_seq: dict[int, Message | Document] = {}
        self.messages: list[Message] = []
        self.message_seqs: list[int] = []
        self.documents: list[Document] = []
        self.document_seqs: list[int] = []
        # The first Deletion of each id is the one that did it; later ones change nothing.
        self.deleted: dict[UUID, Deletion] = {}
        # Per recalled id: the seqs and timestamps of its Recalls, in log order.
        self.recall_seqs: dict[UUID, list[int]] = {}
        self.recall_times: dict[UUID, list[datetime]] = {}
        self.index = WordIndex()

    @property
    def last_seq(self) -> int | None:
        return self.seqs[-1] if self.seqs else None

    def append(self, event: AnyEvent) -> None:
        seq = event.seq
        if seq is None:
            raise ValueError(f"cannot replay event {event.id}: it has no seq")
        last = self.last_seq
        if last is not None and seq <= last:
            raise ValueError(
                f"cannot replay event {event.id}: seq {seq} does not follow seq {last}"
            )
        self.events.append(event)
        self.seqs.append(seq)
        self.by_id.setdefault(event.id, event)
        if isinstance(event, Message):
            self.messages.append(event)
            self.message_seqs.append(seq)
            self.content_by_seq[seq] = event
            self.index.add(seq, (event.speaker, event.content))
        elif isinstance(event, Document):
            self.documents.append(event)
            self.document_seqs.append(seq)
            self.content_by_seq[seq] = event
            self.index.add(seq, (event.name, event.text))
        elif isinstance(event, Recall):
            for item_id in dict.fromkeys(event.recalled):
                self.recall_seqs.setdefault(item_id, []).append(seq)
                self.recall_times.setdefault(item_id, []).append(event.timestamp)
        else:
            for target in event.targets:
                self.deleted.setdefault(target, event)

    def branch(self, count: int) -> Ledger:
        """A private ledger holding the first `count` events of this one."""
        ledger = Ledger()
        for event in self.events[:count]:
            ledger.append(event)
        return ledger


class _DeletedView(Mapping[UUID, Deletion]):
    """`deleted` as of a seq, without copying the ledger's map."""

    def __init__(self, ledger: Ledger, horizon: int) -> None:
        self._ledger = ledger
        self._horizon = horizon

    def __getitem__(self, key: UUID) -> Deletion:
        deletion = self._ledger.deleted[key]
        if deletion.seq is None or deletion.seq > self._horizon:
            raise KeyError(key)
        return deletion

    def __contains__(self, key: object) -> bool:
        deletion = self._ledger.deleted.get(key)  # type: ignore[call-overload]
        return deletion is not None and deletion.seq <= self._horizon

    def __iter__(self) -> Iterator[UUID]:
        h = self._horizon
        return (key for key, d in self._ledger.deleted.items() if d.seq <= h)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


class MemoryState:
    """A frozen snapshot of the memory as it stood after `last_seq`."""

    __slots__ = ("_ledger", "_count", "last_seq", "__dict__")

    def __init__(self, ledger: Ledger | None = None, count: int | None = None) -> None:
        ledger = ledger if ledger is not None else Ledger()
        count = len(ledger.events) if count is None else count
        object.__setattr__(self, "_ledger", ledger)
        object.__setattr__(self, "_count", count)
        object.__setattr__(self, "last_seq", ledger.seqs[count - 1] if count else None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"MemoryState is frozen: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"MemoryState is frozen: cannot delete {name!r}")

    @property
    def _horizon(self) -> int:
        return -1 if self.last_seq is None else self.last_seq

    @cached_property
    def messages(self) -> tuple[Message, ...]:
        ledger = self._ledger
        return tuple(ledger.messages[: bisect_right(ledger.message_seqs, self._horizon)])

    @cached_property
    def documents(self) -> tuple[Document, ...]:
        ledger = self._ledger
        return tuple(ledger.documents[: bisect_right(ledger.document_seqs, self._horizon)])

    @property
    def visible_messages(self) -> tuple[Message, ...]:
        return tuple(m for m in self.messages if not self.is_deleted(m.id))

    @property
    def visible_documents(self) -> tuple[Document, ...]:
        return tuple(d for d in self.documents if not self.is_deleted(d.id))

    @cached_property
    def deleted(self) -> Mapping[UUID, Deletion]:
        return _DeletedView(self._ledger, self._horizon)

    @cached_property
    def recall_stats(self) -> Mapping[UUID, RecallStats]:
        ledger, h = self._ledger, self._horizon
        stats: dict[UUID, RecallStats] = {}
        for item_id, seqs in ledger.recall_seqs.items():
            n = bisect_right(seqs, h)
            if n:
                stats[item_id] = RecallStats(n, ledger.recall_times[item_id][n - 1])
        return stats

    def is_deleted(self, event_id: UUID) -> bool:
        deletion = self._ledger.deleted.get(event_id)
        return deletion is not None and deletion.seq <= self._horizon  # type: ignore[operator]

    # Reads beyond the seed's attributes, shared by the stores and the query daemon.

    @property
    def events(self) -> list[AnyEvent]:
        """Every folded event in log order (a copy: the ledger stays private)."""
        return self._ledger.events[: self._count]

    def __len__(self) -> int:
        return self._count

    def get(self, event_id: UUID) -> AnyEvent | None:
        """The event with this id as of this state, deleted or not."""
        event = self._ledger.by_id.get(event_id)
        if event is None or event.seq > self._horizon:  # type: ignore[operator]
            return None
        return event

    def at(self, up_to_seq: int | None) -> MemoryState:
        """The state as it stood after `up_to_seq` (itself when that is at or past its end)."""
        if up_to_seq is None or (self.last_seq is not None and up_to_seq >= self.last_seq):
            return self
        count = bisect_right(self._ledger.seqs, up_to_seq, 0, self._count)
        return MemoryState(self._ledger, count)

    @property
    def index(self) -> WordIndex:
        return self._ledger.index

    def content_at(self, seq: int) -> Message | Document:
        return self._ledger.content_by_seq[seq]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryState):
            return NotImplemented
        return (
            self.last_seq == other.last_seq
            and self.messages == other.messages
            and self.documents == other.documents
            and dict(self.deleted) == dict(other.deleted)
            and dict(self.recall_stats) == dict(other.recall_stats)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"MemoryState(last_seq={self.last_seq}, messages={len(self.messages)}, "
            f"documents={len(self.documents)}, deleted={len(self.deleted)})"
        )


def fold(state: MemoryState, event: AnyEvent) -> MemoryState:
    """The state after one more event. `state` itself is left as it was."""
    ledger = state._ledger
    with ledger.lock:
        if state._count != len(ledger.events):
            ledger = ledger.branch(state._count)
        ledger.append(event)
        return MemoryState(ledger, len(ledger.events))


def replay(events: Iterable[AnyEvent]) -> MemoryState:
    """Fold events into a state. Every event needs a seq, strictly increasing."""
    ledger = Ledger()
    for event in events:
        ledger.append(event)
    return MemoryState(ledger)
