"""Redis snapshots against the real Redis: what a reader hydrates equals the fold of the
log, at its end and at any seq, through graph checkpoints and merged chunks."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from projector.record_fold import fold_log, fold_record
from projector.snapshot_store import SnapshotLost, SnapshotStore, entry_of
from schemas.audit import Deletion, Document, Message, Recall
from schemas.codec import encode_record
from schemas.graph.envelopes import now_iso
from schemas.graph.ids import uuid7
from schemas.records import GraphEnvelope

pytestmark = pytest.mark.kafka


def _env(payload: dict[str, Any]) -> GraphEnvelope:
    return GraphEnvelope(
        id=uuid7(),
        namespace=payload["type"].split(".")[0],
        type=payload["type"],
        ts=now_iso(),
        payload=payload,
    )


def _item(i: int) -> dict[str, Any]:
    return {
        "type": "memory.create",
        "item": {
            "id": f"g{i}",
            "scope": "s",
            "kind": "k",
            "content": {"n": i},
            "author": "a",
            "source_kind": "observed",
            "authority": 0.5,
        },
    }


def _log(n: int) -> list[tuple[int, bytes]]:
    """A mixed log: messages, documents, recalls, deletions, envelopes, refused records."""
    records: list[bytes] = []
    content: list[Any] = []
    for i in range(n):
        if i % 11 == 3 and content:
            records.append(encode_record(Recall(query=f"q{i}", recalled=(content[-1].id,))))
        elif i % 17 == 5 and content:
            records.append(encode_record(Deletion(targets=(content[0].id,), reason="r")))
        elif i % 7 == 2:
            records.append(encode_record(_env(_item(i))))
        elif i % 13 == 6:
            records.append(b"garbage")
        elif i % 19 == 8:
            records.append(encode_record(_env(_item(2))))  # a duplicate id: refused
        elif i % 5 == 1:
            doc = Document(name=f"doc {i}", text=f"word{i % 4} text {i}", session_id="s")
            content.append(doc)
            records.append(encode_record(doc))
        else:
            message = Message(speaker="a", content=f"word{i % 3} message {i}", actor="x")
            content.append(message)
            records.append(encode_record(message))
    return list(enumerate(records))


def _write(store: SnapshotStore, records: list[tuple[int, bytes]], every: int) -> None:
    state = fold_log([])
    store.start_epoch()
    buffer: list[Any] = []
    for seq, data in records:
        state, events = fold_record(state, seq, data)
        buffer.append(entry_of(seq, data, events))
        if len(buffer) == every:
            store.write(buffer[0][0], buffer, state)
            buffer = []
    if buffer:
        store.write(buffer[0][0], buffer, state)


@pytest.fixture
def store(redis_url: str, unique_name: str) -> SnapshotStore:
    return SnapshotStore(redis.Redis.from_url(redis_url), f"memstream:{unique_name}:")


@pytest.mark.parametrize("checkpoint_every", [10**9, 7])
def test_load_equals_the_fold_at_the_end_and_at_any_seq(
    store: SnapshotStore, checkpoint_every: int
) -> None:
    records = _log(400)
    store.checkpoint_every = checkpoint_every
    _write(store, records, every=13)
    clean = fold_log(records)
    loaded = store.load()
    assert loaded == clean
    assert loaded.memory.events == clean.memory.events
    assert loaded.memory.index.postings == clean.memory.index.postings
    assert loaded.memory.index.words_of == clean.memory.index.words_of
    for k in (0, 1, 12, 13, 50, 199, 398):
        prefix = fold_log(records[: k + 1])
        partial = store.load(up_to_seq=k)
        assert partial == prefix
        assert partial.memory.events == prefix.memory.events


def test_merged_chunks_hydrate_the_same_and_stay_few(store: SnapshotStore) -> None:
    records = _log(600)
    store.checkpoint_every = 50
    _write(store, records, every=5)
    before = store.read_position()
    assert before is not None and len(before.chunks) == 120
    assert store.compact(before.epoch) > 0
    after = store.read_position()
    assert after is not None and len(after.chunks) < 12
    assert after.last_seq == before.last_seq
    clean = fold_log(records)
    assert store.load() == clean
    for k in (3, 77, 301):
        assert store.load(up_to_seq=k) == fold_log(records[: k + 1])
    # The writer continues after a merge moved the chunk list.
    state = clean
    more = [(600 + i, encode_record(Message(speaker="a", content=f"more {i}"))) for i in range(3)]
    entries = []
    for seq, data in more:
        state, events = fold_record(state, seq, data)
        entries.append(entry_of(seq, data, events))
    store.position = after
    store.write(600, entries, state)
    assert store.load() == fold_log(records + more)


def test_a_flushed_position_is_lost_for_the_writer(store: SnapshotStore) -> None:
    records = _log(30)
    _write(store, records, every=10)
    store.redis.delete(store.pos_key)
    assert store.load() is None
    state, events = fold_record(fold_log(records), 30, b"x")
    with pytest.raises(SnapshotLost):
        store.write(30, [entry_of(30, b"x", events)], state)


def test_lazy_events_are_built_once_and_read_like_folded_ones(store: SnapshotStore) -> None:
    records = _log(120)
    _write(store, records, every=40)
    loaded, clean = store.load(), fold_log(records)
    assert loaded is not None
    memory = loaded.memory
    some = clean.memory.messages[5]
    assert memory.get(some.id) == some
    assert memory.get(some.id) is memory.get(some.id)
    assert memory.content_at(some.seq) == some  # type: ignore[arg-type]
    assert memory.messages == clean.memory.messages
    assert memory.documents == clean.memory.documents
    assert dict(memory.deleted) == dict(clean.memory.deleted)
    assert dict(memory.recall_stats) == dict(clean.memory.recall_stats)
    assert memory.at(60) == clean.memory.at(60)


def test_a_write_over_the_size_bound_is_split_into_chunks_that_load(
    store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk is at most the format's size bound: a larger write becomes several chunks
    in one MULTI (the graph checkpoint in the last, or left out when it cannot fit)."""
    import projector.snapshot_format as fmt

    records = _log(300)
    clean = fold_log(records)
    for bound, checkpointed in ((6_000, True), (1_500, False)):
        monkeypatch.setattr(fmt, "MAX_CHUNK_BYTES", bound)
        store.checkpoint_every = 1
        store.start_epoch()
        state = fold_log([])
        entries = []
        for seq, data in records:
            state, events = fold_record(state, seq, data)
            entries.append(entry_of(seq, data, events))
        position = store.write(0, entries, state)
        assert len(position.chunks) > 4
        sizes = [store.redis.strlen(store.chunk_key(position.epoch, s)) for s in position.chunks]
        assert max(sizes) <= bound
        chunks = store.load_chunks()
        assert chunks is not None
        assert (chunks[-1].checkpoint is not None) == checkpointed
        assert store.load() == clean


def test_merges_stop_below_the_byte_bound(
    store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import projector.snapshot_store as snapshot

    records = _log(200)
    _write(store, records, every=5)
    before = store.read_position()
    assert before is not None
    monkeypatch.setattr(snapshot, "_MERGE_MAX_BYTES", 100)  # smaller than any 4 chunks
    assert store.compact(before.epoch) == 0
    assert store.read_position() == before
    monkeypatch.undo()
    assert store.compact(before.epoch) > 0
    assert store.load() == fold_log(records)


def _fetch_threads() -> list[Any]:
    import threading

    return [t for t in threading.enumerate() if t.name == "memstream-snapshot-fetch"]


def test_chunks_fetched_while_decoding_load_as_one_read_and_stop_with_the_reader(
    store: SnapshotStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load fetches chunks in a thread while it decodes those before (`_fetched`): it
    loads what the fold gives; a chunk gone mid-way makes it no snapshot (None: read the
    position again), a failing Redis raises the client's own error; no fetch outlives
    the load."""
    records = _log(120)
    _write(store, records, every=10)  # 12 chunks
    position = store.read_position()
    assert position is not None and len(position.chunks) == 12
    loaded = store.load()
    assert loaded is not None and loaded.next_seq == 120
    assert loaded.memory == fold_log(records).memory
    assert not _fetch_threads()

    gets = 0
    real_get = store.redis.get

    def get_then_drop(key: Any) -> Any:  # the 6th chunk is replaced while we read
        nonlocal gets
        gets += 1
        if gets == 5:
            store.redis.delete(store.chunk_key(position.epoch, position.chunks[5]))
        return real_get(key)

    monkeypatch.setattr(store.redis, "get", get_then_drop)
    spans = list(position.chunks)
    assert store._read_chunks(position, spans) is None
    assert not _fetch_threads()

    def get_failing(key: Any) -> Any:
        raise redis.ConnectionError("Redis went away")

    monkeypatch.setattr(store.redis, "get", get_failing)
    with pytest.raises(redis.ConnectionError, match="went away"):
        store._read_chunks(position, spans)
    assert not _fetch_threads()
