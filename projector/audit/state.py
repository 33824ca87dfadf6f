"""`MemoryState` and its fold.

The log only grows, so the fold keeps one append-only ledger per log and a state is a
view of that ledger up to a seq. Folding the next event onto the newest state appends in
place (O(1)); folding onto an older state first branches a private copy of the prefix.
Either way the input state never changes: what it shows is fixed by its own last seq.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cached_property
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple
from uuid import UUID

from projector.audit.index import WordFragment, WordIndex
from projector.audit.rows import LazyRows, Row, event_of
from schemas.audit import ERASED, Deletion, Document, Erasure, Message, Recall
from schemas.fields import share_fields_set
from schemas.gc_guard import no_cyclic_gc

__all__ = ["Ledger", "MemoryState", "RecallStats", "fold", "replay"]

AnyEvent = Message | Document | Recall | Deletion | Erasure


_SEQ = itemgetter(0)
_FIRST = itemgetter(0)
# Below this many new objects, a full collection is not worth avoiding.
_BULK = 10_000


@contextmanager
def no_gc(objects: int) -> Iterator[None]:
    """Collection paused while building `objects` long-lived objects in bulk.

    Every object built here is kept, yet each burst of allocations makes Python walk the
    whole heap (hundreds of ms on a hydrated 1M-event ledger) for nothing to free. The
    graph's guard: on exit the new objects go straight to the oldest generation.
    """
    if objects < _BULK:
        yield
        return
    with no_cyclic_gc():
        yield


_ID = itemgetter(2)


class _Lazy:
    """In `Ledger.events`: a row still in the columns of a `LazyRows` run."""

    def __repr__(self) -> str:
        return "<lazy row>"


_LAZY: Any = _Lazy()


def _redacted(event: AnyEvent) -> AnyEvent:
    """The event with its content erased (itself when it holds none, or holds it no more)."""
    if isinstance(event, Message) and event.content != ERASED:
        return event.model_copy(update={"content": ERASED})
    if isinstance(event, Document) and event.text != ERASED:
        return event.model_copy(update={"text": ERASED})
    return event


class RecallStats(NamedTuple):
    """How often an item was recalled, and when last (the last Recall in log order)."""

    num_recalled: int
    last_recalled_at: datetime | None


class Ledger:
    """Everything folded from one log, append-only, indexed for the reads.

    ``events`` holds, per position, the event model, its compact row (`rows`), or `_LAZY`
    for a row of a `LazyRows` run (a decoded snapshot chunk's columns): a ledger hydrated
    from a snapshot builds each row and model on first read, in place.
    The other structures name events by position (their index in ``events``), so building
    a model never has to update them. Rows entered in bulk (`extend_rows`) join the id map
    `by_id` when it is first read: a reader that never looks an event up by id (a time
    travel, a search) never pays for the map.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[AnyEvent | Row] = []
        self.seqs: list[int] = []
        # UUID.int (cheap to hash, no UUID objects to build at hydrate) -> position of the
        # first event with that id; see `by_id`.
        self._ids: dict[int, int] = {}
        # Runs of rows entered in bulk and not in `_ids` yet: (position of the first, rows).
        self._unindexed: list[tuple[int, Sequence[Row]]] = []
        # The `LazyRows` runs some of whose rows are still `_LAZY` in `events`, by position:
        # (position of the first, rows). Replaced whole, never changed in place, so a
        # reader of another thread always finds a run whole.
        self._lazy: tuple[tuple[int, LazyRows], ...] = ()
        self._indexing = threading.Lock()
        self.message_pos: list[int] = []
        self.message_seqs: list[int] = []
        self.document_pos: list[int] = []
        self.document_seqs: list[int] = []
        # The first Deletion of each id is the one that did it; later ones change nothing.
        self.deleted: dict[UUID, Deletion] = {}
        # The Erasure that made each erased event's content unreadable (the first one).
        self.erased: dict[UUID, Erasure] = {}
        # Per recalled id: the seqs and timestamps of its Recalls, in log order.
        self.recall_seqs: dict[UUID, list[int]] = {}
        self.recall_times: dict[UUID, list[datetime]] = {}
        self.index = WordIndex()
        self._built = 0  # every entry of events[: _built] is a model

    @property
    def last_seq(self) -> int | None:
        return self.seqs[-1] if self.seqs else None

    @property
    def by_id(self) -> dict[int, int]:
        """UUID.int -> the position of the first event with that id. Rows entered in bulk
        are added here, on the first read after them (any thread; once)."""
        if self._unindexed:
            self._index_rows()
        return self._ids

    def _index_rows(self) -> None:
        with self._indexing:
            ids = self._ids
            for base, rows in self._unindexed:
                size = len(ids)
                # Every id new and once (the usual case) when the map grew by one entry a
                # row; otherwise an id was met before and got overwritten: the first one is
                # put back.
                found = rows.ids() if isinstance(rows, LazyRows) else map(_ID, rows)
                ids.update(zip(found, range(base, base + len(rows)), strict=True))
                if len(ids) != size + len(rows):
                    self._first_ids_again(base, base + len(rows))
            # Emptied only once the map holds every run: a reader that finds no runs left
            # finds them all in the map.
            self._unindexed = []

    def _row(self, pos: int) -> Row | AnyEvent:
        """The row at a `_LAZY` position, from its run; or, when the run is gone (every
        row of it built meanwhile, by another thread), what is there now."""
        runs = self._lazy
        i = bisect_right(runs, pos, key=_FIRST) - 1
        if i >= 0:
            base, rows = runs[i]
            if pos - base < len(rows):
                return rows.row(pos - base)
        return self.events[pos]

    def event(self, pos: int) -> AnyEvent:
        """The event at `pos`, its model built now if it was still a row."""
        event = self.events[pos]
        if event is _LAZY:
            event = self._row(pos)
        if type(event) is tuple:
            # Two threads may build the same row: equal models, either one is kept.
            event = self.events[pos] = event_of(event)
            if self.erased and event.id in self.erased:
                # Erased by a fold on another thread while this row was built: its
                # redaction stands (checked after the write, which it may have followed).
                event = self.events[pos] = _redacted(event)
        return event  # type: ignore[return-value]

    def built(self, count: int) -> list[AnyEvent]:
        """Build every model among the first `count` events; return the live list."""
        events = self.events
        start = self._built
        if start < count:
            with no_gc(count - start):
                for base, rows in self._lazy:
                    a, b = max(start, base), min(count, base + len(rows))
                    if a < b:  # a run's rows, built together (those still `_LAZY`)
                        built = rows.between(a - base, b - base)
                        for pos, row in zip(range(a, b), built, strict=True):
                            if events[pos] is _LAZY:
                                events[pos] = event_of(row)
                for pos in range(start, count):
                    if type(events[pos]) is tuple:
                        events[pos] = event_of(events[pos])  # type: ignore[arg-type]
                erased = self.erased
                if erased:  # as in `event`: a redaction made meanwhile stands
                    for pos in range(start, count):
                        if events[pos].id in erased:  # type: ignore[union-attr]
                            events[pos] = _redacted(events[pos])  # type: ignore[arg-type]
            self._built = count
            if self._lazy and self._lazy[0][0] + len(self._lazy[0][1]) <= count:
                self._lazy = tuple(run for run in self._lazy if run[0] + len(run[1]) > count)
        return events  # type: ignore[return-value]

    def models(self, positions: list[int]) -> tuple[AnyEvent, ...]:
        """The events at increasing `positions`, as models."""
        if not positions:
            return ()
        events = self.built(positions[-1] + 1)
        return tuple(map(events.__getitem__, positions))

    def append(self, event: AnyEvent, found: tuple[str, ...] | None = None) -> None:
        """Fold one event. `found`: its words, when already known (no re-tokenizing)."""
        seq = event.seq
        if seq is None:
            # The seed's messages, word for word.
            raise ValueError(f"event {event.id} has no seq; not from the log")
        seqs = self.seqs
        if seqs and seq <= seqs[-1]:
            raise ValueError(f"out-of-order event: seq {seq} after seq {seqs[-1]}")
        events = self.events
        pos = len(events)
        share_fields_set(event)  # an equal set, shared: the per-event set is ~700 bytes
        events.append(event)
        seqs.append(seq)
        self.by_id.setdefault(event.id.int, pos)
        if isinstance(event, Message):
            self.message_pos.append(pos)
            self.message_seqs.append(seq)
            if found is None:
                self.index.add(seq, (event.speaker, event.content))
            else:
                self.index.add_words(seq, found)
        elif isinstance(event, Document):
            self.document_pos.append(pos)
            self.document_seqs.append(seq)
            if found is None:
                self.index.add(seq, (event.name, event.text))
            else:
                self.index.add_words(seq, found)
        else:
            self._note(event)

    def _note(self, event: AnyEvent) -> None:
        """What a Recall or a Deletion adds (both are rare next to content)."""
        seq = event.seq
        if isinstance(event, Recall):
            for item_id in event.recalled:  # each occurrence counts, as in the seed
                self.recall_seqs.setdefault(item_id, []).append(seq)  # type: ignore[arg-type]
                self.recall_times.setdefault(item_id, []).append(event.timestamp)
        elif isinstance(event, Deletion):
            for target in event.targets:
                self.deleted.setdefault(target, event)
        elif isinstance(event, Erasure):
            for target in event.erased:
                if target not in self.erased:
                    self.erased[target] = event
                    self._redact(target)

    def _redact(self, target: UUID) -> None:
        """Drop an erased event's content from the ledger and its words from the index.

        In place, for every state of this ledger: erased content is unrecoverable, so no
        past view keeps it either (the log's bytes, ciphertext, are unchanged).
        """
        pos = self.by_id.get(target.int)
        if pos is None:
            return
        lazy = self.events[pos] is _LAZY
        event = self.event(pos)
        if not isinstance(event, Message | Document):
            return
        self.events[pos] = _redacted(event)
        if lazy:  # its run's columns still hold the content: not any more
            for base, rows in self._lazy:
                if 0 <= pos - base < len(rows):
                    rows.forget(pos - base)
        index = self.index
        seq = self.seqs[pos]
        for word in index.words_of.pop(seq, ()):
            posting = index.postings.get(word)
            if posting is not None and seq in posting:
                posting.remove(seq)
                if not posting:
                    del index.postings[word]

    def extend_rows(
        self,
        rows: Sequence[Row],
        message_rel: Sequence[int],
        document_rel: Sequence[int],
        other_rel: Sequence[int],
        words: WordFragment | WordIndex,
        seqs: list[int] | None = None,
    ) -> None:
        """Fold accepted events given as rows (in seq order), in bulk.

        `message_rel`/`document_rel`/`other_rel`: the positions in `rows` of the messages,
        the documents, the recalls and deletions; `words`: the words of these rows, a
        decoded snapshot's fragment (merged into the index when it is first read) or an
        index of them; `seqs`: the rows' seqs, when known. Takes ownership of its lists.
        `LazyRows` are kept as they are, each row built when first read.
        """
        if not rows:
            return
        lazy = rows if isinstance(rows, LazyRows) else None
        if seqs is None and lazy is not None:
            seqs = lazy.seqs[: len(lazy)]
        if seqs is None:
            first_seq, last_seq = _SEQ(rows[0]), _SEQ(rows[-1])
            if last_seq - first_seq + 1 == len(rows):  # increasing, so every seq between
                seqs = list(range(first_seq, last_seq + 1))
            else:
                seqs = list(map(_SEQ, rows))
        last = self.last_seq
        if last is not None and seqs[0] <= last:
            raise ValueError(f"out-of-order event: seq {seqs[0]} after seq {last}")
        base = len(self.events)
        if lazy is not None:
            self.events.extend(repeat(_LAZY, len(lazy)))
            self._lazy = (*self._lazy, (base, lazy))
        else:
            self.events.extend(rows)
        self.seqs.extend(seqs)
        self._unindexed.append((base, rows))
        shift = base.__add__
        getseq = seqs.__getitem__
        if len(message_rel) == len(rows):  # every row a message: the positions are a range
            if seqs[0] == base and seqs[-1] == base + len(rows) - 1:
                # Each position is its seq (a log of messages only, so far): the same ints.
                self.message_pos.extend(seqs)
            else:
                self.message_pos.extend(range(base, base + len(rows)))
            self.message_seqs.extend(seqs)
        else:
            self.message_pos.extend(map(shift, message_rel))
            self.message_seqs.extend(map(getseq, message_rel))
        self.document_pos.extend(map(shift, document_rel))
        self.document_seqs.extend(map(getseq, document_rel))
        for rel in other_rel:
            self._note(self.event(base + rel))
        if isinstance(words, WordFragment):
            self.index.defer(words)
        else:
            self.index.merge(words.words_of, words.postings)

    def _first_ids_again(self, since: int, until: int) -> None:
        """Make the id map name the first position of each id again, after the events from
        `since` to `until` were entered over it (rare: an id that occurs twice in the log)."""
        by_id = self._ids
        for pos in range(since, until):
            by_id.pop(self._id_at(pos), None)
        for pos in range(until):
            by_id.setdefault(self._id_at(pos), pos)

    def _id_at(self, pos: int) -> int:
        event = self.events[pos]
        if event is _LAZY:
            event = self._row(pos)
        return _ID(event) if isinstance(event, tuple) else event.id.int

    def branch(self, count: int) -> Ledger:
        """A private ledger holding the first `count` events of this one."""
        ledger = Ledger()
        words_of = self.index.words_of
        erased = self.erased
        for pos in range(count):
            event = self.event(pos)
            found = words_of.get(self.seqs[pos])
            if found is None and erased and event.id in erased:
                found = ()  # its content is gone: no words, not even "erased"
            ledger.append(event, found)
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
        return (key for key, d in self._ledger.deleted.items() if d.seq is not None and d.seq <= h)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return repr(dict(self))


class MemoryState:
    """A frozen snapshot of the memory as it stood after `last_seq`."""

    __slots__ = ("_ledger", "_count", "last_seq", "__dict__")
    _ledger: Ledger
    _count: int
    last_seq: int | None

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
        n = bisect_right(ledger.message_seqs, self._horizon)
        # message_pos holds the positions of messages only
        return ledger.models(ledger.message_pos[:n])  # type: ignore[return-value]

    @cached_property
    def documents(self) -> tuple[Document, ...]:
        ledger = self._ledger
        n = bisect_right(ledger.document_seqs, self._horizon)
        # document_pos holds the positions of documents only
        return ledger.models(ledger.document_pos[:n])  # type: ignore[return-value]

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
        """Deleted (a tombstone) or erased, as of this state: reads stop returning it."""
        ledger = self._ledger
        deletion = ledger.deleted.get(event_id)
        if deletion is not None and deletion.seq <= self._horizon:  # type: ignore[operator]
            return True
        if ledger.erased:
            erasure = ledger.erased.get(event_id)
            return erasure is not None and erasure.seq <= self._horizon  # type: ignore[operator]
        return False

    def erasure_of(self, event_id: UUID) -> Erasure | None:
        """The Erasure that made this event's content unreadable, if any (at any seq: erased
        content is gone from every view)."""
        return self._ledger.erased.get(event_id)

    @property
    def erased_ids(self) -> frozenset[UUID]:
        """The ids of every erased event."""
        return frozenset(self._ledger.erased)

    # Reads beyond the seed's attributes, shared by the stores and the query daemon.

    @property
    def events(self) -> list[AnyEvent]:
        """Every folded event in log order (a copy: the ledger stays private)."""
        return self._ledger.built(self._count)[: self._count]

    def __len__(self) -> int:
        return self._count

    def get(self, event_id: UUID) -> AnyEvent | None:
        """The event with this id as of this state, deleted or not."""
        try:
            pos = self._ledger.by_id.get(event_id.int)
        except AttributeError:  # not a UUID: no event has it
            return None
        # Positions follow seqs, so the first `_count` positions are this state's.
        if pos is None or pos >= self._count:
            return None
        return self._ledger.event(pos)

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
        ledger = self._ledger
        pos = bisect_left(ledger.seqs, seq)
        if pos == len(ledger.seqs) or ledger.seqs[pos] != seq:
            raise KeyError(seq)
        event = ledger.event(pos)
        if not isinstance(event, Message | Document):
            raise KeyError(seq)
        return event

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
