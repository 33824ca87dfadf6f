"""A snapshot cut counts lifecycle events as published only once they are readable
(`projector.settlement`): the verdict on the numbers of the run that lost two events, and
the settler asking the real broker's last stable offset."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from producers.logs.kafka_client import producer_conf
from projector.service import _Acks, _EndTenure, _Settler
from projector.settlement import OwnRecords, Verdict


@dataclass
class _Delivered:
    topic_name: str
    at: int

    def topic(self) -> str:
        return self.topic_name

    def offset(self) -> int:
        return self.at


def test_the_lost_commit_of_log_045_is_not_settled() -> None:
    """Log 045: the tenure's sweep at 223 (aborted, marker 224), its events for seqs 211 and
    212 at 225 and 226, committed, and no marker: the last stable offset stayed at 225."""
    acks = _Acks("log.lifecycle")
    for offset in (223, 225, 226):
        acks.report(None, _Delivered("log.lifecycle", offset))
    acks.report(None, _Delivered("log.memex", 225))  # another topic's offsets never count
    end = acks.last_offset + 1
    assert acks.own.verdict(225, end) is Verdict.OURS_OPEN
    assert len(acks.own) == 2  # the sweep's record, below the stable offset, forgotten
    assert acks.own.verdict(227, end) is Verdict.SETTLED  # had the marker landed
    assert len(acks.own) == 0


def test_another_producers_open_record_is_told_apart() -> None:
    own = OwnRecords()
    for offset in (11, 12, 14):
        own.add(offset)
    assert own.verdict(10, 15) is Verdict.OTHERS_OPEN  # 10 is not ours
    assert own.verdict(13, 15) is Verdict.OTHERS_OPEN  # 13 neither (ours at 11, 12 passed)
    assert own.verdict(14, 15) is Verdict.OURS_OPEN
    assert own.verdict(15, 15) is Verdict.SETTLED
    assert own.verdict(3, 0) is Verdict.SETTLED  # nothing to settle


@pytest.mark.kafka
def test_the_settler_waits_for_its_own_open_records_and_not_for_others(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic = f"{unique_name}.lifecycle"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)

    def producer(acks: _Acks) -> Producer:
        conf = producer_conf(
            kafka_bootstrap, **{"transactional.id": uuid.uuid4().hex, "on_delivery": acks.report}
        )
        made = Producer(conf)
        made.init_transactions(30)
        return made

    ours, theirs = _Acks(topic), _Acks(topic)
    mine, other = producer(ours), producer(theirs)
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
    kafka_bootstrap: str, unique_name: str
) -> None:
    import time

    from producers.logs.topic_identity import TopicIdentityError, partition_end

    topic = f"{unique_name}.lifecycle"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    acks = _Acks(topic)
    open_one = Producer(
        producer_conf(
            kafka_bootstrap, **{"transactional.id": uuid.uuid4().hex, "on_delivery": acks.report}
        )
    )
    open_one.init_transactions(30)
    open_one.begin_transaction()
    for _ in range(2):
        open_one.produce(topic, b"open", partition=0)
    open_one.flush(30)
    assert partition_end(admin, topic) == 2
    assert partition_end(admin, topic, stable=True) == 0
    open_one.commit_transaction(30)
    assert partition_end(admin, topic, stable=True) == 3  # past the commit marker
    # The client says "no leaders found" for a topic that does not exist, as it does for a
    # moment while a partition has no leader: only the second is asked again.
    started = time.monotonic()
    with pytest.raises(TopicIdentityError, match="no such topic"):
        partition_end(admin, f"{unique_name}-missing", timeout=20.0)
    assert time.monotonic() - started < 10.0
