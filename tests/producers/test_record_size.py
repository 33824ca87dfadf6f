"""Issue 11, item 7: one limit on a record's encoded size, checked before anything is
appended, the same on both logs; a refused batch appends nothing and wedges nothing."""

from __future__ import annotations

import random
import string
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from producers.logs.kafka_client import TopicConfigError
from producers.memex_store import MemexStore
from producers.memory import Memory
from schemas.audit import Message
from schemas.codec import encode_record
from schemas.errors import RecordTooLargeError
from schemas.limits import MAX_RECORD_BYTES


def _sized_message(size: int, seed: int = 0) -> Message:
    """A message whose encoded record is exactly `size` bytes, of incompressible content
    (so Kafka's lz4 cannot make an oversized record fit)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    base = Message(speaker="ana", content="a", session_id="s1")
    content = "".join(rng.choices(alphabet, k=size - len(encode_record(base)) + 1))
    message = base.model_copy(update={"content": content})
    # The content's length prefix is a varint: trim until the whole record fits exactly.
    while len(encode_record(message)) > size:
        content = content[:-1]
        message = base.model_copy(update={"content": content})
    assert len(encode_record(message)) == size
    return message


def test_a_record_at_the_limit_is_appended_and_one_byte_more_is_refused(
    memory_location: str,
) -> None:
    with Memory(memory_location) as memory:
        at_limit = _sized_message(MAX_RECORD_BYTES)
        stored = memory.add_message(at_limit)
        assert stored.seq == 0 and stored.content == at_limit.content
        over = _sized_message(MAX_RECORD_BYTES + 1, seed=1)
        with pytest.raises(RecordTooLargeError) as refused:
            memory.add_message(over)
        text = str(refused.value)
        assert f"message {over.id}" in text
        assert f"{MAX_RECORD_BYTES + 1:,} bytes" in text and f"{MAX_RECORD_BYTES:,} bytes" in text
        assert len(memory) == 1
    with Memory(memory_location, create=False) as reader:  # what the log holds, read anew
        assert [m.id for m in reader.replay().visible_messages] == [at_limit.id]


def test_a_batch_with_an_oversized_record_last_appends_nothing(memory_location: str) -> None:
    with Memory(memory_location) as memory:
        memory.add_message(Message(speaker="ana", content="before", session_id="s1"))
        small = [Message(speaker="ana", content=f"m{i}", session_id="s1") for i in range(3)]
        big = Message(speaker="ana", content="x" * (2 * 1024 * 1024), session_id="s1")
        with pytest.raises(RecordTooLargeError, match=str(big.id)):
            memory.append_many([*small, big])
        # The pipelined path refuses it the same way, through its future.
        future = memory.publish_async(big)
        with pytest.raises(RecordTooLargeError, match=str(big.id)):
            future.result(timeout=10)
        # Nothing wedged: the next append is prompt.
        started = time.monotonic()
        after = memory.add_message(Message(speaker="ana", content="after", session_id="s1"))
        assert time.monotonic() - started < 5
        assert after.seq == 1
    with Memory(memory_location, create=False) as reader:
        contents = [m.content for m in reader.replay().visible_messages]
    assert contents == ["before", "after"]


def test_an_encrypted_log_checks_the_size_of_what_it_stores(memory_location: str) -> None:
    """Sealing grows content by a third (base64, nonce, tag, key id): a message whose plain
    record fits but whose sealed record does not is refused, in a batch, appending nothing;
    the limit is checked on the bytes stored, which the plain record never is."""
    fits_plain = _sized_message(MAX_RECORD_BYTES - 10_000)
    assert len(encode_record(fits_plain)) <= MAX_RECORD_BYTES
    with Memory(memory_location, encrypt=True) as memory:
        memory.add_message(Message(speaker="ana", content="before", session_id="s1"))
        with pytest.raises(RecordTooLargeError, match=str(fits_plain.id)):
            memory.append_many(
                [Message(speaker="ana", content="small", session_id="s1"), fits_plain]
            )
        after = memory.add_message(Message(speaker="ana", content="after", session_id="s1"))
        assert after.seq == 1
    with Memory(memory_location, create=False) as reader:
        contents = [m.content for m in reader.replay().visible_messages]
    assert contents == ["before", "after"]


def test_an_oversized_graph_item_is_refused_on_both_logs(memory_location: str) -> None:
    with MemexStore.open(memory_location) as store:
        with pytest.raises(RecordTooLargeError, match="envelope"):
            store.create(
                scope="user:ana",
                kind="observation",
                content={"blob": "y" * MAX_RECORD_BYTES},
                author="agent:x",
                source_kind="observed",
                authority=0.5,
            )
        item = store.create(
            scope="user:ana",
            kind="observation",
            content={"v": 1},
            author="agent:x",
            source_kind="observed",
            authority=0.5,
        )
        assert store.item(item.id) is not None


@pytest.mark.kafka
def test_kafka_takes_several_records_at_the_limit_in_one_batch(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    batch = [_sized_message(MAX_RECORD_BYTES, seed=10 + i) for i in range(3)]
    with Memory(location) as memory:
        stored = memory.append_many(batch)
        assert [m.seq for m in stored] == [0, 1, 2]
    with Memory(location, create=False) as reader:
        assert [m.id for m in reader.replay().visible_messages] == [m.id for m in batch]


@pytest.mark.kafka
def test_a_writer_refuses_a_topic_that_cannot_take_a_record_at_the_limit(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    """A topic made by hand with a smaller max.message.bytes would refuse records the
    embedded log takes: a writer refuses it at once, naming the setting."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    topic = NewTopic(
        unique_name, num_partitions=1, replication_factor=1, config={"max.message.bytes": "100000"}
    )
    admin.create_topics([topic])[unique_name].result(10)
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with pytest.raises(
        TopicConfigError, match=rf"topic {unique_name} has max.message.bytes=100000"
    ):
        Memory(location)
    with Memory(location, create=False) as reader:  # a reader needs no such size
        assert len(reader) == 0
