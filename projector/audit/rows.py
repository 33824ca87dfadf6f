"""The compact row of a folded audit event, and the event it stands for.

A ledger hydrated from a snapshot keeps rows (plain tuples, which pickle and unpickle at C
speed) and builds an event model only when something reads it: a restarted projector or
a reader opening a log never pays for models nobody looks at.

A row is ``(seq, kind, id, timestamp, session_id, source, actor, *fields)`` with ``id`` as
``UUID.int``, times as microseconds since the epoch (UTC), and per kind:

- message: ``speaker, content, retain_until``
- document: ``name, text, media_type, sha256, retain_until``
- recall: ``query, recalled`` (a tuple of ``UUID.int``)
- deletion: ``targets`` (a tuple of ``UUID.int``), ``reason, requested_by``

Rows hold data the fold already accepted, so events are rebuilt without validation.

A decoded snapshot chunk hands its rows over as `LazyRows`: its columns as decoded, each
row built when first read (a cold load that reads a few events never builds the rest).
"""

from __future__ import annotations

import sys
from abc import abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, overload
from uuid import UUID, SafeUUID

from schemas.audit import BaseEvent, Deletion, Document, Message, Recall
from schemas.fields import shared_fields_set

__all__ = [
    "Row",
    "LazyRows",
    "MESSAGE",
    "DOCUMENT",
    "RECALL",
    "DELETION",
    "SEQ",
    "KIND",
    "FIELDS",
    "row_of",
    "event_of",
    "uuid_of",
]

Row = tuple[Any, ...]
# The kinds, at ``row[KIND]``.
MESSAGE, DOCUMENT, RECALL, DELETION = 0, 1, 2, 3
# Positions in a row: its seq, its kind, and the first of its kind's own fields (a message's
# speaker, a document's name, a recall's query, a deletion's targets; the others follow).
SEQ, KIND, FIELDS = 0, 1, 7

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_new = object.__new__
_set = object.__setattr__
_UNKNOWN = SafeUUID.unknown


class LazyRows(Sequence[Row]):
    """Rows in seq order, each built from columns when read: indexing builds one,
    `between` (and iteration) builds a run at once. Built rows are not kept: the reader
    (`projector.audit.state.Ledger`) keeps what it builds."""

    # The rows' seqs (at least `len(self)` of them), the rows' own ints.
    seqs: list[int]

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def between(self, start: int, stop: int) -> list[Row]:
        """The rows at positions `start` to `stop` (0 <= start <= stop <= len(self))."""

    @abstractmethod
    def row(self, pos: int) -> Row:
        """The row at `pos` (0 <= pos < len(self))."""

    @abstractmethod
    def ids(self) -> Iterable[int]:
        """Every row's event id (`UUID.int`), in row order, without building the rows."""

    @abstractmethod
    def prefix(self, count: int) -> LazyRows:
        """The first `count` rows (count <= len(self))."""

    @abstractmethod
    def forget(self, pos: int) -> None:
        """The content of the row at `pos` (a message's or document's text) is erased:
        its columns stop holding it."""

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if start == 0 and step == 1:
                return self.prefix(max(stop, 0))
            return self.between(0, n)[index]
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"row {index} of {n}")
        return self.row(index)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.between(0, len(self)))


def _us(value: datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // _US


def _dt(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def uuid_of(value: int) -> UUID:
    """``UUID(int=value)`` without its range checks (the value came from a UUID)."""
    u = _new(UUID)
    _set(u, "int", value)
    _set(u, "is_safe", _UNKNOWN)
    return u


def _intern(value: str | None) -> str | None:
    return None if value is None else sys.intern(value)


def row_of(seq: int, e: BaseEvent) -> Row:
    # The short fields repeat across events: interned, a chunk's pickle stores each once
    # and loading it builds one string object instead of one per row.
    head = (
        seq,
        e.id.int,
        _us(e.timestamp),
        _intern(e.session_id),
        sys.intern(e.source),
        _intern(e.actor),
    )
    if isinstance(e, Message):
        return (seq, MESSAGE, *head[1:], sys.intern(e.speaker), e.content, _us(e.retain_until))
    if isinstance(e, Document):
        return (
            seq,
            DOCUMENT,
            *head[1:],
            e.name,
            e.text,
            sys.intern(e.media_type),
            e.sha256,
            _us(e.retain_until),
        )
    if isinstance(e, Recall):
        return (seq, RECALL, *head[1:], e.query, tuple(r.int for r in e.recalled))
    if isinstance(e, Deletion):
        return (seq, DELETION, *head[1:], tuple(t.int for t in e.targets), e.reason, e.requested_by)
    raise TypeError(f"not an audit event: {type(e).__name__}")


_FIELDS: dict[tuple[type, tuple[bool, ...]], set[str]] = {}


def _make(cls: type[Any], values: dict[str, Any], shape: tuple[bool, ...]) -> Any:
    """`construct` with a fields set shared by every event of one shape (`shape`: which
    optional fields are None). A set, as pydantic's own: `model_copy(update=...)` copies
    it and adds the updated names (a frozenset would fail there)."""
    obj = _new(cls)
    _set(obj, "__dict__", values)
    fields = _FIELDS.get((cls, shape))
    if fields is None:
        fields = _FIELDS[cls, shape] = shared_fields_set(
            {k for k, v in values.items() if v is not None}
        )
    _set(obj, "__pydantic_fields_set__", fields)
    _set(obj, "__pydantic_extra__", None)
    _set(obj, "__pydantic_private__", None)
    return obj


def event_of(row: Row) -> Message | Document | Recall | Deletion:
    kind = row[KIND]
    if kind == MESSAGE:
        seq, _, idi, ts, session_id, source, actor, speaker, content, retain = row
        return _make(
            Message,
            {
                "id": uuid_of(idi),
                "timestamp": _EPOCH + timedelta(microseconds=ts),
                "seq": seq,
                "session_id": session_id,
                "source": source,
                "actor": actor,
                "kind": "message",
                "speaker": speaker,
                "content": content,
                "retain_until": None if retain is None else _EPOCH + timedelta(microseconds=retain),
            },
            (session_id is None, actor is None, retain is None),
        )
    if kind == DOCUMENT:
        seq, _, idi, ts, session_id, source, actor, name, text, media_type, sha256, retain = row
        return _make(
            Document,
            {
                "id": uuid_of(idi),
                "timestamp": _dt(ts),
                "seq": seq,
                "session_id": session_id,
                "source": source,
                "actor": actor,
                "kind": "document",
                "name": name,
                "text": text,
                "media_type": media_type,
                "sha256": sha256,
                "retain_until": _dt(retain),
            },
            (session_id is None, actor is None, media_type is None, sha256 is None, retain is None),
        )
    if kind == RECALL:
        seq, _, idi, ts, session_id, source, actor, query, recalled = row
        return _make(
            Recall,
            {
                "id": uuid_of(idi),
                "timestamp": _dt(ts),
                "seq": seq,
                "session_id": session_id,
                "source": source,
                "actor": actor,
                "kind": "recall",
                "query": query,
                "recalled": tuple(map(uuid_of, recalled)),
            },
            (session_id is None, actor is None, query is None),
        )
    seq, _, idi, ts, session_id, source, actor, targets, reason, requested_by = row
    return _make(
        Deletion,
        {
            "id": uuid_of(idi),
            "timestamp": _dt(ts),
            "seq": seq,
            "session_id": session_id,
            "source": source,
            "actor": actor,
            "kind": "deletion",
            "targets": tuple(map(uuid_of, targets)),
            "reason": reason,
            "requested_by": requested_by,
        },
        (session_id is None, actor is None, reason is None, requested_by is None),
    )
