"""Publishing the derived topic ``LOG.memex`` from the projector (see `projector.memex_topic`).

Each graph record the projector folds becomes the TypeScript envelopes
`memex_envelopes` makes; they are produced, as plain JSON text, to ``LOG.memex``, one
partition, in log order, each with the seq of its record and its index among that record's
envelopes in headers. Exactly once, as the lifecycle topic: on start the publisher reads
the topic's last record and skips every (seq, index) up to it; the fold is deterministic,
so a refold from an older snapshot reproduces exactly what was published.
"""

from __future__ import annotations

import json
import time
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from producers.logs.kafka import (
    INDEX_HEADER,
    SEQ_HEADER,
    KafkaLogError,
    consumer_conf,
    ensure_topic,
)
from producers.logs.location import KafkaLocation
from projector.log_state import Lifecycle, LogState
from projector.memex_topic import memex_envelopes, memex_topic
from schemas.codec import decode_record
from schemas.errors import DecodeError

__all__ = ["MemexPublisher", "last_on_topic"]

_GRAPH_NAMESPACES = frozenset({"memory", "intent", "task", "memstream"})
_JSON_KIND = (b"kind", b"memex-json")


def last_on_topic(bootstrap: str, topic: str, timeout: float = 10.0) -> tuple[int, int]:
    """(seq, index) headers of the last record on ``topic``; (-1, -1) when it is empty."""
    consumer = Consumer(consumer_conf(bootstrap))
    try:
        tp = TopicPartition(topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        if high <= low:
            return (-1, -1)
        consumer.assign([TopicPartition(topic, 0, high - 1)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaLogError(f"{topic}: {message.error()}")
            headers = dict(message.headers() or [])
            return (int(headers[SEQ_HEADER]), int(headers[INDEX_HEADER]))
        raise KafkaLogError(f"{topic}: cannot read its last record")
    finally:
        consumer.close()


class MemexPublisher:
    """Produces a log's decided graph commands to ``LOG.memex`` (on the projector's
    producer, so its delivery reports count with the lifecycle events')."""

    def __init__(self, location: KafkaLocation, admin: AdminClient) -> None:
        self.bootstrap = location.bootstrap
        self.topic = memex_topic(location.topic)
        ensure_topic(admin, self.topic, location.replication_factor)
        self.published: tuple[int, int] = (-1, -1)

    def load_position(self) -> None:
        """Read what the topic already holds (call before the first `publish`)."""
        self.published = last_on_topic(self.bootstrap, self.topic)

    def publish(
        self,
        producer: Producer,
        before: LogState,
        after: LogState,
        seq: int,
        data: bytes,
        events: list[Lifecycle],
    ) -> int:
        """Produce the envelopes of the record ``data`` at ``seq`` (folded from ``before``
        into ``after`` with ``events``) not published yet; returns how many."""
        if not events or events[0].namespace not in _GRAPH_NAMESPACES or seq < self.published[0]:
            return 0  # an audit event or a rejection (no graph event first), or done before
        try:
            record = decode_record(data)
        except DecodeError:
            return 0
        produced = 0
        for index, envelope in enumerate(memex_envelopes(before, after, seq, record, events)):
            if (seq, index) <= self.published:
                continue
            value = _json_bytes(envelope)
            headers = [_JSON_KIND, (SEQ_HEADER, str(seq).encode()),
                       (INDEX_HEADER, str(index).encode())]  # fmt: skip
            while True:
                try:
                    producer.produce(self.topic, value, partition=0, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
            produced += 1
            self.published = (seq, index)
        return produced


def _json_bytes(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()
