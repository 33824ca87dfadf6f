"""A watermark question asked of a client whose cached metadata lacks the partition
(`producers.logs.kafka_client.watermarks`).

A node restarting may answer a metadata request before it knows every topic; a consumer
that never fetches (a log's watermark consumer) then kept "Local: Unknown partition" for
minutes, and queryd answered 503 all that time (the three-node failover test, 6 December).
That answer cannot be brought about on demand on a real broker, so these tests put a
stand-in for the consumer's two calls in its place: they check the retry rule only.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from producers.logs.kafka_client import watermarks


class _StaleThenFresh:
    """Answers "Unknown partition" until its metadata was refreshed `refreshes` times."""

    def __init__(self, refreshes: int) -> None:
        self.needed = refreshes
        self.refreshed = 0
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        if self.refreshed < self.needed:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        return 0, 42

    def list_topics(self, topic: str, timeout: float) -> None:
        self.refreshed += 1


def test_an_unknown_partition_is_asked_again_after_a_metadata_refresh() -> None:
    consumer = _StaleThenFresh(refreshes=2)
    assert watermarks(consumer, "log", timeout=10.0) == (0, 42)  # type: ignore[arg-type]
    assert consumer.refreshed == 2 and consumer.asked == 3


def test_a_partition_still_unknown_after_refreshes_fails_soon() -> None:
    consumer = _StaleThenFresh(refreshes=1_000)
    with pytest.raises(KafkaException) as info:
        watermarks(consumer, "log", timeout=60.0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    assert consumer.asked == 4  # the first answer and three more, not a minute of them


class _FailingOver:
    """Raises `code` for the first `failures` questions, then answers."""

    def __init__(self, code: int, failures: int) -> None:
        self.code, self.failures = code, failures
        self.asked = 0

    def get_watermark_offsets(self, tp: Any, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(KafkaError(self.code))
        return 0, 7

    def list_topics(self, topic: str, timeout: float) -> None:
        pass


_MOVING = [KafkaError._DESTROY_BROKER, KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT]


@pytest.mark.parametrize("code", _MOVING)
def test_a_connection_lost_in_a_failover_is_asked_again(code: int) -> None:
    """A question that went to a connection the client let go or lost (a node killed) is
    asked again, of a live node, within the question's time."""
    consumer = _FailingOver(code, failures=2)
    assert watermarks(consumer, "log", timeout=10.0) == (0, 7)  # type: ignore[arg-type]
    assert consumer.asked == 3


@pytest.mark.parametrize("code", _MOVING)
def test_a_cluster_still_unreachable_at_the_deadline_fails_with_that_error(code: int) -> None:
    consumer = _FailingOver(code, failures=1_000)
    with pytest.raises(KafkaException) as info:
        watermarks(consumer, "log", timeout=1.0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == code
    assert consumer.asked > 1


def test_a_client_that_is_closing_is_not_asked_again() -> None:
    consumer = _FailingOver(KafkaError._DESTROY, failures=1_000)
    with pytest.raises(KafkaException) as info:
        watermarks(consumer, "log", timeout=10.0)  # type: ignore[arg-type]
    assert info.value.args[0].code() == KafkaError._DESTROY
    assert consumer.asked == 1
