"""Issue 17: the logs one process appends to share one Kafka producer
(`producers.logs.shared_producer`), against the real broker.

Sharing must change nothing a log promises: each log's seqs stay dense and its records its
own; a log closed lets go of the producer without waiting for the others; and a purge of
the shared queue (another log's deadline, or a failed producer) fails the records it drops
with the truth: not appended, and why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from memstream import Memory, Message
from producers.logs.kafka import KafkaLog
from producers.logs.shared_producer import PRODUCERS
from schemas.errors import AppendFailedError

pytestmark = pytest.mark.kafka


def _log(memory: Memory) -> KafkaLog:
    log = memory._log
    assert isinstance(log, KafkaLog)
    return log


@pytest.fixture
def locations(kafka_bootstrap: str, redis_url: str, unique_name: str) -> list[str]:
    return [f"kafka://{kafka_bootstrap}/{unique_name}-{i}?redis={redis_url}" for i in range(3)]


@pytest.fixture
def memories(locations: list[str]) -> Iterator[list[Memory]]:
    opened = [Memory(location) for location in locations]
    try:
        yield opened
    finally:
        for memory in opened:
            memory.close()


def test_the_logs_of_a_process_share_one_producer_and_keep_their_own_records(
    memories: list[Memory], locations: list[str]
) -> None:
    producer = _log(memories[0])._producer
    assert producer is not None
    assert all(_log(m)._producer is producer for m in memories)
    # Logs opened earlier in this process with the same settings (other tests') share it too.
    others = PRODUCERS.users(producer) - 3
    assert others >= 0
    futures: list[list[Any]] = [[] for _ in memories]
    for i in range(200):  # interleaved, pipelined, and a synchronous append now and then
        for k, memory in enumerate(memories):
            message = Message(speaker=f"log{k}", content=f"{k}:{i}")
            if i % 50 == 49:
                futures[k].append(memory.add_message(message))
            else:
                futures[k].append(memory.publish_async(message))
    for memory in memories:
        memory.flush()
    for k, location in enumerate(locations):
        stored = [f if not hasattr(f, "result") else f.result(timeout=30) for f in futures[k]]
        assert [e.seq for e in stored] == list(range(200))
        with Memory(location, create=False) as reader:  # what the log holds, read afresh
            events = reader.events()
        assert [e.content for e in events] == [f"{k}:{i}" for i in range(200)]
        assert {e.speaker for e in events} == {f"log{k}"}
    memories[0].close()  # one lets go; the others append on with the same producer
    assert PRODUCERS.users(producer) == others + 2
    assert memories[1].add_message(Message(speaker="log1", content="after")).seq == 200
    for memory in memories[1:]:
        memory.close()
    assert PRODUCERS.users(producer) == others
    with Memory(locations[0]) as again:
        # Once the last user let go, a new one is made; while any is left, it is shared.
        assert (_log(again)._producer is producer) == (others > 0)
        assert again.add_message(Message(speaker="log0", content="again")).seq == 200


def test_records_dropped_from_the_shared_queue_fail_as_not_appended_and_say_why(
    memories: list[Memory], locations: list[str]
) -> None:
    first, other = memories[0], memories[1]
    first.add_message(Message(speaker="a", content="before"))
    producer = _log(first)._producer
    assert producer is not None and _log(other)._producer is producer
    future = other.publish_async(Message(speaker="b", content="queued"))
    # What another log's deadline does to the shared queue (`KafkaLog._watch`): the
    # record just produced is still queued (linger.ms), and is dropped unsent.
    producer.purge(in_queue=True, in_flight=False, blocking=False)
    with pytest.raises(AppendFailedError, match="another log sharing its Kafka producer") as info:
        future.result(timeout=30)
    assert len(info.value.not_appended) == 1
    assert not info.value.unknown
    other.flush()
    # Nothing of it reached the log, and both logs append on.
    assert other.add_message(Message(speaker="b", content="next")).seq == 0
    assert first.add_message(Message(speaker="a", content="after")).seq == 1
    with Memory(locations[1], create=False) as reader:
        assert [e.content for e in reader.events()] == ["next"]
