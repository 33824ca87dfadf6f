"""Issue 16, item 1: a Kafka reader folds its own acknowledged records without fetching
them back, asks the log's end of a client that is not waiting on a fetch, and still folds
every record of the log in its place: another writer's record (valid or garbage) between
its own is never skipped, and a recall reads everything in the log when it was asked."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

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


def test_a_process_that_only_appends_has_no_consumer_until_it_reads_or_recalls(
    location: str, fetches: list[int]
) -> None:
    """A writer's reads of its own records need no fetch, so its log makes no consumer (no
    client fetching every record back from the broker) until a read needs another's or a
    recall starts following the log (to know its end without asking, next time); and
    appending asks nothing of the log's end, so a log only appended to makes no client to
    ask it either."""
    with Memory(location) as memory, Memory(location) as other:
        log = memory.log
        assert isinstance(log, KafkaLog)
        mine: list[Any] = [
            memory.add_message(Message(speaker="ana", content=f"mine {i}")) for i in range(3)
        ]
        mine.append(memory.publish_async(Message(speaker="ana", content="mine 3")).result())
        assert log._meta is None  # nor a client to ask the log's end, until a read
        memory.replay()
        assert log._meta is not None
        assert log._consumer is None and fetches == []
        memory.recall("mine")
        assert log._consumer is not None and fetches == []  # following, nothing fetched yet
        theirs = other.add_message(Message(speaker="bob", content="theirs"))
        state = memory.replay()
        assert log._consumer is not None and fetches
        assert [m.id for m in state.messages] == [*(m.id for m in mine), theirs.id]
        assert state.get(theirs.id) == theirs


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
                if not kwargs.get("cached"):  # a cached one asks nothing of the broker
                    asked.append("fetching consumer")
                return self.inner.get_watermark_offsets(*args, **kwargs)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.inner, name)

        real = log._follower(0)  # made at the first read that needs it: made now
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


def test_a_recall_searches_every_record_its_reader_knows_of_without_asking_the_end(
    location: str,
) -> None:
    """Issue 16: a recall asks the broker nothing before it appends its Recall: it reads
    the state at the end its follower knows of (the high watermark of its last fetch,
    which a fetch waiting at the end learns about a round trip after a record is
    committed). Once that watermark holds another writer's record, the recall searches
    it; and the reader's own appends in between never stop the follower from learning."""
    with Memory(location) as memory, Memory(location) as other:
        log = memory.log
        assert isinstance(log, KafkaLog)
        memory.add_message(Message(speaker="ana", content="plums"))
        memory.recall("plums")  # starts the follower
        asked: list[int] = []
        real_end = log.end_offset

        def end_offset() -> int:
            asked.append(1)
            return real_end()

        log.end_offset = end_offset  # type: ignore[method-assign]
        tp = TopicPartition(log.topic, 0)
        for round_ in range(3):
            for i in range(200):  # own appends the follower must skip past
                memory.add_message(Message(speaker="ana", content=f"mine {round_} {i}"))
            memory.recall("mine")
            theirs = other.add_message(Message(speaker="bob", content=f"cherries {round_}"))
            deadline = time.monotonic() + 10
            while log._consumer.get_watermark_offsets(tp, cached=True)[1] <= theirs.seq:  # type: ignore[union-attr, operator]
                assert time.monotonic() < deadline, "the follower never learned of the record"
                time.sleep(0.01)
            recall, found = memory.recall(f"cherries {round_}", limit=1)
            assert [m.id for m in found] == [theirs.id]
            assert recall.seq > theirs.seq  # type: ignore[operator]
        assert asked == []


def test_own_records_past_the_kept_bytes_are_fetched_back(
    location: str, fetches: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is kept of own records is bounded; past it, the log is read as any other's
    (here none is folded at its acknowledgement: see the speculative fold's tests)."""
    monkeypatch.setattr(kafka_log, "_OWN_MAX_BYTES", 1)
    monkeypatch.setattr(KafkaLog, "_speculate", lambda self, delivery, own: None)
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


# --- the speculative fold: own records folded while the broker acknowledges -----------------


def test_a_synchronous_append_is_folded_by_its_acknowledgement(
    location: str, fetches: list[int]
) -> None:
    """An append's record is in the state when it returns (no read, no fetch), for the
    audit path and for `transact` (a recall) alike; nothing is kept to fold later."""
    with Memory(location) as memory:
        log = memory.log
        assert isinstance(log, KafkaLog)
        first = memory.add_message(Message(speaker="ana", content="apples are red"))
        assert log._state.last_seq == first.seq == 0
        assert log._state.memory.get(first.id) == first
        recall, found = memory.recall("apples")
        assert [m.id for m in found] == [first.id]
        assert log._state.last_seq == recall.seq == 1
        assert log._state.memory.get(recall.id) == recall
        assert log._own == {} and log._pending == {}
    assert fetches == []


@pytest.mark.parametrize("path", ["append", "transact"])
def test_a_record_landing_before_own_one_drops_the_guess(
    location: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """Another writer's record lands between the state an append was folded on and its
    own record: the guessed seqs were wrong, so that fold is dropped and both records are
    folded in their places from the log (the other one refused: it is garbage)."""
    real_send = KafkaLog._send

    def send_after_another(self: KafkaLog, delivery: Any, encoded: Any) -> None:
        _raw_produce(location, [b"a record of another writer"])
        real_send(self, delivery, encoded)

    with Memory(location) as memory:
        log = memory.log
        assert isinstance(log, KafkaLog)
        first = memory.add_message(Message(speaker="ana", content="first"))
        monkeypatch.setattr(KafkaLog, "_send", send_after_another)
        if path == "append":
            own = memory.add_message(Message(speaker="ana", content="own"))
        else:
            own, _ = memory.recall("first")
        monkeypatch.setattr(KafkaLog, "_send", real_send)
        assert own.seq == 2  # seq 1 is the other writer's
        if path == "append":
            assert log._state.last_seq == 0  # the guess (seq 1) dropped: folded when read
        state = log.state()
        assert state.last_seq == 2
        assert [r.seq for r in state.rejections] == [1]
        assert state.memory.get(own.id) == own
        assert [e.seq for e in memory.events()] == [first.seq, own.seq]


def test_guesses_that_keep_missing_are_skipped_for_a_while(
    location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_send = KafkaLog._send

    def send_after_another(self: KafkaLog, delivery: Any, encoded: Any) -> None:
        _raw_produce(location, [b"another writer"])
        real_send(self, delivery, encoded)

    monkeypatch.setattr(KafkaLog, "_send", send_after_another)
    with Memory(location) as memory:
        log = memory.log
        assert isinstance(log, KafkaLog)
        guesses: list[bool] = []
        real_speculate = KafkaLog._speculate

        def counted(self: KafkaLog, delivery: Any, own: int) -> Any:
            guess = real_speculate(self, delivery, own)
            guesses.append(guess is not None)
            return guess

        monkeypatch.setattr(KafkaLog, "_speculate", counted)
        stored = []
        for i in range(kafka_log._SPEC_MISSES + 2):
            stored.append(memory.add_message(Message(speaker="ana", content=f"m{i}")))
            memory.replay()  # folded from the log: nothing of its own left to fold
        # Each own record came after another writer's: every guess missed, and after
        # `_SPEC_MISSES` of them no fold is tried until `_SPEC_SKIP` appends have passed.
        assert guesses == [True] * kafka_log._SPEC_MISSES + [False, False]
        assert log._spec_skip == kafka_log._SPEC_SKIP - 2
        state = memory.replay()
        assert [m.seq for m in state.messages] == [m.seq for m in stored]
        assert [m.seq for m in stored] == list(range(1, 2 * len(stored), 2))
