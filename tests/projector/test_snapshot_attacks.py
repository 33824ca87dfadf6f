"""Hostile snapshot keys against the real Kafka and Redis (issue 11, item 1).

Anyone who can write a snapshot key in Redis must not run code in the readers of the log
(a `KafkaLog`/`Memory` reader, queryd, the projector), nor make them serve anything but
the log's own state: a pickle, or a chunk of the current format forged in any way, is
refused (the snapshot is treated as absent, with a warning naming the key) and the reader
folds the log from Kafka instead.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import Consumer, TopicPartition

import projector.snapshot_format as fmt
from memstream import Document, Memory, Message
from producers.logs.kafka import KafkaLog
from producers.logs.kafka_client import consumer_conf
from producers.logs.location import KafkaLocation, parse_kafka_location
from producers.logs.topic_identity import log_identity
from producers.memex_store import MemexStore
from projector.record_fold import LogState, empty_state, fold_record
from projector.service import Projector
from projector.snapshot_store import SnapshotStore, decode_chunk, entry_of

pytestmark = pytest.mark.kafka


@pytest.fixture
def location(kafka_bootstrap: str, redis_url: str, unique_name: str) -> str:
    return f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"


class _Plant:
    """A pickle whose loading creates a file: code run by whoever unpickles it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.path), "w"))


def _records(loc: KafkaLocation) -> list[tuple[int, bytes]]:
    consumer = Consumer(consumer_conf(loc.bootstrap))
    tp = TopicPartition(loc.topic, 0)
    _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    consumer.assign([TopicPartition(loc.topic, 0, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    while len(out) < high and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=0.5):
            assert message.error() is None, message.error()
            out.append((message.offset(), message.value()))
    consumer.close()
    assert len(out) == high
    return out


def _fill(location: str) -> KafkaLocation:
    """A log of messages, documents, deletions and graph items, and its snapshot as the
    projector writes it: a chunk every 40 records, graph checkpoints among them."""
    loc = parse_kafka_location(location)
    with Memory(location) as memory, MemexStore.open(location) as store:
        for i in range(120):
            if i % 9 == 4:
                memory.add_document(Document(name=f"doc {i}", text=f"a document, number {i}"))
            else:
                stored = memory.add_message(Message(speaker="ana", content=f"word{i % 5} n{i}"))
                if i % 17 == 0:
                    memory.delete([stored.id], "asked")
            if i % 6 == 0:
                store.create(
                    id=f"g{i}",
                    scope="s",
                    kind="k",
                    content={"n": i, "x": [1.5]},
                    author="a",
                    source_kind="observed",
                    authority=0.4,
                )
    snapshots = SnapshotStore.connect(loc)
    snapshots.checkpoint_every = 5
    snapshots.start_epoch(log_identity(loc.bootstrap, loc.topic).topic_id)
    state = empty_state()
    entries: list[Any] = []
    for seq, data in _records(loc):
        state, events = fold_record(state, seq, data)
        entries.append(entry_of(seq, data, events))
        if len(entries) == 40:
            snapshots.write(entries[0][0], entries, state)
            entries = []
    if entries:
        snapshots.write(entries[0][0], entries, state)
    return loc


def _fresh_fold(loc: KafkaLocation) -> LogState:
    """The log's true state: folded from Kafka, no snapshot at all."""
    log = KafkaLog(loc, hydrate=False, create=False)
    try:
        return log.state()
    finally:
        log.close()


def _reader_state(location: str) -> LogState:
    with Memory(location, create=False) as reader:
        return reader.log.state()


def _chunk_keys(store: SnapshotStore) -> list[str]:
    pos = store.read_position()
    assert pos is not None and len(pos.chunks) >= 3
    return [store.chunk_key(pos.epoch, span) for span in pos.chunks]


def test_a_pickle_in_a_chunk_key_runs_nothing_and_the_reader_serves_the_log(
    location: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loc = _fill(location)
    store = SnapshotStore.connect(loc)
    clean = _fresh_fold(loc)
    assert store.load() == clean  # the snapshot is whole before the attack
    planted = tmp_path / "code-ran"
    key = _chunk_keys(store)[1]
    store.redis.set(key, pickle.dumps(_Plant(planted), protocol=pickle.HIGHEST_PROTOCOL))
    with caplog.at_level(logging.WARNING, logger="memstream"):
        assert store.load() is None
        assert _reader_state(location) == clean
    assert not planted.exists(), "unpickling the snapshot key ran its code"
    assert key in caplog.text and "pickle" in caplog.text


def test_a_pickle_in_the_position_key_is_no_snapshot_and_the_reader_serves_the_log(
    location: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    loc = _fill(location)
    store = SnapshotStore.connect(loc)
    clean = _fresh_fold(loc)
    planted = tmp_path / "code-ran"
    store.redis.set(store.pos_key, pickle.dumps(_Plant(planted)))
    with caplog.at_level(logging.WARNING, logger="memstream"):
        assert store.load() is None  # no exception out of load
        assert _reader_state(location) == clean
    assert not planted.exists()
    assert store.pos_key in caplog.text


def _forge(data: bytes, change: Any) -> bytes:
    wire = msgspec.msgpack.decode(data)  # plain lists: what anyone can write
    change(wire)
    return msgspec.msgpack.encode(wire)


def _in_checkpoint(change: Any) -> Any:
    def forge(wire: list[Any]) -> None:
        value = json.loads(wire[14])
        change(value)
        wire[14] = json.dumps(value)

    return forge


def _first_message(change: Any) -> Any:
    def forge(wire: list[Any]) -> None:
        assert wire[5][0], "the chunk holds messages"
        change(wire)

    return forge


FORGERIES = {
    "a message's time of another type": (
        _first_message(lambda w: w[5][1].__setitem__(0, "noon")),
        "Expected `int`",
    ),
    "an entry kind out of range": (
        lambda w: w.__setitem__(3, b"\x07" + w[3][1:]),
        "unknown entry kind 7",
    ),
    "a row's string index out of range": (
        _first_message(lambda w: w[5].__setitem__(5, 10**6)),
        "speaker: string 1000000",
    ),
    "an oversized string": (
        _first_message(lambda w: w[5][6].__setitem__(0, "x" * (fmt.MAX_STRING + 1))),
        f"length <= {fmt.MAX_STRING}",
    ),
    "a word index out of range": (
        lambda w: w.__setitem__(13, (60_000).to_bytes(2, "little") + w[13][2:]),
        "word 60000",
    ),
    "a checkpoint item with a forged score": (
        _in_checkpoint(lambda v: v[2][0].__setitem__(7, 5.0)),
        "MemoryItem.authority",
    ),
    "a checkpoint past its chunk": (
        _in_checkpoint(lambda v: v.__setitem__(0, v[0] + 10**6)),
        "outside the chunk",
    ),
    "a checkpoint item twice": (
        _in_checkpoint(lambda v: v[2].append(v[2][0])),
        "two MemoryItems with id",
    ),
}


@pytest.mark.parametrize("name", list(FORGERIES))
def test_a_forged_chunk_is_refused_and_the_reader_serves_the_log(
    location: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    change, expected = FORGERIES[name]
    loc = _fill(location)
    store = SnapshotStore.connect(loc)
    clean = _fresh_fold(loc)
    keys = _chunk_keys(store)
    # The chunk to forge: for a checkpoint, the last one that holds one.
    key = keys[0]
    if "checkpoint" in name:
        key = next(k for k in reversed(keys) if decode_chunk(store.redis.get(k)).checkpoint)
    store.redis.set(key, _forge(store.redis.get(key), change))
    with caplog.at_level(logging.WARNING, logger="memstream"):
        assert store.load() is None
        assert _reader_state(location) == clean
    assert key in caplog.text and expected in caplog.text


def test_a_chunk_under_another_key_is_refused(
    location: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A valid chunk copied under another chunk's key: it holds other seqs than its key."""
    loc = _fill(location)
    store = SnapshotStore.connect(loc)
    keys = _chunk_keys(store)
    store.redis.set(keys[1], store.redis.get(keys[2]))
    with caplog.at_level(logging.WARNING, logger="memstream"):
        assert store.load() is None
        assert _reader_state(location) == _fresh_fold(loc)
    assert f"{keys[1]}: holds seqs" in caplog.text


def test_an_old_pickled_snapshot_is_never_loaded_and_the_projector_rebuilds(
    location: str, tmp_path: Path
) -> None:
    """A snapshot of format 2 (pickled chunks, as memstream wrote them before) is ignored:
    readers fold the log, the projector writes a new one over it."""
    loc = _fill(location)
    store = SnapshotStore.connect(loc)
    clean = _fresh_fold(loc)
    planted = tmp_path / "code-ran"
    store.redis.set(
        store.pos_key,
        json.dumps(
            {
                "v": 2,
                "epoch": "01d0e90c4a1b",
                "chunks": [[0, clean.last_seq]],
                "last_seq": clean.last_seq,
            }
        ),
    )
    old_key = store.chunk_key("01d0e90c4a1b", (0, clean.last_seq))  # type: ignore[arg-type]
    store.redis.set(old_key, pickle.dumps(_Plant(planted)))
    assert store.load() is None
    assert _reader_state(location) == clean
    Projector(loc, every_records=40).run(until_caught_up=True)
    assert store.load() == clean
    assert store.redis.get(old_key) is None  # the old generation's keys are dropped
    assert not planted.exists()
