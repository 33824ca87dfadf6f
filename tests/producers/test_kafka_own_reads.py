"""Issue 16, item 1: a Kafka reader folds its own acknowledged records without fetching
them back, asks the log's end of a client that is not waiting on a fetch, and still folds
every record of the log in its place: another writer's record (valid or garbage) between
its own is never skipped, and a recall reads everything in the log when it was asked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

import producers.logs.kafka as kafka_log
from producers.logs.kafka import KafkaLog
from producers.logs.location import parse_kafka_location
from producers.memory import Memory
from schemas.audit import Message

pytestmark = pytest.mark.kafka


@pytest.fixture
def location(kafka_bootstrap: str, redis_url: str, unique_name: str) -> str:
    return f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"


@pytest.fixture
def fetches(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a KafkaLog read its consumer (each call of `consume_ready`)."""
    calls: list[int] = []
    real = kafka_log.consume_ready

    def counted(consumer: Consumer, max_messages: int, timeout: float) -> list[Any]:
        calls.append(1)
        return real(consumer, max_messages, timeout)

    monkeypatch.setattr(kafka_log, "consume_ready", counted)
    yield calls


def _raw_produce(location: str, values: list[bytes]) -> None:
    """Another writer, not memstream: its records land between ours as they come."""
    loc = parse_kafka_location(location)
    producer = Producer({"bootstrap.servers": loc.bootstrap, "acks": "all"})
    for value in values:
        producer.produce(loc.topic, value, partition=0)
    assert producer.flush(30) == 0


def test_own_appends_are_read_without_a_fetch(location: str, fetches: list[int]) -> None:
    with Memory(location) as memory:
        first = memory.add_message(Message(speaker="ana", content="apples are red"))
        stored = memory.append_many(
            [Message(speaker="ana", content=f"pears {i}") for i in range(3)]
        )
        state = memory.replay()
        assert [m.id for m in state.messages] == [first.id, *(m.id for m in stored)]
        recall, found = memory.recall("apples")
        assert [m.id for m in found] == [first.id]
        assert memory.replay().last_seq == recall.seq == 4
        assert memory.get(recall.id) == recall
    assert fetches == []  # every record was this process's own: nothing fetched back


def test_the_logs_end_is_not_asked_of_the_fetching_consumer(location: str) -> None:
    """The broker answers one connection's requests in order: a watermark asked of the
    consumer waits behind its pending fetch (fetch.wait.max.ms) on every read."""
    with Memory(location) as memory:
        log = memory.log
        assert isinstance(log, KafkaLog)
        asked: list[str] = []

        class Watched:
            def __init__(self, inner: Consumer) -> None:
                self.inner = inner

            def get_watermark_offsets(self, *args: Any, **kwargs: Any) -> Any:
                asked.append("fetching consumer")
                return self.inner.get_watermark_offsets(*args, **kwargs)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

        real = log._consumer
        log._consumer = Watched(real)  # type: ignore[assignment]
        try:
            memory.add_message(Message(speaker="ana", content="one"))
            memory.replay()
            memory.recall("one")
            assert log.head() == 1
        finally:
            log._consumer = real
    assert asked == []


def test_another_writers_records_between_own_ones_are_folded_in_place(
    location: str, fetches: list[int]
) -> None:
    with Memory(location) as memory, Memory(location) as other:
        a = memory.add_message(Message(speaker="ana", content="a"))
        _raw_produce(location, [b"garbage bytes"])  # seq 1
        b = other.add_message(Message(speaker="bob", content="b"))  # seq 2
        c = memory.add_message(Message(speaker="ana", content="c"))  # seq 3: after a gap
        assert (a.seq, b.seq, c.seq) == (0, 2, 3)
        state = memory.log.state()
        assert state.last_seq == 3
        assert [r.seq for r in state.rejections] == [1]
        assert [m.id for m in state.memory.messages] == [a.id, b.id, c.id]
        assert fetches  # the records of others came from the log
        # The same again when the reader's own records all came before the others'.
        d = memory.add_message(Message(speaker="ana", content="d"))  # seq 4
        _raw_produce(location, [b"more garbage"])  # seq 5
        recall, found = memory.recall("b")
        assert recall.seq == 6
        assert [m.id for m in found] == [b.id]
        state = memory.log.state()
        assert [r.seq for r in state.rejections] == [1, 5]
        assert [m.id for m in state.memory.messages] == [a.id, b.id, c.id, d.id]


def test_a_recall_reads_what_another_writer_appended_before_it(location: str) -> None:
    with Memory(location) as memory, Memory(location) as other:
        memory.add_message(Message(speaker="ana", content="plums"))
        memory.replay()
        theirs = other.add_message(Message(speaker="bob", content="cherries"))
        recall, found = memory.recall("cherries")
        assert [m.id for m in found] == [theirs.id]
        assert recall.recalled == (theirs.id,)
        assert recall.seq == theirs.seq + 1  # type: ignore[operator]


def test_own_records_past_the_kept_bytes_are_fetched_back(
    location: str, fetches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is kept of own records is bounded; past it, the log is read as any other's."""
    monkeypatch.setattr(kafka_log, "_OWN_MAX_BYTES", 1)
    with Memory(location) as memory:
        stored = memory.append_many([Message(speaker="ana", content=f"m{i}") for i in range(5)])
        log = memory.log
        assert isinstance(log, KafkaLog)
        assert log._own == {} and log._own_bytes == 0
        assert [m.id for m in memory.replay().messages] == [m.id for m in stored]
    assert fetches


def test_kept_bytes_are_dropped_once_folded(location: str) -> None:
    with Memory(location) as memory:
        log = memory.log
        assert isinstance(log, KafkaLog)
        futures = [memory.publish_async(Message(speaker="ana", content=f"m{i}")) for i in range(20)]
        memory.flush()
        assert [f.result().seq for f in futures] == list(range(20))
        assert sorted(log._own) == list(range(20))
        assert len(memory.replay().messages) == 20
        assert log._own == {} and log._own_bytes == 0
