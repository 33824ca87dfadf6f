"""The wire format of a snapshot chunk: data only, and checked before anything is built.

A chunk is read back from Redis, where anyone who can write a key can put any bytes, and
its audit rows become events WITHOUT validation (`projector.audit.rows`). So nothing here
can construct an arbitrary object or run code (MessagePack and JSON: plain data), and
`decode` checks every type, shape, range and size before it builds rows, the word index
or a graph; bytes that fail any check raise `SnapshotFormatError` naming what was wrong.

A chunk is one MessagePack array, decoded by msgspec against the typed layout below (the
types and per-value bounds are checked in C as it decodes):

- ``[FORMAT, first, last, kinds, strings, messages, documents, recalls, deletions,
  rejected, raw, vocab, word_counts, word_ids, checkpoint]``;
- ``kinds``: one byte per seq ``first..last``: 0-3 an audit row (message, document,
  recall, deletion: the row kinds), 4 a graph envelope kept raw, 5 a refused record.
  Every seq has exactly one kind, so seqs are not stored and cannot disagree;
- ``strings``: the chunk's table of short strings that repeat (session ids, sources,
  actors, speakers, media types), which the columns name by index: each is decoded once
  and shared by the rows, as in the fold's own rows (interned);
- ``messages`` .. ``deletions``: the rows of each kind as columns, in seq order; event
  ids as 16-byte big-endian UUIDs, all of a kind's one after the other in one bytes value
  (one object to decode, not one per row), times as microseconds since the epoch. A column of
  strings from the table, or of optional values, is a single index (or None) when it
  holds one value for every row;
- ``rejected``: ``(reason, error)`` of each refused record, UTF-8 with surrogates passed
  (a reason may quote an id that holds one); ``raw``: each envelope's record bytes;
- ``vocab``, ``word_counts``, ``word_ids``: the word index's fragment: per content row
  (messages and documents, in seq order) how many words, and the words as indexes into
  ``vocab``, packed as little-endian unsigned integers of 16 bits when the vocabulary has
  at most 65,536 words, else 32 (one bytes value: millions of ids decode as one copy, not
  one integer object each). The postings are derived from them when the index is first
  read, so they cannot disagree (every count and id is checked on decode; a word of the
  vocabulary that no row holds gets no posting);
- ``checkpoint``: None, or JSON text (the standard library's: exact for every value a
  fold holds, NaN and integers of any size included) of ``[seq, graph_seq, items, edges,
  intents, tasks]``, each model as the array of its fields in declaration order.

`decode` checks the chunk whole, then hands its rows over as the columns it decoded
(`projector.audit.rows.LazyRows`): each row is built when first read, so a cold load
that reads a few events builds only those.

Sizes are bounded: a chunk of at most `MAX_CHUNK_BYTES`, `MAX_ENTRIES` seqs, strings of
at most `MAX_STRING` characters, records of at most `MAX_RECORD_BYTES`, JSON nested no
deeper than the interpreter's recursion limit.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import eq, ge, gt, is_not, itemgetter, le, sub
from typing import Annotated, Any, Literal, NamedTuple, get_args

import msgspec
from msgspec import Meta

from projector.audit.index import WordFragment
from projector.audit.rows import (
    DELETION,
    DOCUMENT,
    FIELDS,
    KIND,
    MESSAGE,
    RECALL,
    SEQ,
    LazyRows,
    Row,
)
from projector.graph.intents import IntentState
from projector.graph.native import native
from projector.graph.pmap import OrderedPMap
from projector.graph.state import GraphState
from projector.graph.tasks import TaskState
from schemas.audit import ERASED
from schemas.errors import MemstreamError
from schemas.fields import shared_fields_set
from schemas.graph.intents import Intent, IntentStatus
from schemas.graph.items import Edge, MemoryItem
from schemas.graph.tasks import Task, TaskStatus

__all__ = [
    "FORMAT",
    "RAW",
    "REJECTED",
    "MAX_CHUNK_BYTES",
    "MAX_ENTRIES",
    "MAX_STRING",
    "MAX_RECORD_BYTES",
    "Checkpoint",
    "Decoded",
    "SnapshotFormatError",
    "encode",
    "decode",
    "encode_checkpoint",
    "decode_checkpoint",
]

FORMAT = 5
# The kinds of an extra entry: ``(seq, RAW, bytes)``, ``(seq, REJECTED, reason, error)``.
RAW = -1
REJECTED = -2

# A chunk holds at most this many bytes (a merge stops below it, a write splits above it).
MAX_CHUNK_BYTES = 256 << 20
# Seqs in one chunk: merges stop at 2**18, writes are a projector's batch.
MAX_ENTRIES = 1 << 22
# Above any record either log stores, so a string of the log always fits.
MAX_STRING = 16 << 20
MAX_RECORD_BYTES = 16 << 20

_KIND_RAW = 4
# Word ids are little-endian on the wire; an array holds them in the machine's order.
_SWAP = sys.byteorder == "big"
if (array("H").itemsize, array("I").itemsize) != (2, 4):  # so on every CPython platform
    raise ImportError("snapshot chunks pack word ids as 16- and 32-bit integers")


def _id_type(vocabulary: int) -> str:
    """The array type of a chunk's word ids: 16 bits while they fit, else 32."""
    return "H" if vocabulary <= 1 << 16 else "I"


_KIND_REJECTED = 5
# datetime's range, in microseconds since 1970-01-01 UTC: a row's times must build one.
_MIN_US = -62_135_596_800_000_000
_MAX_US = 253_402_300_799_999_999


class SnapshotFormatError(MemstreamError, ValueError):
    """Bytes that are not a snapshot chunk of this format; the message says what is wrong."""


Checkpoint = tuple[int, GraphState, IntentState, TaskState, "int | None"]


class Decoded(NamedTuple):
    """A chunk's content, in the order of `projector.snapshot_store.Chunk`'s fields."""

    first: int
    last: int
    rows: Sequence[Row]
    message_rel: Sequence[int]
    document_rel: Sequence[int]
    other_rel: Sequence[int]
    words: WordFragment
    extras: list[tuple[Any, ...]]
    checkpoint: Checkpoint | None
    # The rows' seqs, the very int objects the rows hold.
    seqs: list[int] | None = None


# --- the typed layout (msgspec checks these as it decodes) ------------------------------------

_Seq = Annotated[int, Meta(ge=0, le=(1 << 63) - 1)]
_Count = Annotated[int, Meta(ge=0)]
_Micros = Annotated[int, Meta(ge=_MIN_US, le=_MAX_US)]
_Ref = Annotated[int, Meta(ge=0)]  # an index into `strings` (its upper bound: checked after)
_Text = Annotated[str, Meta(max_length=MAX_STRING)]
_Text1 = Annotated[str, Meta(min_length=1, max_length=MAX_STRING)]
# The ids of a kind's rows, 16 bytes each, one after the other (one bytes object decoded,
# not one per row; the length is checked after).
_IdRun = Annotated[bytes, Meta(max_length=16 * MAX_ENTRIES)]
_Ids = Annotated[bytes, Meta(max_length=MAX_RECORD_BYTES)]  # 16 bytes per id (checked after)
_Record = Annotated[bytes, Meta(max_length=MAX_RECORD_BYTES)]


# A column of short strings: their indexes, or one index for all the rows.
_Refs = list[_Ref] | _Ref
# A column of values that are mostly None: the values, or None for all the rows.
_Retain = list[_Micros | None] | None


class _Head(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    ids: _IdRun
    ts: list[_Micros]
    session: _Refs
    source: _Refs
    actor: _Refs


class _Messages(_Head, array_like=True, forbid_unknown_fields=True):
    speaker: _Refs
    content: list[_Text1]
    retain: _Retain


class _Documents(_Head, array_like=True, forbid_unknown_fields=True):
    name: list[_Text1]
    text: list[_Text1]
    media_type: _Refs
    sha256: list[_Text | None] | None
    retain: _Retain


class _Recalls(_Head, array_like=True, forbid_unknown_fields=True):
    query: list[_Text1]
    recalled: list[_Ids]


class _Deletions(_Head, array_like=True, forbid_unknown_fields=True):
    targets: list[_Ids]
    reason: list[_Text1]
    requested_by: list[_Text | None] | None


class _Wire(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    format: Literal[5]
    first: _Seq
    last: _Seq
    kinds: Annotated[bytes, Meta(max_length=MAX_ENTRIES)]
    strings: list[_Text | None]
    messages: _Messages
    documents: _Documents
    recalls: _Recalls
    deletions: _Deletions
    rejected: list[tuple[_Record, _Record]]
    raw: list[_Record]
    vocab: list[_Text1]
    word_counts: list[_Count]
    word_ids: Annotated[bytes, Meta(max_length=MAX_CHUNK_BYTES)]  # 2 or 4 bytes an id
    checkpoint: Annotated[str, Meta(max_length=MAX_CHUNK_BYTES)] | None


_decoder = msgspec.msgpack.Decoder(_Wire)
_encoder = msgspec.msgpack.Encoder()


# --- encoding -----------------------------------------------------------------------------------


def _ids_blob(values: Sequence[int]) -> bytes:
    return b"".join(map(int.to_bytes, values, repeat(16)))


def _columns(rows: Sequence[Row], width: int) -> list[Any]:
    """The columns of rows of one kind (each a tuple), or `width` empty ones."""
    return list(zip(*rows, strict=True)) if rows else [()] * width


def encode(
    first: int,
    last: int,
    rows: Sequence[Row],
    extras: Sequence[tuple[Any, ...]],
    words_of: Mapping[int, Sequence[str]],
    checkpoint: str | None,
) -> bytes:
    """A chunk's bytes: `rows` and `extras` (each in seq order) cover first..last exactly,
    `words_of` holds the words of every content row, `checkpoint` is `encode_checkpoint`'s.

    Raises `SnapshotFormatError` for a chunk that `decode` would refuse."""
    if not isinstance(rows, list):  # read several times below: built once
        rows = list(rows)
    n = last - first + 1
    if not 0 <= first <= last or n > MAX_ENTRIES or len(rows) + len(extras) != n:
        raise SnapshotFormatError(f"chunk {first}-{last}: {len(rows) + len(extras)} entries")
    kinds = bytearray(n)
    row_kinds = list(map(itemgetter(KIND), rows))
    offsets = map(sub, map(itemgetter(SEQ), rows), repeat(first))
    deque(map(kinds.__setitem__, offsets, row_kinds), maxlen=0)
    by_kind = [
        list(compress(rows, map(eq, row_kinds, repeat(kind)))) if kind in row_kinds else []
        for kind in range(4)
    ]
    raw: list[bytes] = []
    rejected: list[tuple[bytes, bytes]] = []
    for entry in extras:
        if entry[1] == RAW:
            kinds[entry[0] - first] = _KIND_RAW
            raw.append(entry[2])
        else:
            kinds[entry[0] - first] = _KIND_REJECTED
            rejected.append(
                (
                    entry[2].encode("utf-8", "surrogatepass"),
                    entry[3].encode("utf-8", "surrogatepass"),
                )
            )
    table: dict[str | None, int] = {}

    def refs(column: Sequence[str | None]) -> list[int] | int:
        # Each distinct value once in the table; the column names it by index (one index
        # for a column of one value).
        distinct = dict.fromkeys(column)
        for value in distinct:
            table.setdefault(value, len(table))
        if len(distinct) == 1:
            return table[column[0]]
        return list(map(table.__getitem__, column))

    def nones(column: Sequence[Any]) -> list[Any] | None:
        return None if column.count(None) == len(column) else list(column)

    def head(columns: list[Any]) -> list[Any]:
        ids, ts, session, source, actor = columns[KIND + 1 : FIELDS]
        return [_ids_blob(ids), list(ts), refs(session), refs(source), refs(actor)]

    m = _columns(by_kind[MESSAGE], 10)
    d = _columns(by_kind[DOCUMENT], 12)
    r = _columns(by_kind[RECALL], 9)
    x = _columns(by_kind[DELETION], 10)
    messages = [*head(m), refs(m[FIELDS]), list(m[FIELDS + 1]), nones(m[FIELDS + 2])]
    documents = [
        *head(d),
        list(d[FIELDS]),
        list(d[FIELDS + 1]),
        refs(d[FIELDS + 2]),
        nones(d[FIELDS + 3]),
        nones(d[FIELDS + 4]),
    ]
    recalls = [*head(r), list(r[FIELDS]), list(map(_ids_blob, r[FIELDS + 1]))]
    deletions = [
        *head(x),
        list(map(_ids_blob, x[FIELDS])),
        list(x[FIELDS + 1]),
        nones(x[FIELDS + 2]),
    ]
    # The words of each content row, in seq order.
    content = sorted(chain(by_kind[MESSAGE], by_kind[DOCUMENT]), key=itemgetter(SEQ))
    try:
        found = [words_of[row[SEQ]] for row in content]
    except KeyError as exc:
        raise SnapshotFormatError(f"chunk {first}-{last}: no words for seq {exc}") from None
    vocab = list(dict.fromkeys(chain.from_iterable(found)))
    number = dict(zip(vocab, range(len(vocab)), strict=True))
    word_ids = array(_id_type(len(vocab)), map(number.__getitem__, chain.from_iterable(found)))
    if _SWAP:
        word_ids.byteswap()
    value = [
        FORMAT,
        first,
        last,
        bytes(kinds),
        list(table),
        messages,
        documents,
        recalls,
        deletions,
        rejected,
        raw,
        vocab,
        list(map(len, found)),
        word_ids.tobytes(),
        checkpoint,
    ]
    try:
        data = _encoder.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:  # UnicodeEncodeError is a ValueError
        raise SnapshotFormatError(f"chunk {first}-{last}: not encodable: {exc}") from None
    if len(data) > MAX_CHUNK_BYTES:
        raise SnapshotFormatError(
            f"chunk {first}-{last}: {len(data):,} bytes, over {MAX_CHUNK_BYTES:,}"
        )
    return data


# --- decoding -----------------------------------------------------------------------------------


def _fail(where: str, what: str) -> SnapshotFormatError:
    return SnapshotFormatError(f"{where}: {what}")


def _uuid_ints(blob: bytes) -> tuple[int, ...]:
    return tuple(int.from_bytes(blob[i : i + 16]) for i in range(0, len(blob), 16))


def _positions(
    kinds: bytes, counts: list[int]
) -> tuple[Sequence[int], list[Sequence[int]], list[int]]:
    """(offsets of the rows, per row kind its rows' indexes among the rows, offsets of
    the extras), offsets counted from the chunk's first seq."""
    n = len(kinds)
    rows = n - counts[_KIND_RAW] - counts[_KIND_REJECTED]
    present = [kind for kind in range(4) if counts[kind]]
    rels: list[Sequence[int]] = [[], [], [], []]
    if len(present) <= 1:  # one kind of row (messages, say) among extras: at C speed
        if present:
            rels[present[0]] = range(rows)
        if rows == n:
            return range(n), rels, []
        row_offsets = list(compress(range(n), map(gt, repeat(4), kinds)))
        return row_offsets, rels, list(compress(range(n), map(le, repeat(4), kinds)))
    row_offsets = []
    extra_offsets: list[int] = []
    add_row = row_offsets.append
    add_extra = extra_offsets.append
    lists: list[list[int]] = [[], [], [], []]
    for offset, kind in enumerate(kinds):
        if kind < 4:
            lists[kind].append(len(row_offsets))
            add_row(offset)
        else:
            add_extra(offset)
    return row_offsets, [*lists], extra_offsets


# --- the rows, built from the decoded columns when read ---------------------------------------


class _Column:
    """One field of one kind's rows, as decoded; `span` gives the values of ranks
    `lo` to `hi` (the kind's rows in seq order), `at` one of them."""

    __slots__ = ()

    def span(self, lo: int, hi: int) -> Iterable[Any]:
        raise NotImplementedError

    def at(self, rank: int) -> Any:
        raise NotImplementedError


class _Values(_Column):
    __slots__ = ("values",)

    def __init__(self, values: list[Any]) -> None:
        self.values = values

    def span(self, lo: int, hi: int) -> Iterable[Any]:
        return self.values[lo:hi]

    def at(self, rank: int) -> Any:
        return self.values[rank]


class _Same(_Column):
    """One value for every row."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def span(self, lo: int, hi: int) -> Iterable[Any]:
        return repeat(self.value, hi - lo)

    def at(self, rank: int) -> Any:
        return self.value


class _Named(_Column):
    """Indexes into the chunk's string table (checked in range)."""

    __slots__ = ("refs", "strings")

    def __init__(self, refs: list[int], strings: list[str | None]) -> None:
        self.refs, self.strings = refs, strings

    def span(self, lo: int, hi: int) -> Iterable[Any]:
        return map(self.strings.__getitem__, self.refs[lo:hi])

    def at(self, rank: int) -> Any:
        return self.strings[self.refs[rank]]


class _EventIds(_Column):
    """Event ids, 16 bytes each in one run, read as `UUID.int`."""

    __slots__ = ("blob",)

    def __init__(self, blob: bytes) -> None:
        self.blob = blob

    def span(self, lo: int, hi: int) -> Iterable[Any]:
        # Two 64-bit halves each, unpacked in one pass: faster than a bytes slice per id.
        halves = _HALVES.iter_unpack(memoryview(self.blob)[16 * lo : 16 * hi])
        return [(high << 64) | low for high, low in halves]

    def at(self, rank: int) -> Any:
        return int.from_bytes(self.blob[16 * rank : 16 * rank + 16])


_HALVES = struct.Struct(">QQ")


class _IdLists(_Column):
    """Per row a run of ids (16 bytes each), read as a tuple of `UUID.int`."""

    __slots__ = ("blobs",)

    def __init__(self, blobs: list[bytes]) -> None:
        self.blobs = blobs

    def span(self, lo: int, hi: int) -> Iterable[Any]:
        return map(_uuid_ints, self.blobs[lo:hi])

    def at(self, rank: int) -> Any:
        return _uuid_ints(self.blobs[rank])


# A content row's text (a message's content, a document's text) among its kind's columns.
_TEXT = FIELDS + 1 - 2


class _ChunkRows(LazyRows):
    """A decoded chunk's rows (`projector.audit.rows`), built from its columns when read.

    `kinds`: per kind present, (kind, the positions of its rows among all rows, its
    columns in row order after seq and kind). Every column was checked whole by `decode`,
    so building a row cannot fail."""

    __slots__ = ("seqs", "_count", "_kinds")

    def __init__(
        self,
        seqs: list[int],
        count: int,
        kinds: list[tuple[int, Sequence[int], tuple[_Column, ...]]],
    ) -> None:
        self.seqs = seqs
        self._count = count
        self._kinds = kinds

    def __len__(self) -> int:
        return self._count

    def _rank(self, pos: int) -> tuple[int, int, tuple[_Column, ...]]:
        for kind, rel, cols in self._kinds:
            rank = bisect_left(rel, pos)
            if rank < len(rel) and rel[rank] == pos:
                return kind, rank, cols
        raise IndexError(pos)  # every position is some kind's: not reached

    def row(self, pos: int) -> Row:
        kind, rank, cols = self._rank(pos)
        return (self.seqs[pos], kind, *[col.at(rank) for col in cols])

    def between(self, start: int, stop: int) -> list[Row]:
        if start >= stop:
            return []
        seqs = self.seqs
        if len(self._kinds) == 1:  # one kind: a row's rank is its position
            kind, _, cols = self._kinds[0]
            spans = [col.span(start, stop) for col in cols]
            return list(zip(seqs[start:stop], repeat(kind), *spans, strict=False))
        out: list[Row] = [()] * (stop - start)
        for kind, rel, cols in self._kinds:
            lo, hi = bisect_left(rel, start), bisect_left(rel, stop)
            if lo == hi:
                continue
            positions = rel[lo:hi]
            spans = [col.span(lo, hi) for col in cols]
            rows = zip(map(seqs.__getitem__, positions), repeat(kind), *spans, strict=False)
            deque(map(out.__setitem__, map((-start).__add__, positions), rows), maxlen=0)
        return out

    def ids(self) -> Iterable[int]:
        n = self._count
        if len(self._kinds) == 1:
            return self._kinds[0][2][0].span(0, n)
        out = [0] * n
        for _, rel, cols in self._kinds:
            hi = bisect_left(rel, n)
            deque(map(out.__setitem__, rel[:hi], cols[0].span(0, hi)), maxlen=0)
        return out

    def prefix(self, count: int) -> _ChunkRows:
        return _ChunkRows(self.seqs, min(count, self._count), self._kinds)

    def forget(self, pos: int) -> None:
        kind, rank, cols = self._rank(pos)
        if kind in (MESSAGE, DOCUMENT):  # the only rows with a text
            text = cols[_TEXT]
            assert isinstance(text, _Values)  # built so by `decode`
            text.values[rank] = ERASED


def decode(data: bytes, rows_up_to: int | None = None) -> Decoded:
    """A chunk's content, from bytes `encode` made; `SnapshotFormatError` for anything else.

    The rows come as `LazyRows`, built from the checked columns when read.
    `rows_up_to`: the rows of seqs after it are left out (a load up to a seq inside the
    chunk cuts them anyway: `projector.snapshot_store.Chunk.cut`, which the caller then
    owes); the chunk is checked whole all the same, and everything else is whole."""
    try:
        return _decode(data, rows_up_to)
    except SnapshotFormatError:
        raise
    except Exception as exc:  # every check passed yet it failed: still a refusal, not a crash
        raise SnapshotFormatError(f"unreadable: {type(exc).__name__}: {exc}") from None


def _decode(data: bytes, rows_up_to: int | None) -> Decoded:
    if len(data) > MAX_CHUNK_BYTES:
        raise SnapshotFormatError(f"{len(data):,} bytes, over the {MAX_CHUNK_BYTES:,} bound")
    if data[:1] == b"\x80":
        raise SnapshotFormatError("a pickle (an older format, or forged): never unpickled")
    try:
        wire = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise SnapshotFormatError(f"not a format-{FORMAT} chunk: {exc}") from None
    except (msgspec.DecodeError, RecursionError) as exc:
        raise SnapshotFormatError(f"not MessagePack: {exc}") from None
    first, last, kinds = wire.first, wire.last, wire.kinds
    where = f"chunk {first}-{last}"
    n = last - first + 1
    if n <= 0 or n > MAX_ENTRIES or len(kinds) != n:
        raise _fail(where, f"{len(kinds)} kinds for {n} seqs (at most {MAX_ENTRIES:,})")
    counts = [kinds.count(k) for k in range(_KIND_REJECTED + 1)]
    if sum(counts) != n:  # a kind past the known ones
        raise _fail(where, f"unknown entry kind {max(kinds)}")
    strings = wire.strings
    columns = (wire.messages, wire.documents, wire.recalls, wire.deletions)
    for kind, cols in enumerate(columns):
        for name in cols.__struct_fields__:
            values = getattr(cols, name)
            if name == "ids":
                if len(values) != 16 * counts[kind]:
                    raise _fail(
                        where,
                        f"{type(cols).__name__[1:].lower()}.ids: {len(values)} bytes for "
                        f"{counts[kind]} rows, not 16 each",
                    )
            elif type(values) is list and len(values) != counts[kind]:
                raise _fail(
                    where,
                    f"{type(cols).__name__[1:].lower()}.{name}: "
                    f"{len(values)} values for {counts[kind]} rows",
                )
    if len(wire.raw) != counts[_KIND_RAW] or len(wire.rejected) != counts[_KIND_REJECTED]:
        raise _fail(
            where,
            f"{len(wire.raw)} envelopes and {len(wire.rejected)} rejections "
            f"for {counts[_KIND_RAW]} and {counts[_KIND_REJECTED]}",
        )

    def strs(
        refs: list[int] | int, name: str, nullable: bool = True, empty: bool = True
    ) -> _Column:
        # Every index in range, and no row names a None or "" where the field has none.
        top = refs if isinstance(refs, int) else max(refs)
        if top >= len(strings):  # the refs are >= 0
            raise _fail(where, f"{name}: string {top} of {len(strings)}")
        for ref, value in enumerate(strings):
            if (value is None and not nullable) or (value == "" and not empty):
                if ref == refs if isinstance(refs, int) else ref in refs:
                    raise _fail(where, f"{name}: {'null' if value is None else 'empty'}")
        return _Same(strings[refs]) if isinstance(refs, int) else _Named(refs, strings)

    def column(values: list[Any] | None) -> _Column:
        return _Same(None) if values is None else _Values(values)

    for blob in chain(wire.recalls.recalled, wire.deletions.targets):
        if len(blob) % 16:
            raise _fail(where, f"a list of ids of {len(blob)} bytes, not 16 each")
    if not all(wire.deletions.targets):
        raise _fail(where, "a deletion without targets")
    # Shared like the fold's interned strings (the table is small).
    strings[:] = [None if s is None else sys.intern(s) for s in strings]

    row_offsets, rels, extra_offsets = _positions(kinds, counts)
    if len(row_offsets) == n:  # no extras (the usual chunk): the seqs are a range
        row_seqs = list(range(first, last + 1))
    else:
        row_seqs = list(map(first.__add__, row_offsets))
    # The rows kept: all, or those up to `rows_up_to`.
    kept = len(row_seqs)
    if rows_up_to is not None and rows_up_to < last:
        kept = bisect_right(row_seqs, rows_up_to)
    by_kind: list[tuple[int, Sequence[int], tuple[_Column, ...]]] = []
    for kind, cols in enumerate(columns):
        if not counts[kind]:
            continue
        head = (
            _EventIds(cols.ids),
            _Values(cols.ts),
            strs(cols.session, "session_id"),
            strs(cols.source, "source", False),
            strs(cols.actor, "actor"),
        )
        if kind == MESSAGE:
            m: Any = cols
            rest: tuple[_Column, ...] = (
                strs(m.speaker, "speaker", False, False),
                _Values(m.content),
                column(m.retain),
            )
        elif kind == DOCUMENT:
            d: Any = cols
            rest = (
                _Values(d.name),
                _Values(d.text),
                strs(d.media_type, "media_type", False),
                column(d.sha256),
                column(d.retain),
            )
        elif kind == RECALL:
            r: Any = cols
            rest = (_Values(r.query), _IdLists(r.recalled))
        else:
            x: Any = cols
            rest = (_IdLists(x.targets), _Values(x.reason), column(x.requested_by))
        by_kind.append((kind, rels[kind], head + rest))
    rows = _ChunkRows(row_seqs, kept, by_kind)

    words = _words(wire, where, row_seqs, rels)
    extras = _extras(wire, where, first, kinds, extra_offsets, counts)
    checkpoint = None
    if wire.checkpoint is not None:
        checkpoint = decode_checkpoint(wire.checkpoint, first, last)
    message_rel, document_rel = rels[MESSAGE], rels[DOCUMENT]
    other_rel = sorted([*rels[RECALL], *rels[DELETION]])
    return Decoded(
        first,
        last,
        rows,
        message_rel,
        document_rel,
        other_rel,
        words,
        extras,
        checkpoint,
        row_seqs,
    )


def _max_id(ids: array[int]) -> int:
    """The largest id (not empty), read in place by the compiled loop when there is one."""
    top = None if native is None else native.max_index(ids)
    return max(ids) if top is None else int(top)


def _words(wire: _Wire, where: str, row_seqs: list[int], rels: list[Sequence[int]]) -> WordFragment:
    """The chunk's word fragment, checked whole here and built when first read (see
    `WordFragment`): every count, id and word is checked now, so building it cannot fail
    and never meets a value these checks did not see."""
    vocab, counts, packed = wire.vocab, wire.word_counts, wire.word_ids
    if rels[RECALL] or rels[DELETION]:
        seqs = list(map(row_seqs.__getitem__, sorted([*rels[MESSAGE], *rels[DOCUMENT]])))
    else:
        seqs = row_seqs
    if len(counts) != len(seqs):
        raise _fail(where, f"word counts for {len(counts)} of {len(seqs)} content rows")
    ids = array(_id_type(len(vocab)))
    if len(packed) % ids.itemsize:
        raise _fail(where, f"word ids of {len(packed)} bytes, not {ids.itemsize} each")
    ids.frombytes(packed)
    if _SWAP:
        ids.byteswap()
    if sum(counts) != len(ids):
        raise _fail(where, f"{len(ids)} word ids for {sum(counts)} words")
    if ids and _max_id(ids) >= len(vocab):  # the ids are >= 0
        raise _fail(where, f"word {max(ids)} of {len(vocab)}")
    if len(set(vocab)) != len(vocab):
        raise _fail(where, "a word twice in the vocabulary")
    # Kept until a search reads the index: 4 bytes a word, not an int object each.
    return WordFragment(seqs, counts, ids, vocab)


def _extras(
    wire: _Wire, where: str, first: int, kinds: bytes, offsets: list[int], counts: list[int]
) -> list[tuple[Any, ...]]:
    raw = iter(wire.raw)
    rejected = iter(wire.rejected)
    extras: list[tuple[Any, ...]] = []
    try:
        for offset in offsets:
            if kinds[offset] == _KIND_RAW:
                extras.append((first + offset, RAW, next(raw)))
            else:
                reason, error = next(rejected)
                extras.append(
                    (
                        first + offset,
                        REJECTED,
                        reason.decode("utf-8", "surrogatepass"),
                        error.decode("utf-8", "surrogatepass"),
                    )
                )
    except UnicodeDecodeError as exc:
        raise _fail(where, f"a rejection's text is not UTF-8: {exc}") from None
    return extras


# --- the graph checkpoint -----------------------------------------------------------------------

# A check of one field's values across the checkpoint's models (a column): C-speed passes.
Check = Callable[[Sequence[Any]], bool]
_NONE = type(None)


def _types(*allowed: type) -> Check:
    allowed_set = frozenset(allowed)
    return lambda col: set(map(type, col)) <= allowed_set


def _present(col: Sequence[Any]) -> Iterator[Any]:
    return compress(col, map(is_not, col, repeat(None)))


def _in_unit(values: Iterable[Any]) -> bool:
    # NaN fails both comparisons, as it fails the models' ge/le.
    values = list(values)
    return all(map(le, repeat(0), values)) and all(map(ge, repeat(1), values))


def _score(col: Sequence[Any]) -> bool:
    return set(map(type, col)) <= {float, int} and _in_unit(col)


def _opt_score(col: Sequence[Any]) -> bool:
    return set(map(type, col)) <= {float, int, _NONE} and _in_unit(_present(col))


def _opt_count(col: Sequence[Any]) -> bool:
    return set(map(type, col)) <= {int, _NONE} and all(map(le, repeat(0), _present(col)))


def _opt_strs(col: Sequence[Any]) -> bool:
    return set(map(type, col)) <= {list, _NONE} and set(
        map(type, chain.from_iterable(_present(col)))
    ) <= {str}


def _one_of(*values: str) -> Check:
    allowed = frozenset(values)
    return lambda col: set(map(type, col)) <= {str} and set(col) <= allowed


def _any(col: Sequence[Any]) -> bool:
    return True


_str = _types(str)
_opt_str = _types(str, _NONE)
_opt_int = _types(int, _NONE)
_dict = _types(dict)
_opt_dict = _types(dict, _NONE)
_bool = _types(bool)

# Per model: its fields in declaration order, and the check of each.
_CHECKS: dict[type[Any], dict[str, Check]] = {
    MemoryItem: {
        "id": _str,
        "scope": _str,
        "kind": _str,
        "content": _dict,
        "author": _str,
        "source_kind": _str,
        "parents": _opt_strs,
        "authority": _score,
        "conviction": _opt_score,
        "importance": _opt_score,
        "created_at": _opt_int,
        "intent_id": _opt_str,
        "task_id": _opt_str,
        "meta": _opt_dict,
    },
    Edge: {
        "edge_id": _str,
        "from_": _str,
        "to": _str,
        "kind": _str,
        "weight": _opt_score,
        "author": _str,
        "source_kind": _str,
        "authority": _score,
        "active": _bool,
        "meta": _opt_dict,
    },
    Intent: {
        "id": _str,
        "parent_id": _opt_str,
        "label": _str,
        "description": _opt_str,
        "priority": _score,
        "owner": _str,
        "status": _one_of(*get_args(IntentStatus)),
        "context": _opt_dict,
        "root_memory_ids": _opt_strs,
        "meta": _opt_dict,
    },
    Task: {
        "id": _str,
        "intent_id": _str,
        "parent_id": _opt_str,
        "action": _str,
        "label": _opt_str,
        "status": _one_of(*get_args(TaskStatus)),
        "priority": _score,
        "context": _opt_dict,
        "result": _any,
        "error": _opt_str,
        "input_memory_ids": _opt_strs,
        "output_memory_ids": _opt_strs,
        "agent_id": _opt_str,
        "attempt": _opt_count,
        "meta": _opt_dict,
    },
}
for _model, _checks in _CHECKS.items():  # the checks follow the models, field for field
    if list(_checks) != list(_model.model_fields):
        raise RuntimeError(f"snapshot_format: the checks of {_model.__name__} are out of date")
_FIELDS = {model: tuple(checks) for model, checks in _CHECKS.items()}
_GETTERS = {model: itemgetter(*fields) for model, fields in _FIELDS.items()}


def _values(models: Any, model: type[Any]) -> list[tuple[Any, ...]]:
    get = _GETTERS[model]
    return [get(m.__dict__) for m in models]


def encode_checkpoint(
    seq: int, graph: GraphState, intents: IntentState, tasks: TaskState, graph_seq: int | None
) -> str:
    """The graphs as JSON text; `SnapshotFormatError` if `decode_checkpoint` would refuse
    it (a value of a type the models do not declare: an update is not validated)."""
    try:
        value = [
            seq,
            graph_seq,
            _values(graph.items.values(), MemoryItem),
            _values(graph.edges.values(), Edge),
            _values(intents.intents.values(), Intent),
            _values(tasks.tasks.values(), Task),
        ]
    except (KeyError, AttributeError) as exc:  # a model missing a field: not one to store
        raise SnapshotFormatError(f"checkpoint at seq {seq}: {exc!r}") from None
    for rows, model in zip(value[2:], _CHECKS, strict=True):
        _columns_checked(rows, model, f"checkpoint at seq {seq}")
    try:
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SnapshotFormatError(f"checkpoint at seq {seq}: not JSON: {exc}") from None


def _columns_checked(rows: Any, model: type[Any], where: str) -> list[Sequence[Any]]:
    """The columns of `rows` (a list of models' field values), each checked."""
    name = model.__name__
    checks = _CHECKS[model]
    if type(rows) is not list:
        raise _fail(where, f"{name}s: not a list")
    if not rows:
        return [()] * len(checks)
    if not set(map(type, rows)) <= {list, tuple} or set(map(len, rows)) != {len(checks)}:
        raise _fail(where, f"a {name} that is not an array of its {len(checks)} fields")
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
    for (field, check), column in zip(checks.items(), columns, strict=True):
        if not check(column):
            raise _fail(where, f"{name}.{field}: a value of another type or out of range")
    return columns


def _models(rows: list[Any], model: type[Any]) -> list[Any]:
    """Models of checked field values, built as pydantic's ``model_construct`` builds
    them from every field (no validation: the values were checked), one fields set
    shared by all (as the fold shares them: `schemas.fields`)."""
    fields = _FIELDS[model]
    objects = list(map(object.__new__, repeat(model, len(rows))))
    # Copies of a presized dict, then filled: cheaper than growing each from empty.
    dicts = list(map(dict.copy, repeat(dict.fromkeys(fields), len(rows))))
    deque(map(dict.update, dicts, map(zip, repeat(fields), rows)), maxlen=0)
    set_ = object.__setattr__
    for attribute, values in (
        ("__dict__", dicts),
        ("__pydantic_fields_set__", repeat(shared_fields_set(frozenset(fields)))),
        ("__pydantic_extra__", repeat(None)),
        ("__pydantic_private__", repeat(None)),
    ):
        deque(map(set_, objects, repeat(attribute), values), maxlen=0)
    return objects


def _keyed(
    keys: Sequence[str], models: list[Any], model: type[Any], where: str
) -> OrderedPMap[str, Any]:
    if len(set(keys)) != len(keys):
        seen: set[str] = set()
        twice = next(k for k in keys if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _fail(where, f"two {model.__name__}s with {_FIELDS[model][0]} {twice!r}")
    return OrderedPMap(zip(keys, models, strict=True))


def decode_checkpoint(text: str, first: int, last: int) -> Checkpoint:
    """The graphs a checkpoint holds, checked; its seq must lie in first..last."""
    where = f"chunk {first}-{last}: checkpoint"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _fail(where, f"not JSON: {exc}") from None
    if type(value) is not list or len(value) != 6:
        raise _fail(where, "not [seq, graph_seq, items, edges, intents, tasks]")
    seq, graph_seq, *tables = value
    if type(seq) is not int or not first <= seq <= last:
        raise _fail(where, f"seq {seq!r} outside the chunk")
    if graph_seq is not None and (type(graph_seq) is not int or not 0 <= graph_seq <= seq):
        raise _fail(where, f"graph_seq {graph_seq!r} not a seq at or before {seq}")
    maps = []
    for rows, model in zip(tables, _CHECKS, strict=True):
        keys = _columns_checked(rows, model, where)[0]  # the id: each model's first field
        maps.append(_keyed(keys, _models(rows, model), model, where))
    items, edges, intents, tasks = maps
    graph = GraphState(items=items, edges=edges)
    return seq, graph, IntentState(intents=intents), TaskState(tasks=tasks), graph_seq
