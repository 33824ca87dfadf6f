"""Reading a Kafka topic whole, for tests that check what a log or its lifecycle topic holds."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, TopicPartition

from producers.logs.kafka_client import consumer_conf


def read_all(bootstrap: str, topic: str) -> list[tuple[int, bytes, dict[str, bytes]]]:
    """Every committed record of a one-partition topic up to its end: (offset, value,
    headers)."""
    consumer = Consumer(
        consumer_conf(
            bootstrap, **{"enable.partition.eof": True, "isolation.level": "read_committed"}
        )
    )
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20, cached=False)
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[int, bytes, dict[str, bytes]]] = []
    at_end = high == 0
    deadline = time.monotonic() + 60
    while not at_end and time.monotonic() < deadline:
        for message in consumer.consume(1000, timeout=0.5):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end = message.offset() >= high
                continue
            assert error is None, error
            out.append((message.offset(), message.value(), dict(message.headers() or [])))
    consumer.close()
    assert at_end, f"{topic}: did not reach offset {high}"
    return out
