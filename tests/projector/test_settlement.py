"""A snapshot cut counts lifecycle events as published only once they are readable
(`projector.settlement`; the verdict itself in `test_lifecycle_acks`): the settler asking
the real broker's last stable offset."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from producers.logs.kafka_client import producer_conf
from projector.service import _Acks, _EndTenure, _Settler


@pytest.fixture
def lifecycle(kafka_bootstrap: str, unique_name: str) -> tuple[AdminClient, str]:
    """An admin client, and a lifecycle-like topic of the test's own."""
    topic = f"{unique_name}.lifecycle"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    return admin, topic


def _transactional(bootstrap: str, acks: _Acks) -> Producer:
    """A transactional producer of its own id, initialised, reporting to `acks`."""
    conf = {"transactional.id": uuid.uuid4().hex, "on_delivery": acks.report}
    made = Producer(producer_conf(bootstrap, **conf))
    made.init_transactions(30)
    return made


@pytest.mark.kafka
def test_the_settler_waits_for_its_own_open_records_and_not_for_others(
    kafka_bootstrap: str, lifecycle: tuple[AdminClient, str]
) -> None:
    admin, topic = lifecycle

    ours, theirs = _Acks(topic), _Acks(topic)
    mine, other = _transactional(kafka_bootstrap, ours), _transactional(kafka_bootstrap, theirs)
    settler = _Settler(admin, topic, ours.own)
    mine.begin_transaction()
    for _ in range(3):
        mine.produce(topic, b"event", partition=0)
    mine.flush(30)
    end = ours.last_offset + 1
    # Its own records, open (a commit whose markers have not landed looks the same).
    refused = settler.settle(end, wait_s=1.0)
    assert isinstance(refused, _EndTenure)
    assert f"record at offset {end - 3} is still open: the commit's markers" in str(refused)
    mine.commit_transaction(30)
    assert settler.settle(end, wait_s=10.0) is None
    # Another producer's transaction, left open, holds the stable offset back: not waited for.
    other.begin_transaction()
    other.produce(topic, b"left open", partition=0)
    other.flush(30)
    mine.begin_transaction()
    mine.produce(topic, b"event", partition=0)
    mine.commit_transaction(30)
    assert ours.last_offset > theirs.last_offset
    assert settler.settle(ours.last_offset + 1, wait_s=1.0) is None
    other.abort_transaction(30)


@pytest.mark.kafka
def test_the_stable_end_stops_at_an_open_transaction_and_a_missing_topic_fails_at_once(
    kafka_bootstrap: str, lifecycle: tuple[AdminClient, str]
) -> None:
    import time

    from producers.logs.topic_identity import TopicIdentityError, partition_end

    admin, topic = lifecycle
    open_one = _transactional(kafka_bootstrap, _Acks(topic))
    open_one.begin_transaction()
    for _ in range(2):
        open_one.produce(topic, b"open", partition=0)
    open_one.flush(30)
    assert partition_end(admin, topic) == 2
    assert partition_end(admin, topic, stable=True) == 0
    open_one.commit_transaction(30)
    # The marker is written after the commit returns: readable a moment later.
    deadline = time.monotonic() + 10.0
    while (stable := partition_end(admin, topic, stable=True)) == 0:
        assert time.monotonic() < deadline, "the commit's marker never landed"
        time.sleep(0.01)
    assert stable == 3  # past the commit marker
    # The client says "no leaders found" for a topic that does not exist, as it does for a
    # moment while a partition has no leader: only the second is asked again.
    started = time.monotonic()
    with pytest.raises(TopicIdentityError, match="no such topic"):
        partition_end(admin, f"{topic}-missing", timeout=20.0)
    assert time.monotonic() - started < 10.0
