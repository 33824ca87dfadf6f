"""The distributed log: one Kafka topic with one partition; a record's offset is its seq.

Producers are idempotent with ``acks=all`` and not transactional (invariant 8): a retry
never duplicates or reorders a record, and offsets stay dense. The state is the same total
fold as everywhere (`projector.log_state.fold_record`), hydrated from the projector's Redis
snapshot when there is one, then following the topic.

Two ways in:

- `transact(build)`: catch up to the partition's end (the high watermark), run `build` on
  that state, check, produce, flush, take the offsets from the delivery reports, then fold
  up to them, so the outcome returned is exactly what the log says (a record another agent
  made invalid in between is refused by the fold, and its error raised here).
- `append(records)` / `submit(records, then)`: the path of audit appends. Their checks are
  monotonic (a target, once in the log, stays in it), so they are checked against the state
  folded so far plus this process's own appends acknowledged and not folded yet; only when
  that check fails is the log read up to its end and the check repeated, so a target
  another agent appended before the call is found. A record that names one of this
  process's appends still in flight waits for its acknowledgement first, so nothing is
  checked against a record that may yet fail. The stored event is known from the delivery
  report; the fold happens when the state is next read. Envelopes always go through
  `transact`.

`submit` is pipelined: it produces and returns a future at once, and the broker's
acknowledgements resolve the futures (a background thread serves the delivery reports), so
many batches are in flight together and librdkafka packs them into few requests. A future
resolves only after ``acks=all`` (invariant 14).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar
from uuid import UUID

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import (
    Message as KafkaMessage,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from producers.logs.base import Appended, LifecycleRecord, StopFlag, Transaction, prepare
from producers.logs.location import KafkaLocation
from projector.log_state import (
    Lifecycle,
    LogState,
    apply_record,
    check_records,
    empty_state,
    fold_record,
)
from schemas.audit import BaseEvent
from schemas.codec import KIND_HEADER, KINDS, encode_record, record_kind
from schemas.errors import LogNotFoundError, MemstreamError
from schemas.records import Record

__all__ = [
    "KafkaLog",
    "KafkaLogError",
    "TopicConfigError",
    "ensure_topic",
    "client_conf",
    "producer_conf",
    "consumer_conf",
    "consume_ready",
    "SEQ_HEADER",
    "INDEX_HEADER",
]

log = logging.getLogger("memstream.producers.kafka")
_client_log = logging.getLogger("memstream.kafka.client")
T = TypeVar("T")
R = TypeVar("R")

# Lifecycle records name the log record that caused them, and their index among its events.
SEQ_HEADER = "memstream.seq"
INDEX_HEADER = "memstream.index"
TOPIC_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}
_TIMEOUT_S = 30.0


class KafkaLogError(MemstreamError):
    """The Kafka log could not do what was asked (delivery failed, broker unreachable)."""


class TopicConfigError(KafkaLogError):
    """A log topic that is not one partition, or is compacted."""


def client_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "logger": _client_log, "log_level": 3}


def producer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        **client_conf(bootstrap),
        "enable.idempotence": True,
        "acks": "all",
        # A few ms of linger packs pipelined appends into few, large requests (less CPU on
        # both ends); synchronous appends flush, which sends at once regardless.
        "linger.ms": 5,
        "max.in.flight.requests.per.connection": 5,
        # lz4 is cheap to compress, and the broker then writes and replicates fewer bytes.
        "compression.type": "lz4",
        **extra,
    }


def consumer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        **client_conf(bootstrap),
        # Partitions are assigned by hand and offsets never committed: the position is the
        # state's own seq (invariant 10). librdkafka still wants a group id.
        "group.id": f"memstream-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 20,
        "enable.partition.eof": False,
        **extra,
    }


def consume_ready(consumer: Consumer, max_messages: int, timeout: float) -> list[KafkaMessage]:
    """The messages ready now, at once; when none are, the first to come within `timeout`
    (with any that came beside it).

    librdkafka's batch `consume(n, timeout)` waits out its whole timeout unless n messages
    arrive, which adds up to `timeout` to every record's latency on a trickling topic;
    `poll` returns on the first message.
    """
    messages = consumer.consume(max_messages, 0)
    if messages or timeout <= 0:
        return messages
    first = consumer.poll(timeout)
    if first is None:
        return []
    return [first, *consumer.consume(max_messages - 1, 0)] if max_messages > 1 else [first]


def ensure_topic(
    admin: AdminClient, topic: str, replication_factor: int, *, create: bool = True
) -> None:
    """Create the topic (one partition, never compacted, unlimited retention) or check it.

    `create=False` (readers): a topic that does not exist raises `LogNotFoundError`."""
    if create:
        futures = admin.create_topics(
            [
                NewTopic(
                    topic, num_partitions=1, replication_factor=replication_factor,
                    config=TOPIC_CONFIG,
                )
            ],  # fmt: skip
            request_timeout=_TIMEOUT_S,
        )
        try:
            futures[topic].result(timeout=_TIMEOUT_S)
            log.info("created topic %s (1 partition, rf=%d)", topic, replication_factor)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaLogError(f"topic {topic}: cannot create it: {exc.args[0]}") from None
    # A topic just created may take a moment to show in the metadata.
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            metadata = admin.list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        except KafkaException as exc:
            raise KafkaLogError(f"topic {topic}: no metadata: {exc.args[0]}") from None
        if metadata is not None and metadata.error is None and metadata.partitions:
            break
        if not create and (
            metadata is None
            or (metadata.error is not None
                and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART)
        ):  # fmt: skip
            raise LogNotFoundError(
                f"log {topic}: no such topic on the broker; only writers create logs "
                "(check the location's LOG name)"
            )
        if time.monotonic() > deadline:
            raise KafkaLogError(f"topic {topic}: no metadata ({metadata and metadata.error})")
        time.sleep(0.05)
    if len(metadata.partitions) != 1:
        raise TopicConfigError(
            f"topic {topic} has {len(metadata.partitions)} partitions; a memstream log is "
            "one partition, so that offsets are a total order (seq)"
        )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=_TIMEOUT_S)[resource].result(
        timeout=_TIMEOUT_S
    )
    policy = configs["cleanup.policy"].value if "cleanup.policy" in configs else "delete"
    if "compact" in (policy or ""):
        raise TopicConfigError(
            f"topic {topic} has cleanup.policy={policy}; a memstream log is never compacted"
        )


# The kind header's bytes, made once.
_KIND_BYTES = {kind: kind.encode() for kind in KINDS}


class _Delivery:
    """The delivery reports of one produced batch, and what to do once all are in.

    Reports are served by whichever thread polls the producer (the background poller or
    a thread waiting in flush), so the count is kept under the log's `_dr_lock`.
    """

    __slots__ = ("log", "records", "offsets", "stored", "errors", "remaining", "future",
                 "then", "track", "finished", "error", "appended")  # fmt: skip

    def __init__(
        self,
        owner: KafkaLog,
        records: list[Record],
        future: Future[Any] | None,
        then: Callable[[list[Appended]], Any] | None,
        *,
        track: bool,
    ) -> None:
        self.log = owner
        self.records = records
        self.offsets: list[int | None] = [None] * len(records)
        self.stored: list[Record | None] = [None] * len(records)
        self.errors: list[str] = []
        self.remaining = len(records)
        self.future = future
        self.then = then
        # Own audit appends tracked as in flight / pending (not transact's records).
        self.track = track
        self.finished = False
        self.error: BaseException | None = None
        self.appended: list[Appended] = []

    def report(self, index: int, err: KafkaError | None, msg: KafkaMessage) -> None:
        with self.log._dr_lock:
            if err is not None:
                self.errors.append(str(err))
            else:
                self.offsets[index] = msg.offset()
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self._finish()

    def _finish(self) -> None:
        if self.track:
            self.log._delivered(self)
        if self.errors:
            self.error = KafkaLogError(f"append to {self.log.topic} failed: {self.errors[0]}")
        elif self.track:
            self.appended = [
                Appended(seq, stored, [Lifecycle(seq, "audit", f"{stored.kind}.appended", stored)])  # type: ignore[union-attr,arg-type]
                for seq, stored in zip(self.offsets, self.stored, strict=True)
            ]
        self.finished = True
        future = self.future
        if future is None:
            return
        if self.error is not None:
            future.set_exception(self.error)
            return
        try:
            value = self.then(self.appended) if self.then is not None else self.appended
        except Exception as exc:
            future.set_exception(exc)
            return
        future.set_result(value)


class KafkaLog:
    """A log on a Kafka topic, folded into a `LogState` (hydrated from Redis if it can)."""

    def __init__(
        self, location: KafkaLocation, *, hydrate: bool = True, create: bool = True
    ) -> None:
        self.loc = location
        self.location = str(location)
        self.topic = location.topic
        self._tp = TopicPartition(self.topic, 0)
        admin = AdminClient(client_conf(location.bootstrap))
        ensure_topic(admin, self.topic, location.replication_factor, create=create)
        if create:  # a reader finds the lifecycle topic once a writer or projector made it
            ensure_topic(admin, location.lifecycle_topic, location.replication_factor)
        self._lock = threading.RLock()
        self._producer = Producer(producer_conf(location.bootstrap))
        self._consumer = Consumer(consumer_conf(location.bootstrap))
        self._state = self._hydrate() if hydrate else empty_state()
        self._consumer.assign([TopicPartition(self.topic, 0, self._state.next_seq)])
        # Own audit appends acknowledged but not folded yet (checked against, see `append`),
        # and those produced but not acknowledged yet; both guarded by `_dr_lock`.
        self._pending: dict[UUID, BaseEvent] = {}
        self._inflight: dict[UUID, Record] = {}
        self._outstanding = 0  # pipelined batches not fully acknowledged
        self._dr_lock = threading.Lock()
        self._poller: threading.Thread | None = None
        self._closed = False

    def _hydrate(self) -> LogState:
        from producers.logs.topic_identity import LogIdentity, admin_for, topic_id
        from projector.snapshot import SnapshotStore

        try:
            store = SnapshotStore.connect(self.loc)
            # Only a snapshot of this topic (its id now), within the partition's end (asked
            # after the snapshot's position was read), is this log's.
            tid = topic_id(admin_for(self.loc.bootstrap), self.topic)
            store.identify = lambda: LogIdentity(tid, self.end_offset())
            loaded = store.load()
        except Exception as exc:  # a cache: without it, the log is folded from seq 0
            log.warning("%s: no snapshot from Redis (%s); folding the log", self.topic, exc)
            return empty_state()
        return loaded if loaded is not None else empty_state()

    # --- reading --------------------------------------------------------------------------

    def end_offset(self) -> int:
        """The partition's high watermark: the seq the next record will get."""
        try:
            _, high = self._consumer.get_watermark_offsets(self._tp, _TIMEOUT_S, cached=False)
        except KafkaException as exc:
            raise KafkaLogError(f"topic {self.topic}: no watermark: {exc.args[0]}") from None
        return int(high)

    def state(self, min_seq: int | None = None) -> LogState:
        with self._lock:
            last = self._state.last_seq
            if min_seq is not None and last is not None and last >= min_seq:
                return self._state
            self._fold_until(self.end_offset())
            return self._state

    # --- writing --------------------------------------------------------------------------

    def _produce(self, records: Sequence[Record], encoded: Sequence[bytes]) -> list[int]:
        """Produce and wait for every acknowledgement (the path of `transact`)."""
        delivery = _Delivery(self, list(records), None, None, track=False)
        self._send(delivery, encoded)
        self._await(delivery)
        if delivery.errors:
            raise KafkaLogError(f"append to {self.topic} failed: {delivery.errors[0]}")
        return delivery.offsets  # type: ignore[return-value]

    def _send(self, delivery: _Delivery, encoded: Sequence[bytes]) -> None:
        produce = self._producer.produce
        topic = self.topic
        for i, (record, data) in enumerate(zip(delivery.records, encoded, strict=True)):
            headers = [(KIND_HEADER, _KIND_BYTES[record_kind(record)])]
            while True:
                try:
                    produce(topic, data, partition=0, headers=headers,
                            on_delivery=partial(delivery.report, i))  # fmt: skip
                    break
                except BufferError:  # local queue full: let deliveries drain
                    self._producer.poll(0.05)

    def _await(self, delivery: _Delivery) -> None:
        """Wait in this thread for a delivery, flushing so the batch is sent at once."""
        deadline = time.monotonic() + _TIMEOUT_S
        while not delivery.finished:
            # flush() ignores linger.ms and serves delivery reports here; short, since
            # other threads' appends may keep the queue from ever emptying.
            self._producer.flush(0.01)
            if time.monotonic() > deadline and not delivery.finished:
                raise KafkaLogError(f"append to {self.topic}: not acknowledged in time")

    def _wait_inflight(self) -> None:
        """Until every pipelined append of this process is acknowledged or failed."""
        deadline = time.monotonic() + _TIMEOUT_S
        while self._outstanding:
            self._producer.flush(0.05)
            if time.monotonic() > deadline and self._outstanding:
                raise KafkaLogError(f"append to {self.topic}: not acknowledged in time")

    def _delivered(self, delivery: _Delivery) -> None:
        """Every report of a batch is in: own appends move from in flight to pending."""
        last = -1 if self._state.last_seq is None else self._state.last_seq
        with self._dr_lock:
            inflight, pending = self._inflight, self._pending
            for i, record in enumerate(delivery.records):
                if delivery.track:
                    inflight.pop(record.id, None)  # type: ignore[union-attr]
                seq = delivery.offsets[i]
                if seq is not None and delivery.track:
                    stored = record.with_seq(seq)  # type: ignore[union-attr]
                    delivery.stored[i] = stored
                    if seq > last:
                        pending[stored.id] = stored  # type: ignore[index]
            if delivery.track:
                self._outstanding -= 1

    def transact(self, build: Transaction[T]) -> tuple[list[Appended], T]:
        with self._lock:
            # Own pipelined appends first, so the state read below includes them.
            self._wait_inflight()
            self._fold_until(self.end_offset())
            records, encoded, value = prepare(self._state, build)
            return self._publish_and_fold(records, encoded), value

    def _publish_and_fold(self, records: list[Record], encoded: list[bytes]) -> list[Appended]:
        if not records:
            return []
        offsets = self._produce(records, encoded)
        watch = dict(zip(offsets, records, strict=True))
        lifecycle: dict[int, list[Lifecycle]] = {}
        # Fold up to our last record, keeping our records' lifecycle events.
        errors = self._fold_until(max(offsets) + 1, watch, lifecycle)
        for seq in offsets:
            if seq in errors:
                raise errors[seq]
        appended = []
        for seq, record in zip(offsets, records, strict=True):
            events = lifecycle.get(seq, [])
            stored = events[0].subject if isinstance(record, BaseEvent) and events else record
            appended.append(Appended(seq, stored, events))
        return appended

    def _fold_until(
        self,
        end: int,
        watch: dict[int, Record] | None = None,
        lifecycle: dict[int, list[Lifecycle]] | None = None,
    ) -> dict[int, BaseException]:
        """Consume and fold until the state reflects every seq before `end`.

        For the seqs in `watch` (own records), their lifecycle events are kept in
        `lifecycle`, and a refusal is recomputed with the strict fold and returned, so the
        caller raises the seed's own error.
        """
        watch = watch or {}
        lifecycle = {} if lifecycle is None else lifecycle
        errors: dict[int, BaseException] = {}
        state = self._state
        deadline = time.monotonic() + _TIMEOUT_S * 4
        try:
            while state.next_seq < end:
                messages = consume_ready(self._consumer, 5000, 0.2)
                if not messages and time.monotonic() > deadline:
                    raise KafkaLogError(
                        f"topic {self.topic}: stuck at seq {state.next_seq}, expected {end}"
                    )
                for message in messages:
                    if message.error() is not None:
                        raise KafkaLogError(f"topic {self.topic}: {message.error()}")
                    seq = message.offset()
                    if seq < state.next_seq:
                        continue
                    before = state
                    state, events = fold_record(state, seq, message.value())
                    if seq not in watch:
                        continue
                    lifecycle[seq] = events
                    if len(state.rejections) > len(before.rejections):
                        try:
                            apply_record(before, seq, watch[seq])
                            errors[seq] = KafkaLogError(f"seq {seq}: refused by the fold")
                        except Exception as exc:
                            errors[seq] = exc
        finally:
            self._state = state
            self._prune_pending()
        return errors

    def _prune_pending(self) -> None:
        if self._pending:
            last = -1 if self._state.last_seq is None else self._state.last_seq
            with self._dr_lock:
                self._pending = {k: e for k, e in self._pending.items() if e.seq > last}  # type: ignore[operator]

    def _check(self, records: list[Record]) -> None:
        """Raise what the fold would refuse (see the module's docstring). Under `_lock`."""
        inflight = self._inflight
        if not inflight or not any(r.id in inflight for r in records):  # type: ignore[union-attr]
            try:
                check_records(self._state, records, self._pending)
                return
            except Exception:
                pass
        # A duplicate or a target among own appends in flight, or one another agent wrote:
        # wait for own acknowledgements, then read to the log's end, checking after each.
        if self._outstanding:
            self._wait_inflight()
            try:
                check_records(self._state, records, self._pending)
                return
            except Exception:
                pass
        self._fold_until(self.end_offset())
        check_records(self._state, records, self._pending)

    def submit(
        self, records: Sequence[Record], then: Callable[[list[Appended]], R]
    ) -> Future[R]:
        """Check and produce audit events without waiting; a future of `then(appended)`.

        The future resolves once every record is acknowledged (``acks=all``), or with the
        error that refused the batch (nothing produced) or failed a delivery.
        """
        records = list(records)
        future: Future[R] = Future()
        if not all(isinstance(r, BaseEvent) for r in records):
            future.set_exception(TypeError("submit takes audit events; envelopes transact"))
            return future
        if not records:
            future.set_result(then([]))
            return future
        try:
            self._enqueue(records, future, then)
        except Exception as exc:
            future.set_exception(exc)
            return future
        self._start_poller()
        return future

    def _enqueue(
        self, records: list[Record], future: Future[Any] | None, then: Callable[..., Any] | None
    ) -> _Delivery:
        with self._lock:
            if self._closed:
                raise KafkaLogError(f"{self.topic}: the log is closed")
            self._check(records)
            encoded = [encode_record(r) for r in records]
            delivery = _Delivery(self, records, future, then, track=True)
            with self._dr_lock:
                for record in records:
                    self._inflight[record.id] = record  # type: ignore[union-attr,index]
                self._outstanding += 1
            self._send(delivery, encoded)
            return delivery

    def append(self, records: Sequence[Record]) -> list[Appended]:
        records = list(records)
        if not all(isinstance(r, BaseEvent) for r in records):
            return self.transact(lambda state: (records, None))[0]
        if not records:
            return []
        delivery = self._enqueue(records, None, None)
        self._await(delivery)
        if delivery.error is not None:
            raise delivery.error
        return delivery.appended

    def drain(self) -> None:
        """Wait until every pipelined append of this process is acknowledged or failed."""
        self._wait_inflight()

    def _start_poller(self) -> None:
        if self._poller is not None:
            return
        with self._dr_lock:
            if self._poller is not None:
                return
            self._poller = threading.Thread(
                target=self._poll_loop, name=f"memstream-kafka-dr-{self.topic}", daemon=True
            )
            self._poller.start()

    def _poll_loop(self) -> None:
        # Serves delivery reports, which resolve `submit`'s futures; poll() returns as soon
        # as a report is ready, so the timeout only bounds how late a close is noticed.
        while not self._closed:
            try:
                self._producer.poll(0.1)
            except Exception:  # a callback raised: logged, the loop keeps serving
                log.exception("%s: delivery report handling failed", self.topic)

    # --- following ------------------------------------------------------------------------

    def _follow(
        self,
        topic: str,
        from_offset: int,
        timeout: float | None,
        stop: StopFlag | None,
    ) -> Iterator[KafkaMessage]:
        consumer = Consumer(consumer_conf(self.loc.bootstrap))
        consumer.assign([TopicPartition(topic, 0, from_offset)])
        try:
            idle_since = time.monotonic()
            while stop is None or not stop.is_set():
                messages = consume_ready(consumer, 500, 0.05)
                for message in messages:
                    if message.error() is not None:
                        raise KafkaLogError(f"topic {topic}: {message.error()}")
                    yield message
                if messages:
                    idle_since = time.monotonic()
                elif timeout is not None and time.monotonic() - idle_since >= timeout:
                    return
        finally:
            consumer.close()

    def records(
        self, from_seq: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[tuple[int, bytes]]:
        for message in self._follow(self.topic, from_seq, timeout, stop):
            yield message.offset(), message.value()

    def lifecycle(
        self, from_offset: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[LifecycleRecord]:
        from producers.logs.lifecycle_topic import follow_lifecycle

        # Lifecycle offsets (not topic offsets), checked records of this topic id only.
        yield from follow_lifecycle(self.loc, from_offset, timeout=timeout, stop=stop)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._producer.flush(_TIMEOUT_S)
            self._closed = True
            self._consumer.close()
        # Outside the lock: a future's callback on the poller thread may still want it.
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join()
