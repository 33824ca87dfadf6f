"""The lifecycle topic (``LOG.lifecycle``): what its records carry, and reading it back.

The projector publishes each lifecycle event as one record whose headers name:

- ``memstream.topic_id``: the id of the log topic it was derived from. A log topic deleted
  and created again under the same name gets a new id: its lifecycle stream starts again at
  offset 0 on the same lifecycle topic, whose records of the old id are kept (memstream
  never deletes what it published) and ignored by every reader;
- ``memstream.offset``: the event's lifecycle offset, its position in the log's derived
  lifecycle stream (0, 1, 2, ...: the offsets `fold_lifecycle` gives on the embedded log).
  The projector publishes in Kafka transactions, whose commit markers take topic offsets,
  so topic offsets are not dense: subscribers (`Memory.lifecycle(from_offset)`, SSE
  ``Last-Event-ID``) count in lifecycle offsets, never in topic offsets;
- ``memstream.seq`` and ``memstream.index``: the log record that caused it, and its
  index among that record's events.

Anyone who can write the topic can write anything to it, so every field read back is
checked: a record without these headers, with malformed ones, of another topic id, or not
decodable is not the projector's and is skipped with a warning, never trusted and never a
crash. Readers use ``isolation.level=read_committed``: records of a transaction that was
aborted (a projector fenced by its successor) are never seen.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Message as KafkaMessage

from producers.logs.base import LifecycleRecord, StopFlag
from producers.logs.kafka_client import (
    INDEX_HEADER,
    SEQ_HEADER,
    KafkaHeaders,
    KafkaLogError,
    consume_ready,
    consumer_conf,
    watermarks,
)
from producers.logs.location import KafkaLocation
from producers.logs.topic_identity import admin_for, topic_id
from schemas.codec import decode_record
from schemas.records import GraphEnvelope

__all__ = [
    "TOPIC_ID_HEADER",
    "OFFSET_HEADER",
    "MAX_LIFECYCLE_BYTES",
    "LifecycleEntry",
    "lifecycle_headers",
    "parse_lifecycle",
    "reader_conf",
    "locate",
    "follow_lifecycle",
    "LifecycleTail",
]

log = logging.getLogger("memstream.producers.lifecycle")

TOPIC_ID_HEADER = "memstream.topic_id"
OFFSET_HEADER = "memstream.offset"
# A lifecycle record holds one event (a document's text at most): bounded when read back.
MAX_LIFECYCLE_BYTES = 16 << 20
_MAX_HEADERS = 16
_MAX_DIGITS = 18  # an offset, seq or index below 10**18
_TIMEOUT_S = 30.0
# A search for a lifecycle offset probes the topic this many times at most, and scans
# linearly once its window is this small.
_MAX_PROBES = 40
_SCAN = 2000
# The topic id of the log is asked again at most this often while a reader meets records
# of another id (was the log topic created again?).
_RECHECK_S = 5.0

# Why a record is not the projector's own (`parse_lifecycle`).
OTHER_TOPIC = "it names another log topic id (of a deleted log, or forged)"


class LifecycleEntry(NamedTuple):
    """A lifecycle record whose headers checked out (its value is not decoded yet)."""

    topic_offset: int  # where it lies on the lifecycle topic
    offset: int  # its lifecycle offset
    seq: int
    event_index: int  # its index among the events of record `seq`
    value: bytes


def lifecycle_headers(tid: bytes, seq: int, index: int, offset: int) -> KafkaHeaders:
    """The headers of the lifecycle record of event `offset` (caused by seq, index)."""
    return [
        (TOPIC_ID_HEADER, tid),
        (OFFSET_HEADER, str(offset).encode()),
        (SEQ_HEADER, str(seq).encode()),
        (INDEX_HEADER, str(index).encode()),
    ]


def _int(raw: bytes | None) -> int | None:
    if raw is None or not 0 < len(raw) <= _MAX_DIGITS or not raw.isdigit():
        return None
    return int(raw)


def parse_lifecycle(message: KafkaMessage, tid: bytes) -> LifecycleEntry | str:
    """The record as a `LifecycleEntry` of the log whose topic id is `tid`, or why it is
    not one (`OTHER_TOPIC` when it names another topic id)."""
    value = message.value()
    if not isinstance(value, bytes):
        return "it has no value"
    if len(value) > MAX_LIFECYCLE_BYTES:
        return f"its value is {len(value)} bytes, more than {MAX_LIFECYCLE_BYTES}"
    # A consumed message's headers are a list of (name, bytes or None); the stubs also
    # allow the dict a producer may be given.
    headers = cast(list[tuple[str, bytes | None]] | None, message.headers())
    if not headers:
        return "it has no headers"
    if len(headers) > _MAX_HEADERS:
        return f"it has {len(headers)} headers"
    found: dict[str, bytes | None] = {}
    for name, raw in headers:
        if name in (TOPIC_ID_HEADER, OFFSET_HEADER, SEQ_HEADER, INDEX_HEADER):
            if name in found:
                return f"header {name} appears twice"
            found[name] = raw
    if TOPIC_ID_HEADER not in found:
        return f"header {TOPIC_ID_HEADER} is missing"
    if found[TOPIC_ID_HEADER] != tid:
        return OTHER_TOPIC
    offset = _int(found.get(OFFSET_HEADER))
    seq = _int(found.get(SEQ_HEADER))
    index = _int(found.get(INDEX_HEADER))
    if offset is None or seq is None or index is None:
        return f"headers {OFFSET_HEADER}, {SEQ_HEADER} and {INDEX_HEADER} must be decimal numbers"
    return LifecycleEntry(cast(int, message.offset()), offset, seq, index, value)


class _Complaints:
    """Warnings about records that are not the projector's, rate-limited: a topic full of
    garbage must not flood the log."""

    def __init__(self, logger: logging.Logger, topic: str) -> None:
        self.logger = logger
        self.topic = topic
        self.count = 0

    def __call__(self, topic_offset: int, why: str) -> None:
        self.count += 1
        if self.count <= 5 or str(self.count).rstrip("0") == "1":  # then 10, 100, ...
            self.logger.warning(
                "%s: the record at offset %d is not the projector's (%s); ignored "
                "(%d such records so far)",
                self.topic,
                topic_offset,
                why,
                self.count,
            )


def reader_conf(bootstrap: str, **extra: object) -> dict[str, object]:
    """A consumer of the lifecycle topic: committed transactions only; it tells when it
    reached the end (a partition-EOF event)."""
    return consumer_conf(
        bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True, **extra}
    )


def _probe(
    consumer: Consumer, topic: str, tid: bytes, at: int, below: int
) -> tuple[int, int] | None:
    """(topic offset, lifecycle offset) of the first record at or after `at` (and before
    `below`) whose lifecycle offset it tells: a record of another topic id counts as
    lifecycle offset -1 (older logs' records precede the current one's). None: none found."""
    consumer.assign([TopicPartition(topic, 0, at)])
    deadline = time.monotonic() + 5.0
    seen = 0
    while time.monotonic() < deadline and seen < 500:
        # The first to come, not a batch: consume(100, t) would wait out t unless 100
        # records follow `at` (most probes near the topic's end).
        for message in consume_ready(consumer, 100, 0.2):
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    return None  # nothing readable from `at` on
                continue
            topic_offset = cast(int, message.offset())  # consumed, not an error: it has one
            if topic_offset >= below:
                return None
            seen += 1
            entry = parse_lifecycle(message, tid)
            if isinstance(entry, LifecycleEntry):
                return topic_offset, entry.offset
            if entry == OTHER_TOPIC:
                return topic_offset, -1
    return None


def locate(consumer: Consumer, topic: str, tid: bytes, from_offset: int) -> int:
    """A topic offset to read from so as to meet the event of lifecycle offset `from_offset`
    and every later one.

    Each earlier event takes a topic offset before it, so `from_offset` itself is a safe
    start; commit markers, other logs' and aborted records push the event further, so the
    start moves forward by bisection over what the records say of themselves. A forged
    record can mislead the bisection; `follow_lifecycle` notices (the first event read is
    past `from_offset`) and scans again from the safe start."""
    try:
        low, high = watermarks(consumer, topic, _TIMEOUT_S)
    except KafkaException as exc:
        raise KafkaLogError(f"topic {topic}: no watermark: {exc.args[0]}") from None
    lo, hi = max(low, from_offset), high
    probes = 0
    while from_offset and hi - lo > _SCAN and probes < _MAX_PROBES:
        mid = (lo + hi) // 2
        found = _probe(consumer, topic, tid, mid, hi)
        probes += 1
        if found is not None and found[1] < from_offset:
            lo = found[0] + 1
        else:
            hi = mid
    log.debug(
        "%s: lifecycle offset %d from topic offset %d (%d probes)", topic, from_offset, lo, probes
    )
    return lo


def follow_lifecycle(
    location: KafkaLocation,
    from_offset: int = 0,
    *,
    timeout: float | None = None,
    stop: StopFlag | None = None,
) -> Iterator[LifecycleRecord]:
    """The log's lifecycle stream from lifecycle offset `from_offset`, then new events.

    Each event once, in order, each lifecycle offset at most once (a record repeating an
    offset already given is skipped); records that are not the projector's are skipped with
    a warning. Ends when nothing new arrived for `timeout` seconds (None: never) or `stop`
    is set; raises `KafkaLogError` when the log's topic was deleted and created again (the
    stream of the old log is over)."""
    bootstrap = location.bootstrap
    topic = location.lifecycle_topic
    admin = admin_for(bootstrap)
    tid_text = topic_id(admin, location.topic)
    tid = tid_text.encode()
    complain = _Complaints(log, topic)
    consumer = Consumer(reader_conf(bootstrap))
    try:
        start = locate(consumer, topic, tid, from_offset)
        consumer.assign([TopicPartition(topic, 0, start)])
        searched = start > from_offset  # the search may have overshot (forged records)
        expected = from_offset
        idle_since = time.monotonic()
        checked = 0.0
        while stop is None or not stop.is_set():
            messages = consume_ready(consumer, 500, 0.05)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaLogError(f"topic {topic}: {error}")
                topic_offset = cast(int, message.offset())  # consumed, not an error
                entry = parse_lifecycle(message, tid)
                if isinstance(entry, str):
                    if entry == OTHER_TOPIC and time.monotonic() - checked > _RECHECK_S:
                        checked = time.monotonic()
                        now = topic_id(admin, location.topic)
                        if now != tid_text:
                            raise KafkaLogError(
                                f"log {location.topic} was deleted and created again (topic "
                                f"id {tid_text}, now {now}): its lifecycle stream is over; "
                                "subscribe again for the new log's"
                            )
                    complain(topic_offset, entry)
                    continue
                if entry.offset < expected:
                    continue  # an offset already given (a duplicate, or forged)
                if entry.offset > expected:
                    if searched:
                        # The search was misled: scan again from the safe start.
                        log.warning(
                            "%s: lifecycle offset %d not found where expected; "
                            "scanning from topic offset %d",
                            topic,
                            expected,
                            from_offset,
                        )
                        searched = False
                        consumer.assign([TopicPartition(topic, 0, from_offset)])
                        break
                    complain(topic_offset, f"lifecycle offset {entry.offset} skips {expected}")
                    continue
                searched = False
                try:
                    envelope = decode_record(entry.value)
                except Exception as exc:  # untrusted bytes: any failure is a refusal
                    complain(topic_offset, f"undecodable: {type(exc).__name__}: {exc}")
                    continue
                if not isinstance(envelope, GraphEnvelope):
                    complain(topic_offset, "not an envelope")
                    continue
                expected += 1
                yield LifecycleRecord(entry.offset, entry.seq, envelope)
            if any(message.error() is None for message in messages):  # not only an EOF
                idle_since = time.monotonic()
            elif timeout is not None and time.monotonic() - idle_since >= timeout:
                return
    finally:
        consumer.close()


class LifecycleTail:
    """The projector's dedup: the lifecycle records already on the topic between the point
    its snapshot names and the topic's end when it started, read lazily as its fold reaches
    them and compared with the events the fold gives.

    An event is already published only if a committed record of this log's topic id carries
    its lifecycle offset, seq and index, and exactly the bytes the fold gives for it. Since
    the fold is deterministic, a projector refolding from an older snapshot reproduces the
    events its predecessors published; anything else on the topic (forged, malformed, of
    another log) is never trusted: at worst an event is published again, and readers skip
    a lifecycle offset they already gave.
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        tid: bytes,
        start: int,
        end: int,
        log_end: int,
        *,
        stall_s: float = _TIMEOUT_S,
    ) -> None:
        self.topic = topic
        self.tid = tid
        self.end = end
        self.log_end = log_end
        self.stall_s = stall_s
        # Every record not consumed yet lies at or after this topic offset.
        self.position = min(start, end)
        self.matched = 0
        self._buffer: deque[LifecycleEntry] = deque()
        self._complain = _Complaints(logging.getLogger("memstream.projector.lifecycle"), topic)
        self._consumer: Consumer | None = None
        self.done = start >= end
        if not self.done:
            self._consumer = Consumer(reader_conf(bootstrap))
            self._consumer.assign([TopicPartition(topic, 0, start)])

    def _finish(self) -> None:
        self.done = True
        if not self._buffer:
            self.position = max(self.position, self.end)
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    @property
    def exhausted(self) -> bool:
        """Every record of the tail was read and compared (none is left to match)."""
        return self.done and not self._buffer

    def close(self) -> None:
        self._buffer.clear()
        self._finish()

    def _fill(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        deadline = time.monotonic() + self.stall_s
        while not self._buffer and not self.done:
            # Not a batch consume: it waits out its timeout unless 1,000 records come, and
            # a tail of commit markers only (a new log's) ends in a partition EOF, which
            # then cost the tenure's first event half a second of lag.
            messages = consume_ready(consumer, 1000, 0.5)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self._finish()
                        return
                    raise KafkaLogError(f"topic {self.topic}: {error}")
                topic_offset = cast(int, message.offset())  # consumed, not an error
                if topic_offset >= self.end:
                    self._finish()
                    return
                entry = parse_lifecycle(message, self.tid)
                if isinstance(entry, str):
                    self._complain(topic_offset, entry)
                elif entry.seq >= self.log_end:
                    self._complain(
                        topic_offset,
                        f"it names seq {entry.seq}, beyond the log's end ({self.log_end})",
                    )
                else:
                    self._buffer.append(entry)
            if not messages and time.monotonic() > deadline:
                # An open transaction of someone else's holds the readable end back.
                logging.getLogger("memstream.projector.lifecycle").warning(
                    "%s: the lifecycle topic gave nothing for %.0f s below offset %d; "
                    "publishing from here",
                    self.topic,
                    self.stall_s,
                    self.end,
                )
                self._finish()

    def published(self, offset: int, seq: int, index: int, value: bytes) -> bool:
        """Whether the event of lifecycle offset `offset` (seq, index; `value` its bytes)
        is on the topic already. Called with each event in order."""
        while True:
            if not self._buffer:
                if self.done:
                    return False
                self._fill()
                continue
            entry = self._buffer[0]
            if entry.offset > offset:
                return False  # not published (the record ahead waits for its own event)
            self._buffer.popleft()
            self.position = entry.topic_offset + 1
            if entry.offset < offset:
                continue  # an event matched before (a duplicate, or forged)
            if entry.seq == seq and entry.event_index == index and entry.value == value:
                self.matched += 1
                return True
            self._complain(
                entry.topic_offset,
                f"lifecycle offset {offset} with other content than the log's event",
            )
