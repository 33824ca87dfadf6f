"""Issue 11, item 3: a Kafka reader never accepts a seq gap, and an error in the middle of
a consumed batch loses nothing to that reader."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

import producers.logs.kafka as kafka_log
from producers.logs.kafka import KafkaLog
from producers.logs.location import parse_kafka_location
from producers.memory import Memory
from projector.record_fold import FoldResult, LogState
from schemas.audit import Message
from schemas.errors import CorruptLogError

pytestmark = pytest.mark.kafka


@pytest.fixture
def location(kafka_bootstrap: str, redis_url: str, unique_name: str) -> str:
    return f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"


def _messages(n: int, start: int = 0) -> list[Message]:
    return [
        Message(speaker="ana", content=f"m{i}", session_id="s1") for i in range(start, start + n)
    ]


@pytest.fixture
def reader(location: str) -> Iterator[KafkaLog]:
    with Memory(location):  # the writer creates the log
        pass
    log = KafkaLog(parse_kafka_location(location), hydrate=False, create=False)
    yield log
    log.close()


def test_an_error_mid_batch_loses_no_record_to_the_reader(
    location: str, reader: KafkaLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(location) as writer:
        writer.append_many(_messages(300))
        real = kafka_log.fold_record
        raised: list[int] = []

        def flaky(state: LogState, seq: int, data: bytes) -> FoldResult:
            if seq == 150 and not raised:
                raised.append(seq)
                raise RuntimeError("injected fault at seq 150")
            return real(state, seq, data)

        monkeypatch.setattr(kafka_log, "fold_record", flaky)
        with pytest.raises(RuntimeError, match="injected fault"):
            reader.state()
        assert reader.state(min_seq=0).last_seq == 149  # folded up to the fault, no further
        writer.append_many(_messages(5, start=300))  # the log goes on meanwhile

    started = time.monotonic()
    state = reader.state()
    assert time.monotonic() - started < 5
    assert state.last_seq == 304
    assert [m.content for m in state.memory.messages] == [f"m{i}" for i in range(305)]
    assert not state.rejections


def test_records_deleted_under_the_log_are_never_skipped(
    location: str, kafka_bootstrap: str, request: pytest.FixtureRequest
) -> None:
    with Memory(location) as writer:
        writer.append_many(_messages(10))
    topic = parse_kafka_location(location).topic
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0)].result(10)
    # A reader that comes after (one that fetched them before keeps what it read).
    reader = KafkaLog(parse_kafka_location(location), hydrate=False, create=False)
    request.addfinalizer(reader.close)

    started = time.monotonic()
    with pytest.raises(CorruptLogError, match=rf"log {topic}: seq 0 .*starts at seq 4"):
        reader.state()
    with pytest.raises(CorruptLogError, match=rf"log {topic}: seq 0 .*starts at seq 4"):
        next(iter(reader.records(0, timeout=5)))
    assert time.monotonic() - started < 10
    # From where the topic now starts, the records are served densely.
    assert [seq for seq, _ in reader.records(4, timeout=1)] == list(range(4, 10))
