"""The projection service: follow a Kafka log, fold it, snapshot to Redis, publish lifecycle.

It folds with the same `fold_record` as every reader, so its state is the log's. It:

- resumes from the snapshot in Redis (state and position written together, invariant 10),
  or rebuilds from seq 0 when there is none, or when the snapshot it was writing vanished
  (Redis flushed) or was replaced;
- writes a snapshot chunk every `every_records` records or `every_ms` milliseconds, after
  the lifecycle events of those records are acknowledged by Kafka;
- publishes each record's lifecycle events exactly once to ``LOG.lifecycle`` (invariant
  11): every lifecycle record carries the seq of its cause and its index among that
  record's events in headers; on start the projector reads the topic's last record and
  skips every (seq, index) up to it. Since the fold is deterministic, refolding from an
  older snapshot reproduces exactly the events already published, and only those are
  skipped;
- holds a lease in Redis so that one projector runs per log.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from producers.logs.kafka import (
    INDEX_HEADER,
    SEQ_HEADER,
    KafkaLogError,
    consume_ready,
    consumer_conf,
    ensure_topic,
    producer_conf,
)
from producers.logs.location import KafkaLocation, parse_kafka_location
from projector.audit.state import no_gc
from projector.log_state import LogState, empty_state, encode_lifecycle, fold_record
from projector.memex_publisher import MemexPublisher
from projector.snapshot import Entry, SnapshotLost, SnapshotStore, entry_of
from schemas.codec import KIND_HEADER

__all__ = ["Projector", "ProjectorStats", "last_published"]

log = logging.getLogger("memstream.projector")

# (position, end) while catching up; called at most a few times a second.
Progress = Callable[[int, int], None]


def _compact(location: KafkaLocation, epoch: str) -> None:
    """The compactor child: merge runs of small snapshot chunks of `epoch`."""
    SnapshotStore.connect(location).compact(epoch)


@dataclass
class ProjectorStats:
    folded: int = 0
    published: int = 0
    skipped: int = 0
    snapshots: int = 0
    rebuilds: int = 0


class _Acks:
    """Counts the lifecycle producer's delivery reports (served by the loop's poll), so a
    snapshot can wait for its records' lifecycle events without flushing the producer."""

    def __init__(self) -> None:
        self.acked = 0
        self.error: KafkaError | None = None

    def report(self, err: KafkaError | None, msg: object) -> None:
        if err is not None:
            self.error = self.error or err
        else:
            self.acked += 1


# The kind header of every lifecycle record, and index headers, made once.
_ENVELOPE_KIND = (KIND_HEADER, b"envelope")
_INDEX_HEADERS = [(INDEX_HEADER, str(i).encode()) for i in range(64)]
# A snapshot cut waits this long at most for its lifecycle acknowledgements.
_ACK_WAIT_S = 30.0


class _SnapshotWriter:
    """Writes the loop's snapshot cuts, in order, on a thread of its own: each once the
    lifecycle events of its records are acknowledged (counted by `_Acks`; the loop's poll
    serves the reports). Redis round trips and chunk encoding then never stall the loop,
    where any stall is lag for every record behind it.

    A lost snapshot (Redis flushed, position moved) is reported through `lost` (the
    generation of the cut that found it); the loop then refolds from seq 0 under the next
    generation, and cuts left from the lost one are dropped.
    """

    def __init__(self, projector: Projector, acks: _Acks) -> None:
        self._projector = projector
        self._acks = acks
        self._cuts: deque[tuple[int, int, LogState, int, list[Entry]]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self.lost = -1
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="snapshot-writer", daemon=True)
        self._thread.start()

    def pending(self) -> int:
        return len(self._cuts)

    def put(
        self, generation: int, produced: int, state: LogState, first: int, entries: list[Entry]
    ) -> None:
        with self._cond:
            self._cuts.append((generation, produced, state, first, entries))
            self._cond.notify()

    def close(self, timeout: float = 60.0) -> None:
        """Write what is queued (its acknowledgements must come), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._cuts and not self._closing:
                    self._cond.wait()
                if not self._cuts:
                    return
                generation, produced, state, first, entries = self._cuts[0]
            if generation <= self.lost:
                self._cuts.popleft()
                continue
            deadline = time.monotonic() + _ACK_WAIT_S
            # Only the loop serves delivery reports; look at the count now and then.
            while self._acks.acked < produced and self._acks.error is None:
                if time.monotonic() > deadline:
                    self.error = KafkaLogError(
                        f"{self._projector.loc.lifecycle_topic}: lifecycle events not "
                        f"acknowledged in {_ACK_WAIT_S:.0f} s"
                    )
                    return
                time.sleep(0.002)
            if self._acks.error is not None:
                return  # the loop raises it
            try:
                self._projector._snapshot(None, state, first, entries)
            except _Rebuild:
                self.lost = generation
            except Exception as exc:
                self.error = exc
                return
            self._cuts.popleft()


# Audit events from which a hydrated state is frozen for the collector.
_FREEZE_AT = 100_000


class _Rebuild(Exception):
    """The snapshot is gone: fold again from seq 0 under a new epoch."""


def last_published(location: KafkaLocation, timeout: float = 10.0) -> tuple[int, int]:
    """(seq, index) of the last lifecycle record on the topic; (-1, -1) when it is empty."""
    consumer = Consumer(consumer_conf(location.bootstrap))
    try:
        tp = TopicPartition(location.lifecycle_topic, 0)
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        if high <= low:
            return (-1, -1)
        consumer.assign([TopicPartition(location.lifecycle_topic, 0, high - 1)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                raise KafkaLogError(f"{location.lifecycle_topic}: {message.error()}")
            headers = dict(message.headers() or [])
            return (int(headers[SEQ_HEADER]), int(headers[INDEX_HEADER]))
        raise KafkaLogError(f"{location.lifecycle_topic}: cannot read its last record")
    finally:
        consumer.close()


class Projector:
    def __init__(
        self,
        location: KafkaLocation | str,
        *,
        every_records: int = 20_000,
        every_ms: int = 100,
        linger_ms: int = 2,
        lease_ms: int = 3_000,
        progress: Progress | None = None,
    ) -> None:
        self.loc = (
            location if isinstance(location, KafkaLocation) else parse_kafka_location(location)
        )
        self.every_records = every_records
        self.every_ms = every_ms
        self.linger_ms = linger_ms
        self.lease_ms = lease_ms
        self.progress = progress
        self.owner = uuid.uuid4().hex
        self.stats = ProjectorStats()
        self.state: LogState = empty_state()
        self._published: tuple[int, int] = (-1, -1)
        admin = AdminClient({"bootstrap.servers": self.loc.bootstrap})
        # The projector reads the log (only writers create logs) and writes its lifecycle.
        ensure_topic(admin, self.loc.topic, self.loc.replication_factor, create=False)
        ensure_topic(admin, self.loc.lifecycle_topic, self.loc.replication_factor)
        self.memex = MemexPublisher(self.loc, admin)  # the derived topic LOG.memex
        self.store = SnapshotStore.connect(self.loc)
        self.compact_every_s = 1.0
        self.compact_at_chunks = 48
        self._compactor: tuple[threading.Event, threading.Thread] | None = None

    # --- pieces -------------------------------------------------------------------------------

    def _take_lease(self, stop: threading.Event | None) -> None:
        waited = False
        while not self.store.acquire(self.owner, self.lease_ms):
            if not waited:
                log.info("%s: another projector holds the lease; waiting", self.loc.topic)
                waited = True
            if stop is not None and stop.wait(0.2):
                return
            time.sleep(0.2)

    def _start_state(self) -> LogState:
        with no_gc(1 << 30):
            loaded = self.store.load()
            if loaded is not None and len(loaded.memory) >= _FREEZE_AT:
                # A large hydrated state lives as long as the projector: out of the
                # collector's sight, no later full collection walks its millions of
                # objects again (~1 s each at 1M events, lag for every record behind it).
                gc.freeze()
        self._start_compactor()
        if loaded is None:
            self.store.start_epoch()
            log.info("%s: no snapshot; folding the log from seq 0", self.loc.topic)
            return empty_state()
        self.store.adopt()
        log.info("%s: resumed from the snapshot at seq %s", self.loc.topic, loaded.last_seq)
        return loaded

    def _start_compactor(self) -> None:
        """Merge small snapshot chunks in the background, so that they stay few."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(self.compact_every_s):
                position = self.store.position
                # Merging holds the GIL for its pickles (a pause for the fold loop): only
                # once chunks have piled up, so a live projector merges rarely, in bursts.
                if position is None or len(position.chunks) < self.compact_at_chunks:
                    continue
                # In a child process: unpickling and pickling chunks would otherwise hold
                # this process's GIL for up to a second, a pause in the fold loop.
                child = multiprocessing.get_context("spawn").Process(
                    target=_compact, args=(self.loc, position.epoch), daemon=True
                )
                child.start()
                while child.is_alive() and not done.wait(0.05):
                    pass
                if child.is_alive():  # stopping: a merge is one MULTI/EXEC, atomic if cut
                    child.terminate()
                child.join()
                if child.exitcode not in (0, -signal.SIGTERM):
                    # a cache: the next round (or the next run) merges
                    log.warning("%s: merging snapshot chunks failed (exit code %s)",
                                self.loc.topic, child.exitcode)  # fmt: skip

        thread = threading.Thread(target=loop, name="snapshot-compactor", daemon=True)
        thread.start()
        self._compactor = (done, thread)

    def _stop_compactor(self) -> None:
        if self._compactor is not None:
            done, thread = self._compactor
            done.set()
            # Not waited for: a merge is one MULTI/EXEC, atomic however it ends, and the
            # thread stops after it (a daemon: process exit may cut it short, harmlessly).
            thread.join(0.05)
            self._compactor = None

    # --- the loop -----------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        until_caught_up: bool = False,
        max_seconds: float | None = None,
    ) -> LogState:
        """Follow the log until `stop` is set (or, with `until_caught_up`, until the state
        reaches the end of the log as it was when the projector started)."""
        self._take_lease(stop)
        started = time.monotonic()
        consumer = Consumer(consumer_conf(self.loc.bootstrap))
        acks = _Acks()
        # Lifecycle events are latency-bound (subscribers wait on them): a short linger.
        producer = Producer(producer_conf(self.loc.bootstrap, **{"linger.ms": self.linger_ms,
                                                                 "on_delivery": acks.report}))
        produced = 0  # lifecycle events produced, against which `acks` are counted
        generation = 0  # bumped on each rebuild from seq 0
        writer: _SnapshotWriter | None = None
        tp = TopicPartition(self.loc.topic, 0)
        try:
            state = self._start_state()
            self._published = last_published(self.loc)
            self.memex.load_position()
            consumer.assign([TopicPartition(self.loc.topic, 0, state.next_seq)])
            end = consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1]
            buffer: list[Entry] = []
            first = state.next_seq
            last_write = time.monotonic()
            last_progress = 0.0
            lifecycle_topic = self.loc.lifecycle_topic
            writer = _SnapshotWriter(self, acks)
            while stop is None or not stop.is_set():
                if until_caught_up and state.next_seq >= end:
                    break  # what is buffered is written on the way out
                if max_seconds is not None and time.monotonic() - started > max_seconds:
                    break
                # At once what is ready, else the first record to come: a batch consume
                # would wait out its timeout. Short, so a cut snapshot is written promptly.
                messages = consume_ready(consumer, 1000, 0.01)
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise KafkaLogError(f"{self.loc.topic}: {error}")
                    seq = message.offset()
                    if seq < state.next_seq:
                        continue
                    data = message.value()
                    before = state
                    state, events = fold_record(state, seq, data)
                    produced += self.memex.publish(producer, before, state, seq, data, events)
                    self.stats.folded += 1
                    buffer.append(entry_of(seq, data, events))
                    for index, event in enumerate(events):
                        if (seq, index) <= self._published:
                            self.stats.skipped += 1
                            continue
                        lifecycle = encode_lifecycle(event, index)
                        headers = [
                            _ENVELOPE_KIND,
                            (SEQ_HEADER, str(seq).encode()),
                            _INDEX_HEADERS[index]
                            if index < 64
                            else (INDEX_HEADER, str(index).encode()),
                        ]
                        while True:
                            try:
                                producer.produce(lifecycle_topic, lifecycle, partition=0,
                                                 headers=headers)  # fmt: skip
                                break
                            except BufferError:
                                producer.poll(0.05)
                        produced += 1
                        self.stats.published += 1
                        self._published = (seq, index)
                # Every round, busy or idle: delivery reports are served only here, and the
                # writer's last cut waits for them even when no record follows.
                producer.poll(0)
                now = time.monotonic()
                if acks.error is not None:
                    raise KafkaLogError(f"{lifecycle_topic}: delivery failed: {acks.error}")
                if writer.error is not None:
                    raise writer.error
                if writer.lost == generation:
                    consumer.close()
                    consumer = Consumer(consumer_conf(self.loc.bootstrap))
                    consumer.assign([TopicPartition(self.loc.topic, 0, 0)])
                    state, first, buffer = empty_state(), 0, []
                    generation += 1
                # A writer still busy with the last cut: the buffer grows into a bigger one.
                if buffer and writer.pending() == 0 and (
                    len(buffer) >= self.every_records or (now - last_write) * 1000 >= self.every_ms
                ):
                    writer.put(generation, produced, state, first, buffer)
                    first, buffer, last_write = state.next_seq, [], now
                    # What survived until now is the state: out of the cyclic collector's
                    # sight, else a full collection walks all of it (tens of ms on a small
                    # log, seconds on a large one), stalling every record behind it.
                    # Refcounting still frees it; only cyclic garbage made before this
                    # point would stay (the fold makes none on purpose).
                    gc.freeze()
                if self.progress is not None and now - last_progress > 0.25:
                    last_progress = now
                    if state.next_seq >= end:
                        # The high watermark the fetches brought: no broker round trip on
                        # the loop while following (-1001: none known yet).
                        cached = consumer.get_watermark_offsets(tp, cached=True)[1]
                        end = max(end, cached)
                    self.progress(state.next_seq, max(end, state.next_seq))
            if buffer:
                writer.put(generation, produced, state, first, buffer)
            producer.flush(30)  # serves the reports the queued cuts wait for
            writer.close()
            writer, closed = None, writer
            if closed.error is not None:
                raise closed.error
            if acks.error is not None:
                raise KafkaLogError(f"{lifecycle_topic}: delivery failed: {acks.error}")
            if closed.lost == generation:
                log.warning("%s: stopping with the snapshot lost; the next run rebuilds",
                            self.loc.topic)  # fmt: skip
            self.state = state
            return state
        finally:
            gc.unfreeze()  # the frozen state is garbage now, as far as this run goes
            self._stop_compactor()
            producer.flush(30)
            if writer is not None:  # leaving on an error: write what is acknowledged
                writer.close(5.0)
            consumer.close()
            try:
                self.store.release(self.owner)
            except Exception:  # Redis gone: the lease expires by itself
                log.debug("lease release failed", exc_info=True)

    def _snapshot(
        self, producer: Producer | None, state: LogState, first: int, buffer: list[Entry]
    ) -> int:
        """Make the buffered records' lifecycle durable, then write their chunk."""
        # No producer: the caller saw these records' lifecycle events acknowledged.
        remaining = producer.flush(30) if producer is not None else 0
        if remaining:
            raise KafkaLogError(f"{self.loc.lifecycle_topic}: {remaining} events unacknowledged")
        try:
            if not self.store.acquire(self.owner, self.lease_ms):
                raise KafkaLogError(f"{self.loc.topic}: lost the projector lease")
            self.store.write(first, buffer, state)
            self.stats.snapshots += 1
            return state.next_seq
        except SnapshotLost as exc:
            # Redis was flushed (or another writer moved the position): rebuild from the
            # log under a new epoch. Lifecycle events already published are skipped.
            log.warning("%s: snapshot lost (%s); rebuilding from the log", self.loc.topic, exc)
            self.stats.rebuilds += 1
            self.store.start_epoch()
            raise _Rebuild from exc
