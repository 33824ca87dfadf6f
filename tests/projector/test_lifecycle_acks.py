"""The lifecycle position a snapshot records comes from the lifecycle topic's own offsets,
and the records the projector delivered there tell its own open records from others'
(`projector.settlement`)."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import KafkaError

from projector.service import _Acks
from projector.settlement import OwnRecords, Verdict


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


def test_own_records_are_kept_as_one_run_a_transaction() -> None:
    own = OwnRecords()
    for txn in range(3):  # 1,000 records a transaction, then its commit marker's offset
        for offset in range(txn * 1001, txn * 1001 + 1000):
            own.add(offset)
    assert len(own) == 3000 and len(own._runs) == 3
    assert own.verdict(1500, 3003) is Verdict.OURS_OPEN  # inside the second transaction
    assert len(own) == 2000 - 499 and len(own._runs) == 2
    assert own.verdict(1000, 3003) is Verdict.OTHERS_OPEN  # a marker's offset: not its own
    assert own.verdict(3003, 3003) is Verdict.SETTLED and len(own) == 0
