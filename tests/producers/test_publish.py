"""Asynchronous appends over every location: `publish_async` and `publish_many`.

On Kafka they are pipelined (many batches in flight); on the embedded log, group-committed.
Either way a future resolves only once its events are durable, checks answer as the
synchronous calls do, and seqs stay dense.
"""

from __future__ import annotations

from uuid import uuid4

import pytest

from memstream import Deletion, Memory, Message, Recall


@pytest.fixture
def memory(memory_location: str):  # type: ignore[no-untyped-def]
    with Memory(memory_location) as m:
        yield m


def test_publish_many_gives_stored_events_in_order_with_dense_seqs(memory: Memory) -> None:
    batches = [[Message(speaker="a", content=f"b{b} m{i}") for i in range(50)] for b in range(8)]
    futures = [memory.publish_many(batch) for batch in batches]
    stored = [event for future in futures for event in future.result(timeout=30)]
    assert [e.seq for e in stored] == list(range(400))
    assert [e.id for e in stored] == [m.id for batch in batches for m in batch]
    assert [e.model_dump() for e in memory.events()] == [e.model_dump() for e in stored]


def test_publish_async_resolves_each_event_in_order(memory: Memory) -> None:
    messages = [Message(speaker="a", content=f"m{i}") for i in range(300)]
    futures = [memory.publish_async(m) for m in messages]
    memory.flush()
    assert all(f.done() for f in futures)
    assert [f.result().seq for f in futures] == list(range(300))
    assert len(memory) == 300


def test_a_target_still_in_flight_is_found(memory: Memory) -> None:
    messages = [Message(speaker="a", content=f"m{i}") for i in range(20)]
    first = memory.publish_many(messages)
    # Published before the messages are acknowledged: the check waits for them.
    recall = memory.publish_async(Recall(query="m", recalled=(messages[-1].id,)))
    deletion = memory.publish_many([Deletion(targets=(messages[0].id,), reason="r")])
    assert first.result(timeout=30)[-1].seq == 19
    assert recall.result(timeout=30).seq == 20
    assert deletion.result(timeout=30)[0].seq == 21
    assert memory.get(messages[0].id) is not None
    assert len(memory.replay().visible_messages) == 19


def test_a_duplicate_in_flight_is_refused(memory: Memory) -> None:
    message = Message(speaker="a", content="once")
    first = memory.publish_async(message)
    again = memory.publish_async(message)
    assert first.result(timeout=30).seq == 0
    with pytest.raises(ValueError, match="already in the log"):
        again.result(timeout=30)
    memory.flush()
    assert [e.id for e in memory.events()] == [message.id]


def test_a_refused_batch_appends_nothing_and_later_ones_go_on(memory: Memory) -> None:
    ok = memory.publish_many([Message(speaker="a", content="one")])
    bad = memory.publish_many(
        [Message(speaker="a", content="two"), Deletion(targets=(uuid4(),), reason="r")]
    )
    later = memory.publish_many([Message(speaker="a", content="three")])
    with pytest.raises(ValueError, match="unknown id"):
        bad.result(timeout=30)
    assert [e.seq for e in ok.result(timeout=30) + later.result(timeout=30)] == [0, 1]
    assert [e.content for e in memory.events()] == ["one", "three"]  # type: ignore[union-attr]


def test_publish_many_refuses_a_non_event_at_once(memory: Memory) -> None:
    with pytest.raises(ValueError, match="expected an event"):
        memory.publish_many([Message(speaker="a", content="x"), "not an event"])  # type: ignore[list-item]
    memory.flush()
    assert len(memory) == 0


@pytest.mark.kafka
def test_synchronous_appends_between_asynchronous_ones_keep_order(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    # A Kafka log's property only: the embedded log's group commit runs beside synchronous
    # appends, not before them.
    memory = Memory(f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}")
    try:
        _keep_order(memory)
    finally:
        memory.close()


def _keep_order(memory: Memory) -> None:
    futures = [memory.publish_async(Message(speaker="a", content=f"a{i}")) for i in range(100)]
    stored = memory.add_message(Message(speaker="s", content="sync"))
    assert stored.seq == 100  # own earlier appends are ahead of it on the one partition
    assert [f.result(timeout=30).seq for f in futures] == list(range(100))
