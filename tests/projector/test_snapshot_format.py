"""The snapshot chunk format, without Redis: any chunk a fold can produce round-trips, and
forged bytes (a pickle, wrong types, out-of-range indexes, oversized strings, a forged
graph checkpoint) are refused with `SnapshotFormatError` naming what is wrong."""

from __future__ import annotations

import json
import pickle
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import projector.snapshot_format as fmt
from projector.audit.rows import LazyRows
from projector.graph.pmap import HOLE, sset_iter
from projector.graph.state import (
    COLUMN_NAMES,
    active_edge_ids,
    child_ids,
    dense_column,
    incoming_edge_ids,
    outgoing_edge_ids,
    stale_ids,
)
from projector.record_fold import LogState, fold_log, fold_record
from projector.snapshot_format import SnapshotFormatError
from projector.snapshot_store import (
    Chunk,
    build_chunk,
    decode_chunk,
    encode_chunk,
    entry_of,
    hydrate,
    merge_chunks,
)
from queryd.audit.search import search
from schemas.audit import Deletion, Document, Message, Recall
from schemas.codec import encode_record
from schemas.records import GraphEnvelope

# --- a log the fold can make anything of ----------------------------------------------------

_text = st.text(min_size=1, max_size=30)
_opt_text = st.none() | st.text(max_size=12)
_times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
_unit = st.floats(min_value=0, max_value=1)


def _audit(draw: Any, kind: str, earlier: list[UUID]) -> bytes:
    head = {
        "timestamp": draw(_times),
        "session_id": draw(_opt_text),
        "source": draw(st.text(max_size=8)),
        "actor": draw(_opt_text),
    }
    ids = st.sampled_from(earlier) if earlier else st.uuids()
    if kind == "message":
        event: Any = Message(
            speaker=draw(_text),
            content=draw(_text),
            retain_until=draw(st.none() | _times),
            **head,
        )
    elif kind == "document":
        event = Document(
            name=draw(_text),
            text=draw(_text),
            media_type=draw(st.text(max_size=10)),
            sha256=draw(_opt_text),
            retain_until=draw(st.none() | _times),
            **head,
        )
    elif kind == "recall":
        event = Recall(query=draw(_text), recalled=tuple(draw(st.lists(ids, max_size=3))), **head)
    else:
        event = Deletion(
            targets=tuple(draw(st.lists(ids, min_size=1, max_size=3))),
            reason=draw(_text),
            requested_by=draw(_opt_text),
            **head,
        )
    if kind in ("message", "document"):
        earlier.append(event.id)
    return encode_record(event)


def _envelope(draw: Any, items: list[str]) -> bytes:
    kind = draw(st.sampled_from(["create", "create", "update", "edge", "intent", "task", "junk"]))
    if kind == "create" or not items:
        item_id = draw(st.sampled_from(["a", "b", "c", "d", "e", "f"]))
        items.append(item_id)
        payload: dict[str, Any] = {
            "type": "memory.create",
            "item": {
                "id": item_id,
                "scope": draw(st.sampled_from(["s", "t/u", "t"])),
                "kind": "k",
                "content": draw(st.dictionaries(st.text(max_size=4), _json, max_size=3)),
                "author": "x",
                "source_kind": "observed",
                "authority": draw(_unit),
                "importance": draw(st.none() | _unit),
                "parents": draw(st.none() | st.lists(st.sampled_from(["a", "b", "z"]), max_size=2)),
                "meta": draw(st.none() | st.dictionaries(st.text(max_size=3), _json, max_size=2)),
                "created_at": draw(st.none() | st.integers(min_value=0, max_value=2**60)),
            },
        }
    elif kind == "update":
        partial = draw(
            st.sampled_from(
                [
                    {"scope": "t"},
                    {"authority": 0.25},
                    {"content": {"more": [1, 2.5, None]}},
                    {"parents": ["a"]},
                    {"authority": "high"},  # not validated: the graph then holds a str
                ]
            )
        )
        payload = {
            "type": "memory.update",
            "item_id": draw(st.sampled_from(items)),
            "partial": partial,
            "author": "x",
        }
    elif kind == "edge":
        payload = {
            "type": "edge.create",
            "edge": {
                "edge_id": draw(st.sampled_from(["e1", "e2", "e3"])),
                "from": draw(st.sampled_from(items)),
                "to": draw(st.sampled_from(items)),
                "kind": draw(st.sampled_from(["SUPPORTS", "ABOUT"])),
                "author": "x",
                "source_kind": "observed",
                "authority": draw(_unit),
                "active": draw(st.booleans()),
            },
        }
    elif kind == "intent":
        payload = {
            "type": "intent.create",
            "intent": {
                "id": draw(st.sampled_from(["i1", "i2"])),
                "label": draw(_text),
                "priority": draw(_unit),
                "owner": "o",
                "status": "active",
                "context": draw(st.none() | st.dictionaries(st.text(max_size=3), _json)),
            },
        }
    elif kind == "task":
        payload = {
            "type": "task.create",
            "task": {
                "id": draw(st.sampled_from(["t1", "t2"])),
                "intent_id": "i1",
                "action": "act",
                "status": "pending",
                "priority": draw(_unit),
                "result": draw(_json),
                "attempt": draw(st.none() | st.integers(min_value=0, max_value=5)),
            },
        }
    else:
        payload = {"type": "memory.nonsense"}
    namespace = payload["type"].split(".")[0]
    if namespace == "edge":
        namespace = "memory"
    return encode_record(
        GraphEnvelope(
            id=draw(st.uuids()).hex,
            namespace=namespace,
            type=payload["type"],
            ts="2026-12-03T00:00:00.000Z",
            payload=payload,
        )
    )


@st.composite
def logs(draw: Any) -> list[tuple[int, bytes]]:
    earlier: list[UUID] = []
    items: list[str] = []
    records: list[bytes] = []
    for kind in draw(
        st.lists(
            st.sampled_from(
                ["message", "message", "document", "recall", "deletion", "graph", "graph", "junk"]
            ),
            min_size=1,
            max_size=30,
        )
    ):
        if kind == "graph":
            records.append(_envelope(draw, items))
        elif kind == "junk":
            records.append(draw(st.binary(max_size=8)))
        else:
            records.append(_audit(draw, kind, earlier))
    return list(enumerate(records))


def _chunks(records: list[tuple[int, bytes]], cuts: list[int]) -> tuple[list[Chunk], LogState]:
    """The log as chunks cut at `cuts`, each with a graph checkpoint of its last seq."""
    state = fold_log([])
    entries: list[Any] = []
    chunks: list[Chunk] = []
    for seq, data in records:
        state, events = fold_record(state, seq, data)
        entries.append(entry_of(seq, data, events))
        if seq in cuts or seq == records[-1][0]:
            checkpoint = (seq, state.graph, state.intents, state.tasks, state.graph_seq)
            chunks.append(build_chunk(entries, state.memory.index, checkpoint))
            entries = []
    return chunks, state


def _graph_reads(state: LogState) -> dict[str, Any]:
    """What the graphs' indexes answer (a rebuilt index must answer the same)."""
    graph = state.graph
    items: Any = graph.items
    slots = items.slot_values()
    kinds = {e.kind for e in graph.edges.values()}
    scopes: dict[str, list[str]] = {}
    for scope, group in graph.index.scopes.items():
        live = sorted(
            {slots[s].id for s in group if slots[s] is not HOLE and slots[s].scope == scope}
        )
        if live:
            scopes[scope] = live
    columns = {
        name: {i: dense_column(graph, name)[items.position(i)] for i in items}
        for name in COLUMN_NAMES
    }
    return {
        "children": {i: child_ids(graph, i) for i in [*items, "z"]},
        "out": {i: outgoing_edge_ids(graph, i) for i in items},
        "in": {i: incoming_edge_ids(graph, i) for i in items},
        "kinds": {k: active_edge_ids(graph, k) for k in kinds},
        "stale": stale_ids(graph),
        "scopes": scopes,
        "columns": columns,
        "intents_by_parent": {
            k: sorted(sset_iter(v)) for k, v in (state.intents.by_parent or {}).items()
        },
        "tasks_by_intent": {
            k: sorted(sset_iter(v)) for k, v in (state.tasks.by_intent or {}).items()
        },
    }


def _same_chunk(a: Chunk, b: Chunk) -> None:
    assert (a.first, a.last) == (b.first, b.last)
    assert list(a.rows) == list(b.rows)
    # A decoded chunk's rows are built when read: one by one, in runs, and their ids
    # without the rows, all alike.
    n = len(b.rows)
    assert [a.rows[i] for i in range(n)] == list(b.rows)
    assert [row for i in range(0, n, 3) for row in a.rows[i : i + 3]] == list(b.rows)
    if isinstance(a.rows, LazyRows):
        assert list(a.rows.ids()) == [row[2] for row in b.rows]
        assert list(a.rows.between(n // 3, n - n // 3)) == list(b.rows)[n // 3 : n - n // 3]
    # As lists: a decoded chunk of one kind of row holds its positions as a range.
    rels_a = [list(a.message_rel), list(a.document_rel), list(a.other_rel)]
    assert rels_a == [list(b.message_rel), list(b.document_rel), list(b.other_rel)]
    for seqs in (a.seqs, b.seqs):  # when a chunk knows its rows' seqs, they are theirs
        assert seqs is None or seqs == [row[0] for row in a.rows]
    assert a.words_of == b.words_of
    assert a.postings == b.postings
    assert a.extras == b.extras
    assert (a.checkpoint is None) == (b.checkpoint is None)


def _json_eq(a: Any, b: Any) -> bool:
    """Equality where NaN equals NaN (JSON content may hold it; the fold keeps it)."""
    return json.dumps(a, sort_keys=True, default=repr) == json.dumps(
        b, sort_keys=True, default=repr
    )


def _same_state(loaded: LogState, clean: LogState) -> None:
    assert loaded.last_seq == clean.last_seq
    assert loaded.graph_seq == clean.graph_seq
    assert loaded.memory == clean.memory
    assert loaded.memory.events == clean.memory.events
    assert loaded.memory.index.words_of == clean.memory.index.words_of
    assert loaded.memory.index.postings == clean.memory.index.postings
    assert list(loaded.rejections) == list(clean.rejections)
    for name in ("items", "edges"):
        mine, theirs = getattr(loaded.graph, name), getattr(clean.graph, name)
        assert list(mine) == list(theirs)
        assert _json_eq([m.__dict__ for m in mine.values()], [m.__dict__ for m in theirs.values()])
    assert list(loaded.intents.intents) == list(clean.intents.intents)
    assert list(loaded.tasks.tasks) == list(clean.tasks.tasks)
    assert _json_eq(
        [t.__dict__ for t in loaded.tasks.tasks.values()],
        [t.__dict__ for t in clean.tasks.tasks.values()],
    )
    assert _graph_reads(loaded) == _graph_reads(clean)
    for query in ("message", "the", "a b c"):
        assert search(loaded.memory, query, limit=50) == search(clean.memory, query, limit=50)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(records=logs(), data=st.data())
def test_any_chunk_the_fold_makes_round_trips_and_hydrates_to_the_fold(
    records: list[tuple[int, bytes]], data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.sampled_from([s for s, _ in records]), max_size=3))
    chunks, clean = _chunks(records, cuts)
    blobs = [encode_chunk(chunk) for chunk in chunks]
    for chunk, blob in zip(chunks, blobs, strict=True):
        _same_chunk(decode_chunk(blob), chunk)
    # hydrate takes the chunks' lists over (as `load` does): each use decodes anew.
    _same_state(hydrate([decode_chunk(b) for b in blobs]), clean)
    # Merged, encoded again: the same.
    merged = decode_chunk(encode_chunk(merge_chunks([decode_chunk(b) for b in blobs])))
    _same_state(hydrate([merged]), clean)
    # Cut at any seq: the fold of the prefix.
    k = data.draw(st.sampled_from([s for s, _ in records]))
    prefix = [c for c in map(decode_chunk, blobs) if c.first <= k]
    prefix[-1] = prefix[-1].cut(k)
    _same_state(hydrate(prefix), fold_log(records[: k + 1]))
    # The same cut with the rows past it never built (as a load up to k decodes its last
    # chunk): the same chunk, the same state.
    *before, last = [b for c, b in zip(chunks, blobs, strict=True) if c.first <= k]
    unbuilt = Chunk(*fmt.decode(last, rows_up_to=k)).cut(k)
    _same_chunk(unbuilt, decode_chunk(last).cut(k))
    _same_state(hydrate([*map(decode_chunk, before), unbuilt]), fold_log(records[: k + 1]))


# --- forged bytes ---------------------------------------------------------------------------


def _sample() -> tuple[bytes, list[tuple[int, bytes]]]:
    """A chunk of every kind of entry, with a checkpoint, and its log."""
    items = [
        {
            "id": f"g{i}",
            "scope": "s",
            "kind": "k",
            "content": {"n": i},
            "author": "a",
            "source_kind": "observed",
            "authority": 0.5,
        }
        for i in range(3)
    ]
    first = Message(speaker="ana", content="hello world", session_id="s1")
    records = [
        encode_record(first),
        encode_record(Document(name="doc", text="a text about the world")),
        encode_record(Recall(query="world", recalled=(first.id,))),
        encode_record(Deletion(targets=(first.id,), reason="asked")),
        b"garbage",
        *[
            encode_record(
                GraphEnvelope(
                    id=f"env{i}",
                    namespace="memory",
                    type="memory.create",
                    ts="2026-12-03T00:00:00.000Z",
                    payload={"type": "memory.create", "item": item},
                )
            )
            for i, item in enumerate(items)
        ],
    ]
    log = list(enumerate(records))
    chunks, _ = _chunks(log, [])
    return encode_chunk(chunks[0]), log


def _forged(change: Any) -> bytes:
    data, _ = _sample()
    wire = msgspec.msgpack.decode(data)  # plain lists, as anyone could write them
    change(wire)
    return msgspec.msgpack.encode(wire)


def _checkpoint(change: Any) -> Any:
    def forge(wire: list[Any]) -> None:
        value = json.loads(wire[14])
        change(value)
        wire[14] = json.dumps(value)

    return forge


def _set(path: tuple[int, ...], value: Any) -> Any:
    def forge(wire: list[Any]) -> None:
        target = wire
        for i in path[:-1]:
            target = target[i]
        target[path[-1]] = value

    return forge


FORGED = {
    # (what is changed, what the error names)
    "a message's time is a string": (_set((5, 1, 0), "yesterday"), "Expected `int`"),
    "a time beyond datetime's range": (_set((5, 1, 0), 2**62), "<= 253402300799999999"),
    "an id of 15 bytes": (_set((5, 0), b"\x01" * 15), "messages.ids: 15 bytes for 1 rows"),
    "ids for two rows": (_set((5, 0), b"\x01" * 32), "messages.ids: 32 bytes for 1 rows"),
    "an empty message": (_set((5, 6, 0), ""), "length >= 1"),
    "an unknown entry kind": (_set((3,), b"\x00\x01\x02\x03\x05\x09\x04\x04"), "kind 9"),
    "a kind for a seq the chunk lacks": (_set((3,), b"\x00\x01"), "2 kinds for 8 seqs"),
    "a string index out of range": (_set((5, 3), 99), "source: string 99"),
    "a string index out of range in a column": (_set((5, 3), [99]), "source: string 99"),
    "a null source": (
        lambda w: (w[4].append(None), w[5].__setitem__(3, len(w[4]) - 1)),
        "source: null",
    ),
    "a null source in a column": (
        lambda w: (w[4].append(None), w[5].__setitem__(3, [len(w[4]) - 1])),
        "source: null",
    ),
    "an empty speaker": (
        lambda w: (w[4].append(""), w[5].__setitem__(5, len(w[4]) - 1)),
        "speaker: empty",
    ),
    "a column of the wrong length": (_set((5, 3), [0, 0]), "source: 2 values for 1 rows"),
    "a column one value short": (lambda w: w[5][6].pop(), "content: 0 values for 1 rows"),
    "a word index out of range": (
        lambda w: w.__setitem__(13, (10_000).to_bytes(2, "little") + w[13][2:]),
        "word 10000",
    ),
    "word ids not 2 bytes each": (lambda w: w.__setitem__(13, w[13] + b"\x00"), "not 2 each"),
    "word counts that do not add up": (_set((12, 0), 40), "word ids for"),
    "word counts for another number of rows": (
        lambda w: w[12].append(0),
        "word counts for 3 of 2 content rows",
    ),
    "a word twice in the vocabulary": (
        lambda w: w[11].__setitem__(1, w[11][0]),
        "a word twice in the vocabulary",
    ),
    "a deletion without targets": (_set((8, 5, 0), b""), "without targets"),
    "ids not 16 bytes each": (_set((7, 6, 0), b"\x01" * 17), "not 16 each"),
    "a seq past 2**63": (_set((2,), 2**64 - 1), "<= 9223372036854775807"),
    "an oversized string": (
        _set((5, 6, 0), "x" * (fmt.MAX_STRING + 1)),
        f"length <= {fmt.MAX_STRING}",
    ),
    "another format": (_set((0,), 2), "Invalid enum value 2"),
    "a field more": (lambda w: w.append(1), "Expected `array` of at most length 15, got 16"),
    "a column more": (lambda w: w[5].append([]), "Expected `array` of at most length 8, got 9"),
    "checkpoint: an item's authority out of range": (
        _checkpoint(lambda v: v[2][0].__setitem__(7, 7.5)),
        "MemoryItem.authority",
    ),
    "checkpoint: content that is a list": (
        _checkpoint(lambda v: v[2][0].__setitem__(3, [1])),
        "MemoryItem.content",
    ),
    "checkpoint: an item of another shape": (
        _checkpoint(lambda v: v[2][0].pop()),
        "not an array of its 14 fields",
    ),
    "checkpoint: one id twice": (
        _checkpoint(lambda v: v[2].append(v[2][0])),
        "two MemoryItems with id 'g0'",
    ),
    "checkpoint: a seq outside the chunk": (
        _checkpoint(lambda v: v.__setitem__(0, 99)),
        "seq 99 outside the chunk",
    ),
    "checkpoint: an unknown intent status": (
        _checkpoint(
            lambda v: v[4].append(["i", None, "l", None, 0.5, "o", "evil", None, None, None])
        ),
        "Intent.status",
    ),
    "checkpoint: not JSON": (_set((14,), "{not json"), "not JSON"),
    "checkpoint: nested past the recursion limit": (
        _set((14,), "[" * 100_000 + "]" * 100_000),
        "not JSON",
    ),
}


@pytest.mark.parametrize("name", list(FORGED))
def test_a_forged_chunk_is_refused_naming_what_is_wrong(name: str) -> None:
    change, expected = FORGED[name]
    with pytest.raises(SnapshotFormatError, match=expected.replace("(", r"\(")):
        decode_chunk(_forged(change))
    # Checked whole even when only the rows up to its first seq are to be built.
    with pytest.raises(SnapshotFormatError, match=expected.replace("(", r"\(")):
        fmt.decode(_forged(change), rows_up_to=0)


def test_the_sample_is_valid_and_every_forgery_starts_from_it() -> None:
    data, log = _sample()
    chunk = decode_chunk(data)
    assert hydrate([chunk]) == fold_log(log)
    assert chunk.checkpoint is not None and len(chunk.checkpoint[1].items) == 3
    unchanged = msgspec.msgpack.encode(msgspec.msgpack.decode(data))
    assert list(decode_chunk(unchanged).rows) == list(chunk.rows)


def test_a_word_no_row_holds_gets_no_posting_and_the_index_is_built_when_read() -> None:
    """A chunk's words stay compact until the index is first read; then they give the
    rows' own index. A word of the vocabulary that no row holds (the encoder writes none;
    a forger may) gets no posting, so it changes nothing."""
    data, log = _sample()
    clean = hydrate([decode_chunk(data)])
    wire = msgspec.msgpack.decode(data)
    wire[11].append("unheard")
    forged = decode_chunk(msgspec.msgpack.encode(wire))
    assert type(forged.words).__name__ == "WordFragment"
    state = hydrate([forged])
    assert state.memory.index._pending  # not built by the hydration
    assert "unheard" not in state.memory.index.postings
    assert not state.memory.index._pending  # built once read
    assert state.memory.index.postings == clean.memory.index.postings
    assert state.memory.index.words_of == clean.memory.index.words_of
    assert state == fold_log(log)
    assert "unheard" not in forged.cut(0).postings


@pytest.mark.parametrize("words", [65_535, 65_536])
def test_word_ids_pack_in_16_bits_up_to_65536_words_and_in_32_beyond(words: int) -> None:
    """The width of the packed word ids follows the vocabulary: every id round-trips on
    both sides of the boundary, and the postings equal a fold's."""
    per = 16  # words a message: few messages, a vocabulary of `words` distinct words
    log = [
        (
            seq,
            encode_record(
                Message(
                    speaker="s", content=" ".join(f"w{k}" for k in range(i, min(i + per, words)))
                )
            ),
        )
        for seq, i in enumerate(range(0, words, per))
    ]
    folded, entries = fold_log([]), []
    for seq, data in log:
        folded, events = fold_record(folded, seq, data)
        entries.append(entry_of(seq, data, events))
    data = encode_chunk(build_chunk(entries, folded.memory.index))
    wire = msgspec.msgpack.decode(data)
    # Each message's words and its speaker's name: the vocabulary is `words` + 1.
    assert len(wire[11]) == words + 1
    assert len(wire[13]) == (2 if words + 1 <= 65_536 else 4) * sum(wire[12])
    state = hydrate([decode_chunk(data)])
    assert state.memory.index.postings == folded.memory.index.postings
    assert state.memory.index.words_of == folded.memory.index.words_of
    if words + 1 > 65_536:
        # A forged id just past the vocabulary, or the largest 32-bit one (unsigned: the
        # compiled check must not read it as -1), is refused naming it.
        vocab = len(wire[11])
        for forged_id in (vocab, 0xFFFF_FFFF):
            forged = list(wire)
            forged[13] = wire[13][:-4] + forged_id.to_bytes(4, "little")
            with pytest.raises(SnapshotFormatError, match=f"word {forged_id} of {vocab}"):
                decode_chunk(msgspec.msgpack.encode(forged))


class _Plant:
    """A pickle that creates a file when loaded: what a snapshot key could hold."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def test_a_pickle_is_refused_without_being_loaded(tmp_path: Path) -> None:
    planted = tmp_path / "ran"
    payload = pickle.dumps(_Plant(planted), protocol=pickle.HIGHEST_PROTOCOL)
    with pytest.raises(SnapshotFormatError, match="pickle"):
        decode_chunk(payload)
    payload0 = pickle.dumps(_Plant(planted), protocol=0)  # no leading 0x80
    with pytest.raises(SnapshotFormatError):
        decode_chunk(payload0)
    assert not planted.exists()


def test_bytes_over_the_bound_are_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    data, _ = _sample()
    monkeypatch.setattr(fmt, "MAX_CHUNK_BYTES", len(data) - 1)
    with pytest.raises(SnapshotFormatError, match="over the"):
        decode_chunk(data)


@pytest.mark.parametrize("data", [b"", b"\x9f", b"\xdd\xff\xff\xff\xff", b"\x91" * 100_000])
def test_truncated_or_bomb_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(SnapshotFormatError):
        decode_chunk(data)


def test_a_checkpoint_a_reader_would_refuse_is_not_written() -> None:
    """An unvalidated update can leave a str where a score belongs: the writer leaves the
    checkpoint out (readers refold the envelopes) instead of writing one they refuse."""
    records = [
        encode_record(
            GraphEnvelope(
                id=f"e{i}",
                namespace="memory",
                type=payload["type"],
                ts="2026-12-03T00:00:00.000Z",
                payload=payload,
            )
        )
        for i, payload in enumerate(
            [
                {
                    "type": "memory.create",
                    "item": {
                        "id": "a",
                        "scope": "s",
                        "kind": "k",
                        "content": {},
                        "author": "x",
                        "source_kind": "o",
                        "authority": 0.5,
                    },
                },
                {
                    "type": "memory.update",
                    "item_id": "a",
                    "partial": {"authority": "high"},
                    "author": "x",
                },
            ]
        )
    ]
    log = list(enumerate(records))
    chunks, clean = _chunks(log, [])
    assert chunks[0].checkpoint is not None
    copy = decode_chunk(encode_chunk(chunks[0]))
    assert chunks[0].checkpoint is None and copy.checkpoint is None
    assert hydrate([copy]) == clean
    assert clean.graph.items["a"].authority == "high"


def test_times_at_the_ends_of_datetime_round_trip() -> None:
    for when in (datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)):
        event = Message(speaker="a", content="edge of time", timestamp=when, retain_until=when)
        log = [(0, encode_record(event))]
        chunks, clean = _chunks(log, [])
        copy = decode_chunk(encode_chunk(chunks[0]))
        assert hydrate([copy]).memory.events == clean.memory.events
        assert copy.rows[0][3] in (fmt._MIN_US, fmt._MAX_US)


def test_threads_reading_a_hydrated_index_at_once_build_it_once() -> None:
    """States folded from one log share its index across threads: the first reads of a
    hydrated index, at once from many threads, merge each chunk's words once."""
    records = [
        (seq, encode_record(Message(speaker="s", content=f"word{seq % 7} common n{seq}")))
        for seq in range(600)
    ]
    chunks, _ = _chunks(records, [150, 300, 450])
    eager = hydrate(chunks)
    expected = {w: list(p) for w, p in eager.memory.index.postings.items()}
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns within a merge, not only between
    try:
        _read_at_once(chunks, expected)
    finally:
        sys.setswitchinterval(switch)


def _read_at_once(chunks: list[Chunk], expected: dict[str, list[int]]) -> None:
    import threading

    for _ in range(5):
        state = hydrate([decode_chunk(encode_chunk(c)) for c in chunks])
        index = state.memory.index
        assert len(index._pending) == 4
        start = threading.Barrier(8)
        seen: list[dict[str, list[int]]] = []

        def read(index: Any = index, start: Any = start, seen: Any = seen) -> None:
            start.wait()
            seen.append({w: list(p) for w, p in index.postings.items()})

        threads = [threading.Thread(target=read) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert seen == [expected] * 8


def _mixed_log(n: int) -> list[tuple[int, bytes]]:
    """Messages, documents, recalls and deletions interleaved (each chunk holds them all)."""
    records: list[tuple[int, bytes]] = []
    ids: list[UUID] = []
    for seq in range(n):
        if seq % 7 == 3 and ids:
            event: Any = Recall(query=f"q{seq}", recalled=(ids[-1], ids[0]))
        elif seq % 11 == 5 and ids:
            event = Deletion(targets=(ids[seq % len(ids)],), reason="r")
        elif seq % 5 == 1:
            event = Document(name=f"d{seq}", text=f"doc text {seq}", session_id="s2")
        else:
            event = Message(speaker="s", content=f"word{seq % 7} n{seq}", session_id=f"s{seq % 3}")
        ids.append(event.id)
        records.append((seq, encode_record(event)))
    return records


def test_threads_reading_rows_built_when_read_all_see_the_fold() -> None:
    """A hydrated ledger builds each row from its chunk's columns when read. Threads that
    read at once (by id, by seq, every message, every event), with Python switching
    between them every microsecond, all see exactly the fold; no row stays unbuilt."""
    import threading

    records = _mixed_log(3_000)
    chunks, clean = _chunks(records, [700, 1_500, 2_200])
    fold_events = clean.memory.events
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(3):
            memory = hydrate([decode_chunk(encode_chunk(c)) for c in chunks]).memory
            ledger = memory._ledger
            assert ledger._lazy, "the decoded chunks' rows are entered unbuilt"
            start = threading.Barrier(6)
            wrong: list[str] = []

            def read(
                part: int, memory: Any = memory, start: Any = start, wrong: Any = wrong
            ) -> None:
                start.wait()
                if part == 0:
                    if memory.events != fold_events:
                        wrong.append("events")
                elif part == 1:
                    if memory.messages != clean.memory.messages:
                        wrong.append("messages")
                else:
                    for event in fold_events[part::4]:
                        if memory.get(event.id) != clean.memory.get(event.id):
                            wrong.append(f"get {event.seq}")
                        if isinstance(event, Message | Document):
                            if memory.content_at(event.seq) != event:
                                wrong.append(f"content_at {event.seq}")

            threads = [threading.Thread(target=read, args=(part,)) for part in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert wrong == []
            assert ledger._lazy == ()  # every run built: its columns let go
            assert memory == clean.memory
    finally:
        sys.setswitchinterval(switch)


def test_a_row_erased_before_it_was_built_is_gone_from_its_chunks_columns_too() -> None:
    """An Erasure folded onto a hydrated ledger redacts rows still in their chunk's
    columns: the event reads as erased, and the columns no longer hold its text (a later
    build of the run must not bring it back)."""
    from projector.audit.state import fold
    from schemas.audit import ERASED, Erasure

    records = _mixed_log(400)
    chunks, clean = _chunks(records, [199])
    memory = hydrate([decode_chunk(encode_chunk(c)) for c in chunks]).memory
    secret = clean.memory.messages[150]
    document = clean.memory.documents[20]
    ledger = memory._ledger
    assert repr(ledger.events[ledger.by_id[secret.id.int]]) == "<lazy row>"
    erasure = Erasure(
        subject="someone",
        erased=(secret.id, document.id),
        leaf_hashes=("00" * 32, "11" * 32),
        reason="asked",
        seq=400,
    )
    after = fold(memory, erasure)
    assert after.get(secret.id).content == ERASED  # type: ignore[union-attr]
    assert after.get(document.id).text == ERASED  # type: ignore[union-attr]
    runs = after._ledger._lazy
    assert runs, "other rows are still unbuilt"
    held = [field for _, rows in runs for row in rows for field in row]
    assert secret.content not in held and document.text not in held
    assert ERASED in held
    # Built later, the run gives every other row as folded, the erased ones erased.
    events = after.events
    erased = [e for e in events if e.id in (secret.id, document.id)]
    assert [getattr(e, "content", None) or getattr(e, "text", None) for e in erased] == [ERASED] * 2
    others = [e for e in events[:-1] if e.id not in (secret.id, document.id)]
    assert others == [e for e in clean.memory.events if e.id not in (secret.id, document.id)]


@pytest.mark.parametrize("read", ["get", "events"])
def test_an_erasure_folded_while_a_reader_builds_that_row_stands(
    read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader builds an unbuilt row's event while a fold on another thread erases it
    (here: in the middle of the build, between reading the row and storing the event).
    The event stored last must still be the erased one, in every state of the ledger."""
    import projector.audit.state as state_module
    from projector.audit.state import fold
    from schemas.audit import ERASED, Erasure

    records = _mixed_log(400)
    chunks, clean = _chunks(records, [199])
    memory = hydrate([decode_chunk(encode_chunk(c)) for c in chunks]).memory
    secret = clean.memory.messages[150]
    erasure = Erasure(
        subject="someone", erased=(secret.id,), leaf_hashes=("00" * 32,), reason="r", seq=400
    )
    build = state_module.event_of
    folded: list[Any] = []
    raced: list[bool] = []

    def racing(row: Any) -> Any:
        if row[2] == secret.id.int and not raced:
            raced.append(True)  # once: the fold builds that row too
            folded.append(fold(memory, erasure))  # the other thread's turn
        return build(row)

    monkeypatch.setattr(state_module, "event_of", racing)
    if read == "get":
        seen = memory.get(secret.id)
    else:
        seen = next(e for e in memory.events if e.id == secret.id)
    monkeypatch.undo()
    assert folded, "the erasure was folded in the middle of the build"
    assert seen is not None and seen.content == ERASED  # type: ignore[union-attr]
    for state in (memory, folded[0]):
        assert state.get(secret.id).content == ERASED  # type: ignore[union-attr]
