"""The lifecycle position a snapshot records comes from the lifecycle topic's own offsets."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError

from projector.service import _Acks


@dataclass
class _Delivered:
    topic_name: str
    at: int

    def topic(self) -> str:
        return self.topic_name

    def offset(self) -> int:
        return self.at


def test_offsets_of_the_derived_topic_never_move_the_lifecycle_position() -> None:
    acks = _Acks("log.lifecycle")
    acks.report(None, _Delivered("log.lifecycle", 3))
    # The same producer writes LOG.memex, whose offsets run ahead of the lifecycle topic's
    # when a graph record has more envelopes than lifecycle events.
    acks.report(None, _Delivered("log.memex", 40))
    assert acks.last_offset == 3
    acks.report(None, _Delivered("log.lifecycle", 5))
    acks.report(None, _Delivered("log.lifecycle", 4))  # reports of one partition: in order,
    assert acks.last_offset == 5  # but the position never goes back
    assert acks.error is None
    failure = KafkaError(KafkaError._MSG_TIMED_OUT)
    acks.report(failure, _Delivered("log.lifecycle", -1))
    acks.report(KafkaError(KafkaError._TIMED_OUT), _Delivered("log.memex", -1))
    assert acks.error == failure and acks.last_offset == 5
