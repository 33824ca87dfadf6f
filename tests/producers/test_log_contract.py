"""The `Log` contract, run over every adapter `open_log` knows (the `memory_location`
fixture: the embedded SQLite log and Kafka): appends give dense seqs and the stored events,
reads give ranges of the stored bytes, `head` is the last seq whether folded or not, the
fold refuses what it must, readers never create, and closing is safe to repeat."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient

from producers.logs import Log, open_log
from producers.logs.location import is_kafka_location, parse_kafka_location
from schemas.audit import Message
from schemas.codec import decode_record
from schemas.errors import LocationError, LogNotFoundError, RecordTooLargeError
from schemas.limits import MAX_RECORD_BYTES


def _messages(n: int, start: int = 0) -> list[Message]:
    return [
        Message(speaker="ana", content=f"m{i}", session_id="s1") for i in range(start, start + n)
    ]


@pytest.fixture
def log(memory_location: str) -> Iterator[Log]:
    opened = open_log(memory_location)
    yield opened
    opened.close()


def test_appends_give_dense_seqs_and_the_stored_events(log: Log) -> None:
    (one,) = log.append(_messages(1))
    assert one.seq == 0 and one.record.seq == 0
    assert [event.type for event in one.lifecycle] == ["message.appended"]
    many = log.append(_messages(4, start=1))
    assert [a.seq for a in many] == [1, 2, 3, 4]
    assert [a.record.seq for a in many] == [1, 2, 3, 4]
    assert [a.record.content for a in many] == ["m1", "m2", "m3", "m4"]
    state = log.state()
    assert state.last_seq == 4 and len(state.memory) == 5


def test_transact_builds_on_the_state_and_returns_its_value(log: Log) -> None:
    log.append(_messages(2))
    appended, value = log.transact(lambda state: (_messages(1, start=0), state.last_seq))
    assert value == 1
    assert [a.seq for a in appended] == [2]


def test_records_reads_ranges_of_the_stored_bytes(log: Log) -> None:
    appended = [a.record for a in log.append(_messages(5))]
    everything = list(log.records(0, timeout=1.0))
    assert [seq for seq, _ in everything] == [0, 1, 2, 3, 4]
    # A record's bytes are the event as given: its seq is where it lies, not in them.
    assert [decode_record(data) for _, data in everything] == [
        event.model_copy(update={"seq": None}) for event in appended
    ]
    assert [seq for seq, _ in log.records(3, timeout=1.0)] == [3, 4]
    assert list(log.records(5, timeout=0.5)) == []


def test_head_is_the_last_seq_folded_or_not(memory_location: str, log: Log) -> None:
    assert log.head() is None
    log.append(_messages(3))
    assert log.head() == 2
    other = open_log(memory_location, create=False)  # folded up to its opening
    try:
        log.append(_messages(2, start=3))
        assert other.head() == 4  # appended by another handle, not folded here yet
        assert other.state().last_seq == 4
    finally:
        other.close()


def test_the_fold_refuses_an_event_appended_twice(log: Log) -> None:
    (appended,) = log.append(_messages(1))
    with pytest.raises(ValueError, match="already has seq"):
        log.append([appended.record])
    with pytest.raises(ValueError, match="is already in the log"):
        log.append([appended.record.model_copy(update={"seq": None})])
    with pytest.raises(RecordTooLargeError):
        log.append([Message(speaker="ana", content="x" * MAX_RECORD_BYTES)])
    assert log.head() == 0 and log.state().last_seq == 0


def test_readers_never_create(memory_location: str, tmp_path: Path) -> None:
    with pytest.raises(LogNotFoundError, match="only writers create"):
        open_log(memory_location, create=False)
    if is_kafka_location(memory_location):
        location = parse_kafka_location(memory_location)
        admin = AdminClient({"bootstrap.servers": location.bootstrap})
        topics = admin.list_topics(timeout=10).topics
        assert location.topic not in topics
        assert location.lifecycle_topic not in topics
        with redis.Redis.from_url(location.redis_url) as store:
            assert store.keys(f"{location.key_prefix}*") == []
    else:
        assert not Path(memory_location).exists()
    open_log(memory_location).close()  # a writer creates it
    reader = open_log(memory_location, create=False)
    try:
        assert len(reader.state().memory) == 0 and reader.head() is None
    finally:
        reader.close()


def test_closing_twice_is_safe(memory_location: str) -> None:
    opened = open_log(memory_location)
    opened.append(_messages(1))
    opened.close()
    opened.close()


@pytest.mark.parametrize("location", ["http://host/log", "file:///tmp/log", "redis://h:1/0"])
def test_a_scheme_no_adapter_opens_is_refused(location: str) -> None:
    with pytest.raises(LocationError, match="expected a filesystem path or kafka://"):
        open_log(location)
