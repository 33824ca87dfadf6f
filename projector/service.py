"""The projection service: follow a Kafka log, fold it, snapshot to Redis, publish lifecycle.

It folds with the same `fold_record` as every reader, so its state is the log's. It:

- holds a lease in Redis so that one projector runs per log: taken (or waited for) at the
  start, renewed on a timer by a thread of its own (busy or idle), with a compare-and-renew
  Lua script that also writes the projector's status record (`projector.status`);
- resumes from the snapshot in Redis (state and position written together: they are one)
  when it is a snapshot of this log (the log topic's id, within the partition's end), or
  rebuilds from seq 0 under a new epoch when there is none, when the snapshot it was
  writing vanished (Redis flushed) or was replaced, or when the log topic was deleted and
  created again;
- publishes each record's lifecycle events exactly once to ``LOG.lifecycle`` (invariant
  11), in Kafka transactions under one ``transactional.id`` per log: a projector taking the
  lease over initialises that id, which aborts its predecessor's open transaction and
  fences it, so a projector that lost its lease cannot publish (its producer fails); its
  first transaction is a sweep, aborted, which also ends a record of an earlier epoch
  that reached the broker too late for that abort (`Projector._sweep`). Each
  record carries the log's topic id, its lifecycle offset, and its cause's seq and index
  (`producers.logs.lifecycle_topic`). The dedup position comes from the snapshot: it names
  the lifecycle offset of the next event and a topic offset from which every later record
  lies, and the records found there (the predecessor's committed ones) are compared, bytes
  and all, with what the fold gives (`LifecycleTail`); nothing else on the topic is
  trusted;
- writes a snapshot chunk every `every_records` records or `every_ms` milliseconds, right
  after a commit of the lifecycle events of those records; the write is fenced by the
  lease (refused when another projector holds it);
- stops publishing when it could not renew its lease in time (Redis unreachable): it
  commits while the lease still holds, then waits, retrying with backoff, and carries on
  when Redis answers again (rebuilding if the snapshot was lost); a lease taken over by
  another projector sends it back to waiting for the lease. It never dies of a Redis
  outage.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from producers.keys.kafka_keys import keys_topic_exists
from producers.logs.kafka_client import (
    DERIVED_PRODUCER_MESSAGE_MAX_BYTES,
    DERIVED_TOPIC_MAX_MESSAGE_BYTES,
    KafkaHeaders,
    KafkaLogError,
    client_conf,
    consume_ready,
    ensure_topic,
    error_cause,
    follower_conf,
    kafka_exception,
    producer_conf,
    watermarks,
)
from producers.logs.kafka_evidence import CheckpointCutter
from producers.logs.lifecycle_topic import LifecycleTail, lifecycle_headers
from producers.logs.location import KafkaLocation, parse_kafka_location
from producers.logs.signing_key import KeySpec, resolve_signer
from producers.logs.topic_identity import LogIdentity, TopicIdentityError, partition_end, topic_id
from projector.audit.state import no_gc
from projector.authorship import preverify
from projector.commit_pacer import CommitPacer
from projector.compaction_worker import CompactionWorker, WorkerGone
from projector.lease import Lease
from projector.lifecycle import encode_lifecycle
from projector.memex_publisher import MemexPublisher
from projector.record_fold import LogState, empty_state, fold_record
from projector.settlement import OwnRecords, Verdict
from projector.snapshot_store import (
    Entry,
    LeaseLost,
    SnapshotLost,
    SnapshotStore,
    entry_of,
    redis_refused,
)
from projector.status import ProjectorStatus, encode_status, status_key
from schemas.codec import KIND_HEADER
from schemas.errors import LogNotFoundError, MemstreamError

__all__ = ["Projector", "ProjectorStats"]

log = logging.getLogger("memstream.projector")

# (position, end) while catching up; called at most a few times a second.
Progress = Callable[[int, int], None]


# One compaction worker process for every projector of a process, started on first use
# (`projector.compaction_worker`).
_COMPACTOR = CompactionWorker()


# Thread pools shared by every projector of a process, by name, made on first use.
_POOLS: dict[str, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def _process_pool(name: str, workers: int) -> ThreadPoolExecutor:
    with _POOLS_LOCK:
        pool = _POOLS.get(name)
        if pool is None:
            pool = _POOLS[name] = ThreadPoolExecutor(max(1, workers), thread_name_prefix=name)
        return pool


def _verify_pool() -> ThreadPoolExecutor:
    """Threads that check signed logs' signatures ahead of the fold
    (`MEMSTREAM_VERIFY_THREADS`, default 2)."""
    workers = int(os.environ.get("MEMSTREAM_VERIFY_THREADS", "2") or 2)
    return _process_pool("memstream-verify", workers)


def _check_pool() -> ThreadPoolExecutor:
    """Threads that ask the broker whether a log topic was created again, for every lease
    keeper: a keeper renews its lease on time even while a check waits on a slow broker
    (up to its 5 s timeout, longer than a lease)."""
    return _process_pool("memstream-topic-check", 2)


@dataclass
class ProjectorStats:
    folded: int = 0
    published: int = 0
    skipped: int = 0
    snapshots: int = 0
    # Lifecycle transactions committed (`projector.commit_pacer` bounds them in a group).
    commits: int = 0
    rebuilds: int = 0
    # Tenures ended early (lease lost, fenced, topic recreated, a transaction failed).
    restarts: int = 0
    # Signed checkpoints cut (issue 14), and why none is signed when the log was rewritten.
    checkpoints: int = 0
    # The most lifecycle events produced and not yet acknowledged seen by the loop
    # (`max_undelivered` bounds it) and how long the loop waited for deliveries in all.
    most_undelivered: int = 0
    backpressure_s: float = 0.0
    evidence_halted: str | None = None


class _Acks:
    """The lifecycle producer's delivery reports (served by the loop's poll and by commits):
    the first error, and the offset of the last record delivered to the lifecycle topic
    `topic`. The same producer writes the derived topic (LOG.memex), whose offsets are
    another topic's: a snapshot's lifecycle position taken from one of them could lie past
    lifecycle records not yet matched, and the next tenure would publish those again."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.error: KafkaError | None = None
        self.last_offset = -1
        self.own = OwnRecords()  # for telling this producer's open records from others'

    def report(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.error = self.error or err
        elif msg.topic() == self.topic:
            offset = msg.offset()
            self.last_offset = max(self.last_offset, offset)
            self.own.add(offset)


# The kind header of every lifecycle record, made once.
_ENVELOPE_KIND = (KIND_HEADER, b"envelope")
# The kind header of a tenure's sweep record (`Projector._sweep`), always aborted.
_SWEEP_KIND = (KIND_HEADER, b"sweep")
# Redis write retries back off up to this long.
_MAX_BACKOFF_S = 5.0
# Lifecycle events produced and not yet acknowledged, at most (about: a round of the loop
# may add one consumed batch's events past it). A commit first waits for all of them, and a
# transaction open longer than its timeout (12 s) fences its producer. Unbounded, a 1M-record
# catch-up ran ahead of the broker (slowed while the snapshot compactor took a core) until a
# commit waited 13-23 s: fenced, three times in one run, each time folding again from the
# last snapshot. At 10,000, no commit waited over 1.75 s, and the catch-up rate held.
MAX_UNDELIVERED = 10_000
# A snapshot cut waits this long at most for the commit of its lifecycle events.
_COMMIT_WAIT_S = 60.0
# ... and then this long at most for their commit markers (`projector.settlement`): past the
# broker pauses seen on a starved machine (14 s), short of the transaction timeout.
_SETTLE_WAIT_S = 30.0


class _EndTenure(Exception):
    """This projector's tenure is over (its lease lost or lapsed, its producer fenced, its
    log topic created again, a transaction failed): it takes the lease again and resumes
    from the snapshot."""


class _Committer:
    """The lifecycle producer's open transaction, committed by a thread of its own once it
    is `linger` seconds old.

    A commit is a few broker round trips. Timed here, it does not wait for the fold loop
    (an event is visible to subscribers once its transaction is committed, however long the
    loop's round), and the loop never waits for it: the loop produces under `lock` without
    blocking (`try_lock`) and, while a commit holds the lock, holds its events back and
    produces them into the next transaction (a transactional producer takes no record while
    committing). Transactions are numbered from 1: `committed` is the last committed, and
    `committed_seq` the last seq whose events it held, `committed_end` the lifecycle offset
    after the last record delivered when it committed (a commit serves the delivery reports
    of its records); `error` is the failure that ends the
    tenure (fenced by a successor, or the broker's). No commit is made once the lease may
    have lapsed (`lease_ok`): the tenure then ends and its transaction is aborted. With a
    `pacer`, a due commit also waits for its turn in the process's budget of transactions
    (`projector.commit_pacer`); `drain` (the run's end, a rebuild) does not.
    """

    def __init__(
        self,
        projector: Projector,
        producer: Producer,
        acks: _Acks,
        lease_ok: Callable[[], bool],
        pacer: CommitPacer | None = None,
    ) -> None:
        self._projector = projector
        self._producer = producer
        self._acks = acks
        self._lease_ok = lease_ok
        self._pacer = pacer
        self.lock = threading.Lock()  # held to produce into, or commit, the transaction
        self._cond = threading.Condition()
        self.linger = 0.001
        self.txn = 0  # the last transaction begun
        self.open = False  # whether `txn` is open
        self.begun = 0.0
        self.open_seq: int | None = None  # the last seq with events in the open one
        self.committed = 0
        self.committed_seq: int | None = None
        self.committed_end = 0
        self.error: _EndTenure | None = None
        self._closing = False
        self._thread = threading.Thread(target=self._run, name="lifecycle-commit", daemon=True)
        self._thread.start()

    # --- under `lock` (the loop) ----------------------------------------------------------

    def begin(self) -> None:
        try:
            self._producer.begin_transaction()
        except KafkaException as exc:
            raise self._projector._transaction_failed("a transaction", exc) from None
        with self._cond:
            self.txn += 1
            self.open, self.begun = True, time.monotonic()
            self._cond.notify_all()

    def commit(self) -> None:
        """Commit the open transaction now (raises the tenure's end if it fails)."""
        try:
            self._producer.commit_transaction(30)
        except (KafkaException, SystemError) as exc:
            cause = kafka_exception(exc, self._producer)
            if cause is None:
                raise
            failure = self._projector._transaction_failed("committing lifecycle events", cause)
            with self._cond:
                self.error = self.error or failure
                self._cond.notify_all()
            raise failure from None
        self._projector.stats.commits += 1
        with self._cond:
            self.open = False
            self.committed, self.committed_seq = self.txn, self.open_seq
            self.committed_end = self._acks.last_offset + 1
            self._cond.notify_all()

    # --- anywhere -------------------------------------------------------------------------

    def wait(self, txn: int, timeout: float) -> bool:
        """Until `txn` is committed (True), a commit failed, or `timeout` passed."""
        with self._cond:
            return (
                self._cond.wait_for(
                    lambda: self.committed >= txn or self.error is not None or self._closing,
                    timeout,
                )
                and self.committed >= txn
            )

    def close(self, timeout: float = 35.0) -> None:
        """Stop (after the commit in flight, if any)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (
                    not self.open or time.monotonic() < self.begun + self.linger
                ):
                    if self.open:
                        self._cond.wait(max(0.0, self.begun + self.linger - time.monotonic()))
                    else:
                        self._cond.wait()
                if self._closing:
                    return
            if not self._lease_ok():
                with self._cond:  # the loop ends the tenure; until then, nothing to do
                    self._cond.wait(0.05)
                continue
            if self._pacer is not None:
                # The process's budget of transactions: the loop goes on producing into
                # the open one until its turn (`projector.commit_pacer`).
                turn = self._pacer.turn()
                with self._cond:
                    while not self._closing and time.monotonic() < turn:
                        self._cond.wait(turn - time.monotonic())
                    if self._closing:
                        return
            with self.lock:
                if not self.open or not self._lease_ok():
                    continue
                try:
                    self.commit()
                except _EndTenure:
                    return


class _Settler:
    """Waits for a lifecycle topic's records before an offset to be readable
    (`projector.settlement`), asking its last stable offset."""

    def __init__(self, admin: AdminClient, topic: str, own: OwnRecords) -> None:
        self._admin = admin
        self.topic = topic
        self._own = own
        self._settled = 0  # the last stable offset, as last asked
        self._others_warned = -1.0

    def settle(self, end: int, wait_s: float) -> _EndTenure | None:
        """Until the records before offset `end` are readable (None), or are still held
        back by one of this producer's records after `wait_s` (the tenure's end, returned).
        Another producer's open record holding them back is not waited for: no tenure of
        this log can end it, and the commit that returned is trusted."""
        if end <= self._settled:
            return None
        deadline = time.monotonic() + wait_s
        tries = 0
        while True:
            try:
                stable = partition_end(
                    self._admin,
                    self.topic,
                    max(1.0, min(10.0, deadline - time.monotonic())),
                    stable=True,
                )
                verdict = self._own.verdict(stable, end)
                problem = (
                    f"this projector's record at offset {stable} is still open: the "
                    "commit's markers did not land"
                )
            except TopicIdentityError as exc:  # a broker failing over: asked again
                verdict, problem = None, f"the broker gave no last stable offset: {exc}"
            if verdict is Verdict.SETTLED:
                self._settled = stable
                return None
            if verdict is Verdict.OTHERS_OPEN:
                if time.monotonic() - self._others_warned > 60.0:
                    self._others_warned = time.monotonic()
                    log.warning(
                        "%s: another producer's transaction, open at offset %d, holds the "
                        "committed readers back; the snapshot trusts this projector's commit",
                        self.topic,
                        stable,
                    )
                return None
            if time.monotonic() >= deadline:
                return _EndTenure(
                    f"{self.topic}: lifecycle events committed but not known to be readable "
                    f"after {wait_s:g} s ({problem}); the snapshot is not written, and the "
                    "next tenure aborts what is open and publishes it again"
                )
            tries += 1
            time.sleep(min(0.5, 0.005 * 2**tries))


class _SnapshotWriter:
    """Writes the loop's snapshot cuts, in order, on a thread of its own, each once the
    transaction holding its records' last lifecycle events is committed and its records are
    readable (`projector.settlement`: a commit whose markers do not land within
    `_SETTLE_WAIT_S` ends the tenure, whose successor aborts and publishes them again from
    the last cut written). Redis round trips
    and chunk encoding then never stall the loop, where any stall is lag for every record
    behind it; while Redis does not answer, the cut waits and is retried with backoff.

    A lost snapshot (Redis flushed, position moved) is reported through `lost` (the
    generation of the cut that found it); the loop then refolds from seq 0 under the next
    generation, and cuts left from the lost one are dropped. A write refused because
    another projector holds the lease is reported through `lease_lost`.
    """

    def __init__(self, projector: Projector, committer: _Committer, own: OwnRecords) -> None:
        self._projector = projector
        self._committer = committer
        self._settler = _Settler(projector._admin, projector.location.lifecycle_topic, own)
        self._cuts: deque[tuple[int, int, LogState, int, list[Entry], tuple[int, int]]] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self.lost = -1
        self.lease_lost: LeaseLost | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="snapshot-writer", daemon=True)
        self._thread.start()

    def pending(self) -> int:
        return len(self._cuts)

    def put(
        self,
        generation: int,
        txn: int,
        state: LogState,
        first: int,
        entries: list[Entry],
        lifecycle: tuple[int, int],
    ) -> None:
        """Queue a cut, to be written once transaction `txn` is committed."""
        with self._cond:
            self._cuts.append((generation, txn, state, first, entries, lifecycle))
            self._cond.notify()

    def close(self, timeout: float = 60.0) -> None:
        """Write what is queued (unless Redis does not answer), then stop."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._cuts and not self._closing:
                    self._cond.wait()
                if not self._cuts:
                    return
                generation, txn, state, first, entries, lifecycle = self._cuts[0]
            if generation <= self.lost:
                self._cuts.popleft()
                continue
            if not self._committer.wait(txn, _COMMIT_WAIT_S):
                if self._committer.error is None and not self._closing:
                    self.error = KafkaLogError(
                        f"{self._projector.location.lifecycle_topic}: lifecycle events not "
                        f"committed in {_COMMIT_WAIT_S:.0f} s"
                    )
                return  # a failed commit ends the tenure: the loop raises it
            unsettled = self._settler.settle(self._committer.committed_end, _SETTLE_WAIT_S)
            if unsettled is not None:
                self.error = unsettled
                return  # the loop raises it
            try:
                self._projector._snapshot(state, first, entries, lifecycle)
            except _Rebuild:
                self.lost = generation
            except LeaseLost as exc:
                self.lease_lost = exc
                return
            except redis.RedisError as exc:
                failures += 1
                topic = self._projector.location.topic
                if self._closing:
                    log.warning(
                        "%s: stopping with %d snapshot cut(s) unwritten (Redis: %s); "
                        "the next run resumes from the last one written",
                        topic,
                        len(self._cuts),
                        exc,
                    )
                    return
                if failures == 1 or failures % 20 == 0:
                    log.warning("%s: cannot write a snapshot (Redis: %s); retrying", topic, exc)
                with self._cond:
                    self._cond.wait(min(_MAX_BACKOFF_S, 0.05 * 2**failures))
                continue
            except Exception as exc:
                self.error = exc
                return
            if failures:
                log.info(
                    "%s: Redis answers again; snapshot written", self._projector.location.topic
                )
                failures = 0
            self._cuts.popleft()


class _Keeper:
    """Renews the lease on a timer (every quarter of its period), busy or idle, writing
    the status record with it, and watches the log topic's id (asked on the process's
    `_check_pool`, never in the way of a renewal). The loop reads:

    - `until`: the monotonic time the lease is surely held until (it was renewed at a time
      before the renewal was sent);
    - `lost`: another projector holds the lease;
    - `topic_changed`: the log topic now has another id (deleted and created again).

    `report` renews at once, without waiting out the period: the status record then says
    what the tenure has just done (its start: resumed from the snapshot), which readers of
    the status (queryd's readiness, `stack status`, a group's new owner) otherwise learn
    up to a period later.
    """

    def __init__(self, projector: Projector, held_since: float) -> None:
        self._projector = projector
        lease_s = projector.lease_ms / 1000
        self.period = lease_s / 4
        self.until = held_since + lease_s
        self.lost = False
        self.topic_changed = False
        self._done = threading.Event()
        self._wake = threading.Event()  # set by `report` and `stop`
        self._thread = threading.Thread(target=self._run, name="projector-lease", daemon=True)
        self._thread.start()

    def report(self) -> None:
        """Renew (and so write the status record) now rather than at the next period."""
        self._wake.set()

    def stop(self) -> None:
        self._done.set()
        self._wake.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        projector = self._projector
        topic = projector.location.topic
        failures = 0
        checked = time.monotonic()
        check: Future[None] | None = None
        while True:
            self._wake.wait(self.period)
            self._wake.clear()
            if self._done.is_set():
                return
            sent = time.monotonic()
            try:
                held = projector._renew()
            except redis.RedisError as exc:
                failures += 1
                if failures == 1 or failures % 40 == 0:
                    log.warning(
                        "%s: cannot renew the projector lease (Redis: %s); "
                        "publishing pauses before it lapses, until Redis answers",
                        topic,
                        exc,
                    )
                continue
            if failures:
                log.info("%s: Redis answers again; lease renewed", topic)
                failures = 0
            if not held:
                self.lost = True
                return
            self.until = sent + projector.lease_ms / 1000
            if time.monotonic() - checked >= projector.topic_check_s and (
                check is None or check.done()
            ):
                checked = time.monotonic()
                # Not here: a renewal must not wait behind a slow broker's answer.
                check = _check_pool().submit(self.check_topic)

    def check_topic(self) -> None:
        projector = self._projector
        try:
            now = topic_id(projector._admin, projector.location.topic, timeout=5.0)
        except LogNotFoundError:
            log.warning("%s: the log topic is gone (deleted?)", projector.location.topic)
            return
        except Exception as exc:  # the broker may be away a moment: checked again later
            log.debug("%s: topic id check failed: %s", projector.location.topic, exc)
            return
        if projector._tid is not None and now != projector._tid:
            self.topic_changed = True


# Audit events from which a hydrated state is frozen for the collector.
_FREEZE_AT = 100_000

# How long the loop waits for a record when nothing of its own is pending (no snapshot to
# cut, no events held): a record still wakes it at once; the wait only bounds the idle
# rounds (a process of 33 logs woke 3,300 times a second at 10 ms).
_IDLE_WAIT_S = 0.1


class _Rebuild(Exception):
    """The snapshot is gone: fold again from seq 0 under a new epoch."""


class Projector:
    def __init__(
        self,
        location: KafkaLocation | str,
        *,
        every_records: int = 20_000,
        every_ms: int = 1000,
        linger_ms: int = 2,
        lease_ms: int = 3_000,
        commit_ms: int = 100,
        commit_linger_ms: int = 1,
        progress: Progress | None = None,
        key: KeySpec = None,
        checkpoint_ms: int = 1000,
        admin: AdminClient | None = None,
        max_undelivered: int = MAX_UNDELIVERED,
        pacer: CommitPacer | None = None,
    ) -> None:
        """Lifecycle transactions commit, on a thread of their own, once `commit_ms` old
        while catching up and `commit_linger_ms` old at the log's end (a commit costs a few
        broker round trips; a subscriber sees an event once its transaction is
        committed).

        A snapshot chunk is cut every `every_records` records, or `every_ms` after the
        last cut when there is news. A cut costs about a millisecond of CPU (the commit
        markers' check, the fenced Redis write) however few its records: at 100 ms, a
        process of 33 logs at 10 appends a second each spent 82% of a core, one cut per
        record; at 1000 ms, 49%. A restart or a new owner folds at most that much of the
        log again.

        `key`: the signing key of the log's checkpoints (`producers.logs.signing_key`:
        a key file, a signer, False for none; None: ``$MEMSTREAM_SIGNING_KEY``, else the
        default key file when it exists). With one, a signed checkpoint is cut after a
        consumed batch at most every `checkpoint_ms` and when the run ends
        (`producers.logs.kafka_evidence`).

        `admin`: an admin client of the log's cluster to share (a process following many
        logs, `projector.group`, needs one, not one per log); None: one of its own.

        `max_undelivered`: while more lifecycle events than this are produced and not yet
        acknowledged, the loop folds nothing more (`MAX_UNDELIVERED`), so that a commit,
        which waits for them all, ends well within the transaction's timeout.

        `pacer`: the budget of transactions this projector shares with the others of its
        process (`projector.commit_pacer`; a process following many logs, `projector.group`,
        makes one); None: a commit is made as soon as it is due."""
        if max_undelivered < 0:
            # Negative, no count of undelivered events is ever low enough: the loop waits
            # for ever.
            raise ValueError(f"max_undelivered must be 0 or more, got {max_undelivered}")
        self.location = (
            location if isinstance(location, KafkaLocation) else parse_kafka_location(location)
        )
        self.every_records = every_records
        self.every_ms = every_ms
        self.linger_ms = linger_ms
        self.lease_ms = lease_ms
        self.commit_ms = commit_ms
        self.commit_linger_ms = commit_linger_ms
        self.max_undelivered = max_undelivered
        self.pacer = pacer
        self.progress = progress
        self.owner = uuid.uuid4().hex
        self.stats = ProjectorStats()
        self.state: LogState = empty_state()
        # `is None`, not `or`: a client is falsy (its len() is its queue's, 0 when idle).
        self._admin = (
            admin if admin is not None else AdminClient(client_conf(self.location.bootstrap))
        )
        # The projector reads the log (only writers create logs) and writes its lifecycle.
        ensure_topic(
            self._admin, self.location.topic, self.location.replication_factor, create=False
        )
        self._ensure_lifecycle_topic()
        self.memex = MemexPublisher(self.location, self._admin)  # the derived topic LOG.memex
        signer = resolve_signer(key)
        self.evidence: CheckpointCutter | None = (
            None
            if signer is None
            else CheckpointCutter(self.location, signer, self._admin, every_ms=checkpoint_ms)
        )
        self.store = SnapshotStore.connect(self.location)
        self.store.owner = self.owner  # snapshot writes are fenced by the lease
        # The lease has a client of its own whose timeout is half the lease: a renewal
        # counts from when it was sent, so a slow answer (a loaded machine: Redis or this
        # process not scheduled for a while) still renews; a timeout of one renewal period
        # (a quarter) lapsed the lease in the failover test on a loaded machine, each lapse
        # a restart from the snapshot.
        timeout_s = max(0.05, lease_ms / 2000)
        lease_client = redis.Redis.from_url(
            self.location.redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self.lease = Lease(
            lease_client,
            self.store.lock_key,
            status_key(self.location.key_prefix),
            self.owner,
            lease_ms,
        )
        # One transactional id per log: whoever initialises it fences the one before.
        self.transactional_id = f"memstream-projector.{self.location.topic}"
        self.topic_check_s = 5.0
        self.compact_every_s = 1.0
        self.compact_at_chunks = 48
        self._compactor: tuple[threading.Event, threading.Thread] | None = None
        self._tid: str | None = None
        # What the status record reports (written by the loop, read by the lease thread).
        self._host = socket.gethostname()
        self._folded_seq: int | None = None
        self._log_end = 0
        self._published_seq: int | None = None

    # --- the lease ----------------------------------------------------------------------------

    def status(self) -> ProjectorStatus:
        """What this projector reports about itself (written with each lease renewal)."""
        return ProjectorStatus(
            owner=self.owner,
            host=self._host,
            pid=os.getpid(),
            folded_seq=self._folded_seq,
            log_end=self._log_end,
            published_seq=self._published_seq,
            heartbeat_ms=int(time.time() * 1000),
            lease_ms=self.lease_ms,
        )

    def _renew(self) -> bool:
        """Renew (or take, when free) the lease, writing the status record; raises Redis's
        errors."""
        return self.lease.renew(encode_status(self.status()), 3 * self.lease_ms)

    def _take_lease(self, stop: threading.Event | None, deadline: float | None) -> float | None:
        """Wait for the lease; the monotonic time it was taken at (None: stopped first)."""
        waiting = False
        failures = 0
        while stop is None or not stop.is_set():
            if deadline is not None and time.monotonic() > deadline:
                return None
            sent = time.monotonic()
            try:
                if self._renew():
                    if failures or waiting:
                        log.info("%s: projector lease taken", self.location.topic)
                    return sent
                pause = 0.2
                if not waiting:
                    log.info("%s: another projector holds the lease; waiting", self.location.topic)
                    waiting = True
            except (redis.AuthenticationError, redis.exceptions.NoPermissionError) as exc:
                # Credentials do not fix themselves: say so instead of retrying forever.
                raise redis_refused(self.location, "take the projector lease", exc) from None
            except redis.RedisError as exc:
                failures += 1
                pause = min(_MAX_BACKOFF_S, 0.1 * 2**failures)
                if failures == 1 or failures % 20 == 0:
                    log.warning(
                        "%s: cannot take the projector lease (Redis: %s); retrying in %.1f s",
                        self.location.topic,
                        exc,
                        pause,
                    )
            if stop is not None:
                if stop.wait(pause):
                    return None
            else:
                time.sleep(pause)
        return None

    def _release(self) -> None:
        try:
            self.lease.release()
        except redis.RedisError:  # Redis gone: the lease expires by itself
            log.debug("lease release failed", exc_info=True)

    # --- pieces -------------------------------------------------------------------------------

    def _start_state(self, tid: str, consumer: Consumer) -> tuple[LogState, int, int]:
        """(state, lifecycle offset of its next event, lifecycle-topic offset to resume the
        dedup from): the snapshot of this log if there is one, else nothing folded yet."""

        def identify() -> LogIdentity:
            _, high = watermarks(consumer, self.location.topic, 30)
            return LogIdentity(tid, high)

        before, self.store.identify = self.store.identify, identify
        with no_gc(1 << 30):
            try:
                loaded = self.store.load()
            finally:
                self.store.identify = before
            position = self.store.loaded
            if loaded is not None and (position is None or position.lifecycle is None):
                log.warning(
                    "%s: the snapshot has no lifecycle position; ignored", self.location.topic
                )
                loaded = None
            if loaded is not None and len(loaded.memory) >= _FREEZE_AT:
                # A large hydrated state lives as long as the projector: out of the
                # collector's sight, no later full collection walks its millions of
                # objects again (~1 s each at 1M events, lag for every record behind it).
                gc.freeze()
        if loaded is None:
            self.store.start_epoch(tid)
            log.info("%s: no snapshot of this log; folding it from seq 0", self.location.topic)
            return empty_state(), 0, 0
        assert position is not None and position.lifecycle is not None
        self.store.adopt(position)
        log.info("%s: resumed from the snapshot at seq %s", self.location.topic, loaded.last_seq)
        return loaded, position.lifecycle[0], position.lifecycle[1]

    def _start_compactor(self) -> None:
        """Merge small snapshot chunks in the background, so that they stay few."""
        done = threading.Event()

        def loop() -> None:
            while not done.wait(self.compact_every_s):
                position = self.store.position
                # Merging holds the GIL while it decodes and encodes chunks (a pause for the
                # fold loop): only once chunks have piled up, so a live projector merges
                # rarely, in bursts.
                if position is None or len(position.chunks) < self.compact_at_chunks:
                    continue
                # In another process: decoding and encoding chunks would otherwise hold
                # this process's GIL for up to a second, a pause in the fold loop. Not
                # waited for when stopping (the thread is left to finish): a merge is one
                # MULTI/EXEC, atomic however it ends.
                try:
                    _COMPACTOR.compact(str(self.location), position.epoch)
                except WorkerGone as exc:  # died (killed): the next round starts another
                    log.warning("%s: %s", self.location.topic, exc)
                except RuntimeError as exc:  # a cache: the next round (or the next run) merges
                    log.warning("%s: merging snapshot chunks failed (%s)", self.location.topic, exc)

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

    def _ensure_lifecycle_topic(self) -> None:
        ensure_topic(
            self._admin,
            self.location.lifecycle_topic,
            self.location.replication_factor,
            message_bytes=DERIVED_TOPIC_MAX_MESSAGE_BYTES,
        )

    def _lifecycle_held(self) -> int:
        """The lifecycle topic's high watermark: the offset after its last record,
        committed, aborted or still open."""
        try:
            return partition_end(self._admin, self.location.lifecycle_topic, 30)
        except TopicIdentityError as exc:
            # A broker failing over (issue 17), or the topic deleted since this projector
            # was made (a projector group makes them ahead): the derived topics are
            # created again if they are gone (checked if not), and the tenure ends and
            # resumes from the snapshot, whose lifecycle position is then past the new
            # topic's end: the stream is published again from seq 0.
            try:
                self._ensure_lifecycle_topic()
                self.memex.ensure(self._admin)
            except (MemstreamError, KafkaException) as again:
                log.debug("%s: %s", self.location.topic, again)
            raise _EndTenure(f"{self.location.lifecycle_topic}: no end: {exc}") from None

    def _lifecycle_end(self, consumer: Consumer) -> int:
        try:
            return watermarks(consumer, self.location.lifecycle_topic, 30)[1]
        except KafkaException as exc:
            # A broker failing over (issue 17): the tenure ends and resumes from the snapshot.
            raise _EndTenure(
                f"{self.location.lifecycle_topic}: no watermark: {error_cause(exc)}"
            ) from None

    def _sweep(self, producer: Producer, acks: _Acks) -> None:
        """End any record an earlier epoch of this transactional id left open on the topics
        it publishes to, before the tail is read.

        A record whose produce request reached the broker late (the broker stalled, the
        client gave up on it and aborted) can be appended in no transaction the coordinator
        knows of: nothing aborts it, and the next commit of this producer id commits it with
        its own records, beside the event published again by a tenure that could not see
        it (a broker stopped for 12 s: seq 136 of a log at lifecycle offsets 227 and 228).
        One record of this epoch on each topic, then an abort: the abort marker ends every
        open record of the producer id there, and from its record on each partition refuses
        the earlier epoch. The records are aborted: no committed reader sees them."""
        topics = (self.location.lifecycle_topic, self.memex.topic)
        try:
            producer.begin_transaction()
            for topic in topics:
                producer.produce(topic, b"", partition=0, headers=[_SWEEP_KIND])
            left = producer.flush(30)
            if left or acks.error is not None:
                raise _EndTenure(
                    f"sweeping {', '.join(topics)} failed: "
                    f"{acks.error or f'{left} record(s) not delivered in 30 s'}"
                )
            producer.abort_transaction(30)
        except (KafkaException, SystemError) as exc:
            cause = kafka_exception(exc, producer)
            if cause is None:
                raise
            raise self._transaction_failed("sweeping the lifecycle topic", cause) from None

    def _transaction_failed(self, what: str, exc: KafkaException) -> _EndTenure:
        error = exc.args[0] if exc.args else exc
        if isinstance(error, KafkaError) and error.code() == KafkaError._FENCED:
            return _EndTenure(f"another projector took over the log ({what}: fenced)")
        return _EndTenure(f"{what} failed: {error}")

    # --- the loop -----------------------------------------------------------------------------

    def run(
        self,
        stop: threading.Event | None = None,
        *,
        until_caught_up: bool = False,
        max_seconds: float | None = None,
    ) -> LogState:
        """Follow the log until `stop` is set (or, with `until_caught_up`, until the state
        reaches the end of the log as it was when the projector started).

        A tenure that ends early (lease lost or lapsed, producer fenced, log topic created
        again) is followed by another once the lease is held again, resuming from the
        snapshot."""
        started = time.monotonic()
        deadline = None if max_seconds is None else started + max_seconds
        target: list[int] = []  # the log's end at the start, for `until_caught_up`
        pause = 0.0
        while stop is None or not stop.is_set():
            if pause:  # after a tenure ended early: back off a little
                if stop is not None and stop.wait(pause):
                    break
                if stop is None:
                    time.sleep(pause)
            held_since = self._take_lease(stop, deadline)
            if held_since is None:
                break
            keeper = _Keeper(self, held_since)
            try:
                self._tenure(keeper, stop, deadline, target if until_caught_up else None)
                return self.state
            except _EndTenure as exc:
                self.stats.restarts += 1
                pause = min(_MAX_BACKOFF_S, 0.25 * 2 ** min(self.stats.restarts, 5))
                log.warning(
                    "%s: %s; resuming from the snapshot once the lease is held",
                    self.location.topic,
                    exc,
                )
            finally:
                keeper.stop()
                self._release()
        return self.state

    def _tenure(
        self,
        keeper: _Keeper,
        stop: threading.Event | None,
        deadline: float | None,
        target: list[int] | None,
    ) -> None:
        """Fold and publish while holding the lease; returns when the run is over, raises
        `_EndTenure` when this tenure is."""
        acks = _Acks(self.location.lifecycle_topic)
        began = time.monotonic()
        phases: list[tuple[str, float]] = []  # how the tenure's start spent its time

        def phase(name: str) -> None:
            phases.append((name, time.monotonic()))

        # Lifecycle events are latency-bound (subscribers wait on them): a short linger.
        producer = Producer(
            producer_conf(
                self.location.bootstrap,
                **{
                    "linger.ms": self.linger_ms,
                    "on_delivery": acks.report,
                    "message.max.bytes": DERIVED_PRODUCER_MESSAGE_MAX_BYTES,
                    "transactional.id": self.transactional_id,
                    # A transaction left open by a projector that died is aborted by the broker
                    # after this long, unless a successor's initialisation aborts it first.
                    "transaction.timeout.ms": max(10_000, 4 * self.lease_ms),
                },
            )
        )
        # Initialising the transactional id fences every earlier producer of this log and
        # aborts its open transaction (a few round trips, more while that abort completes):
        # on a thread, while the snapshot loads; nothing is published before it is done.
        initialised: list[BaseException | None] = []

        def initialise() -> None:
            try:
                producer.init_transactions(30)
                initialised.append(None)
            except BaseException as exc:
                initialised.append(exc)

        initialiser = threading.Thread(target=initialise, name="lifecycle-init", daemon=True)
        initialiser.start()
        consumer = Consumer(follower_conf(self.location.bootstrap))
        tp = TopicPartition(self.location.topic, 0)
        margin = self.lease_ms / 4000  # stop publishing this long before the lease lapses
        committer = _Committer(
            self,
            producer,
            acks,
            lambda: time.monotonic() < keeper.until - margin,
            self.pacer,
        )
        writer: _SnapshotWriter | None = None
        tail: LifecycleTail | None = None
        lifecycle_topic = self.location.lifecycle_topic
        memex_topic_name = self.memex.topic
        # Events produced once the commit holding the lock is done, in order.
        # (topic, value, headers, seq): lifecycle events, and the derived topic's envelopes.
        held: list[tuple[str, bytes, KafkaHeaders, int]] = []

        def produce(topic: str, value: bytes, headers: KafkaHeaders, seq: int) -> None:
            """Into the open transaction (under the committer's lock)."""
            if not committer.open:
                committer.begin()
            while True:
                try:
                    producer.produce(topic, value, partition=0, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
                except KafkaException as exc:
                    raise self._transaction_failed("publishing", exc) from None
            committer.open_seq = seq

        def release() -> None:
            """What was held, into the open transaction (under the committer's lock)."""
            for topic, value, headers, seq in held:
                produce(topic, value, headers, seq)
            held.clear()

        def may_produce() -> bool:
            """Whether held events may go to the producer now: when it holds none awaiting
            their acknowledgement. An idempotent producer sends one request at a time for
            a partition with records in flight, and librdkafka's broker thread polls
            without waiting while records queue behind that request (README,
            Limitations): on a slow broker every busy producer spun a core, which the
            broker then lacked. Held here, they go out together once the request in
            flight is acknowledged (the loop serves the reports every round)."""
            return len(producer) == 0

        def release_held(*, now: bool = False) -> None:
            """What was held, into the open transaction, without waiting: not while a commit
            holds the lock, nor (unless `now`) while records await acknowledgement."""
            if held and (now or may_produce()) and committer.lock.acquire(blocking=False):
                try:
                    release()
                finally:
                    committer.lock.release()

        def undelivered() -> int:
            """Lifecycle events produced and not yet acknowledged, and those held back."""
            return len(producer) + len(held)

        def keep_pace() -> None:
            """With more than `max_undelivered` events undelivered, wait (without the
            committer's lock, so that commits go on) until the broker has caught up by
            half, or the lease must be renewed, or the run stops."""
            count = undelivered()
            self.stats.most_undelivered = max(self.stats.most_undelivered, count)
            if count <= self.max_undelivered:
                return
            waited = time.monotonic()
            while (
                acks.error is None
                and committer.error is None
                and time.monotonic() < keeper.until - margin
                and not (stop is not None and stop.is_set())
            ):
                release_held()
                if undelivered() <= self.max_undelivered // 2:
                    break
                producer.poll(0.01)
            self.stats.backpressure_s += time.monotonic() - waited

        def drain() -> None:
            """Everything published so far, committed (after the commit in flight)."""
            with committer.lock:
                release()
                if committer.open:
                    committer.commit()

        try:
            try:
                tid = self._tid = topic_id(self._admin, self.location.topic)
            except LogNotFoundError as exc:
                raise _EndTenure(f"the log topic is gone ({exc}); waiting for it") from None
            except (KafkaLogError, TopicIdentityError) as exc:  # a failover (issue 17): again
                raise _EndTenure(f"cannot identify the log topic ({exc})") from None
            tid_bytes = tid.encode()
            erasable: bool | None = None  # whether the log encrypts: at its first record
            phase("topic id")
            try:
                state, count, resume_at = self._start_state(tid, consumer)
                phase("snapshot")
                end = watermarks(consumer, self.location.topic, 10)[1]
            except redis.RedisError as exc:  # Redis went away since the lease was taken
                raise _EndTenure(f"cannot read the snapshot (Redis: {exc})") from None
            except KafkaException as exc:  # a cluster failing over (issue 17): try again
                raise _EndTenure(f"cannot read the log's end ({error_cause(exc)})") from None
            self._start_compactor()
            if target is not None and not target:
                target.append(end)
            phase("log end")
            initialiser.join()
            phase("producer initialised")
            failure = initialised[0] if initialised else None
            if isinstance(failure, KafkaException):
                raise self._transaction_failed("initialising the lifecycle producer", failure)
            if failure is not None:
                raise failure
            # How far the lifecycle topic holds records at all once the predecessor's
            # transaction is aborted (its high watermark, open transactions included),
            # before the sweep's record and marker: below the snapshot's lifecycle
            # position only when its records are gone. Its last stable offset is no such
            # measure: a record left open there (a late produce request, another
            # producer's transaction) holds it back, and a tenure took that for a deleted
            # topic, folded from seq 0 and published again what lay past the open record.
            held_end = self._lifecycle_held()
            phase("lifecycle held")
            self._sweep(producer, acks)
            phase("sweep")
            tail_end = self._lifecycle_end(consumer)
            if resume_at > held_end:
                # The snapshot's lifecycle records are gone (the lifecycle topic was
                # deleted): fold from seq 0 to publish the whole stream again.
                log.warning(
                    "%s: the lifecycle topic ends at offset %d, before the snapshot's "
                    "lifecycle position %d; folding the log from seq 0 to publish it "
                    "again",
                    self.location.topic,
                    held_end,
                    resume_at,
                )
                self.store.start_epoch(tid)
                state, count, resume_at = empty_state(), 0, 0
            tail = LifecycleTail(
                self.location.bootstrap, lifecycle_topic, tid_bytes, resume_at, tail_end, end
            )
            consumer.assign([TopicPartition(self.location.topic, 0, state.next_seq)])
            evidence = self.evidence
            if evidence is not None:
                evidence.resume(state.next_seq, end)
            self._folded_seq, self._log_end = state.last_seq, end
            self._published_seq = state.last_seq
            keeper.report()  # resumed: said now, not at the next renewal
            phase("tail")
            log.info(
                "%s: publishing from seq %d, %.2f s after the tenure began (%s)",
                self.location.topic,
                state.next_seq,
                phases[-1][1] - began,
                ", ".join(
                    f"{name} {at - before:.2f} s"
                    for (name, at), before in zip(
                        phases, [began] + [at for _, at in phases], strict=False
                    )
                ),
            )
            buffer: list[Entry] = []
            first = state.next_seq
            now = last_write = last_progress = time.monotonic()
            generation = 0  # bumped on each rebuild from seq 0
            commit_s = self.commit_ms / 1000
            head_linger_s = self.commit_linger_ms / 1000
            paused = False
            # A record's lifecycle events and derived envelopes, produced together.
            ready: list[tuple[str, bytes, KafkaHeaders, int]] = []
            reset_checked = 0.0
            writer = _SnapshotWriter(self, committer, acks.own)
            while stop is None or not stop.is_set():
                if target is not None and state.next_seq >= target[0]:
                    break  # what is buffered is written on the way out
                if deadline is not None and time.monotonic() > deadline:
                    break
                if keeper.lost:
                    raise _EndTenure("another projector holds the lease")
                if keeper.topic_changed:
                    raise _EndTenure("the log topic was deleted and created again")
                if committer.error is not None:
                    raise committer.error
                if writer.lease_lost is not None:
                    raise _EndTenure(str(writer.lease_lost))
                if writer.error is not None:
                    raise writer.error
                now = time.monotonic()
                if now >= keeper.until - margin:
                    # The lease was not renewed in time (Redis away): fold and publish
                    # nothing more until it is. What is pending commits while the lease
                    # surely holds.
                    if now < keeper.until:
                        drain()
                    elif committer.open or held:
                        raise _EndTenure("the lease lapsed with lifecycle events unpublished")
                    if not paused:
                        log.warning(
                            "%s: lease not renewed in time; publishing paused", self.location.topic
                        )
                        paused = True
                    producer.poll(0)
                    time.sleep(0.05)
                    continue
                if paused:
                    log.info("%s: lease renewed; publishing again", self.location.topic)
                    paused = False
                release_held()
                # At once what is ready, else the first record to come: a batch consume
                # would wait out its timeout. Short while events are held, so that they go
                # out promptly; with records buffered, until the snapshot cut is due (a
                # record still ends the wait at once). Waking every 10 ms while a buffer
                # waited for its cut cost a process of 33 quiet logs 3,300 rounds a second.
                if held:
                    wait = 0.01
                elif buffer:
                    due = last_write + self.every_ms / 1000 - time.monotonic()
                    wait = min(_IDLE_WAIT_S, max(0.01, due))
                else:
                    wait = _IDLE_WAIT_S
                messages = consume_ready(consumer, 1000, wait)
                # Transactions commit once this old: soon at the log's end (subscribers
                # wait), less often catching up (each commit costs the broker some work).
                committer.linger = head_linger_s if len(messages) < 1000 else commit_s
                if state.authorship is not None and len(messages) > 1:
                    # A signed log: the batch's signatures checked by a few threads ahead
                    # of the fold, which then finds them done (the same verdicts).
                    preverify(
                        state.authorship,
                        [v for m in messages if (v := m.value()) is not None],
                        _verify_pool().map,
                    )
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                            raise _EndTenure(f"the log topic is gone ({error})")
                        # A broker failing over, a fetch refused: the tenure ends, and
                        # the next resumes from the snapshot (the log is never skipped).
                        raise _EndTenure(f"reading the log failed: {error}")
                    # Consumed, not an error: it has an offset (the stubs type it optional).
                    seq = cast(int, message.offset())
                    if seq < state.next_seq:
                        # Only an offset reset brings these: was the topic created again?
                        if time.monotonic() - reset_checked > 5.0:
                            reset_checked = time.monotonic()
                            keeper.check_topic()
                            if keeper.topic_changed:
                                raise _EndTenure("the log topic was deleted and created again")
                        continue
                    # A null value (None) is folded as a refused record: the fold is total.
                    data = cast(bytes, message.value())
                    before = state
                    if erasable is None:
                        # An encrypted log's key store exists before its first record.
                        try:
                            erasable = keys_topic_exists(self._admin, self.location.topic)
                        except KafkaLogError as exc:
                            raise _EndTenure(f"cannot look for the key store ({exc})") from None
                    # Folded as stored: an encrypted log's content stays sealed in the
                    # snapshots and on the lifecycle topic (no plaintext leaves the log).
                    state, events = fold_record(state, seq, data, erasable=erasable)
                    self.stats.folded += 1
                    if evidence is not None:
                        evidence.add(data)
                    buffer.append(entry_of(seq, data, events))
                    # A record's events and envelopes share one transaction: the record's
                    # envelopes were published iff its lifecycle events were (checked
                    # byte for byte), or, with none, while the published tail lasts.
                    published = tail is not None
                    for index, event in enumerate(events):
                        value = encode_lifecycle(event, index)
                        if tail is not None and tail.published(count, seq, index, value):
                            count += 1
                            self.stats.skipped += 1
                            continue
                        published = False
                        headers = [_ENVELOPE_KIND, *lifecycle_headers(tid_bytes, seq, index, count)]
                        count += 1
                        self.stats.published += 1
                        ready.append((lifecycle_topic, value, headers, seq))
                    if not published:
                        for value, headers in self.memex.records(before, state, seq, data, events):
                            ready.append((memex_topic_name, value, headers, seq))
                    if ready:
                        # Never waits: while a commit holds the lock, or records await
                        # their acknowledgement, the events wait.
                        if may_produce() and committer.lock.acquire(blocking=False):
                            try:
                                release()
                                for topic, value, headers, event_seq in ready:
                                    produce(topic, value, headers, event_seq)
                            finally:
                                committer.lock.release()
                        else:
                            held.extend(ready)
                        ready.clear()
                if tail is not None and tail.exhausted:
                    tail.close()
                    resume_at = max(resume_at, tail.position)
                    tail = None
                # Every round, busy or idle: delivery reports are served here.
                producer.poll(0)
                keep_pace()
                if evidence is not None:  # a checkpoint after a batch, at most every N ms
                    evidence.cut(time.monotonic())
                if acks.error is not None:
                    raise _EndTenure(f"delivering lifecycle events failed: {acks.error}")
                if committer.error is not None:
                    raise committer.error
                self._folded_seq = state.last_seq
                if not committer.open and not held:
                    # Every event so far is committed (or was published before).
                    self._published_seq = state.last_seq
                elif committer.committed_seq is not None:
                    self._published_seq = committer.committed_seq
                now = time.monotonic()
                cut_wanted = (
                    bool(buffer)
                    and writer.pending() == 0
                    and (
                        len(buffer) >= self.every_records
                        or (now - last_write) * 1000 >= self.every_ms
                    )
                )
                if cut_wanted:
                    # A cut waits for no acknowledgement (`may_produce`): what is held goes
                    # into the open transaction now, which the cut then waits for.
                    release_held(now=True)
                cut_due = cut_wanted and not held
                if writer.lost == generation:
                    drain()
                    consumer.close()
                    consumer = Consumer(follower_conf(self.location.bootstrap))
                    consumer.assign([TopicPartition(self.location.topic, 0, 0)])
                    state, first, buffer = empty_state(), 0, []
                    generation += 1
                    if evidence is not None:
                        evidence.restart()
                    # The new epoch's dedup reads the whole lifecycle topic from its start.
                    if tail is not None:
                        tail.close()
                    end = max(end, self._folded_seq + 1 if self._folded_seq is not None else 0)
                    tail = LifecycleTail(
                        self.location.bootstrap,
                        lifecycle_topic,
                        tid_bytes,
                        0,
                        self._lifecycle_end(consumer),
                        end,
                    )
                    count, resume_at = 0, 0
                    continue
                if cut_due:
                    # The cut is written once the transaction holding the buffered records'
                    # last events (the last begun) is committed; every later event's record
                    # lies at or after `at` (a lower bound: at worst the next tenure reads a
                    # few records more).
                    at = tail.position if tail is not None else max(resume_at, acks.last_offset + 1)
                    writer.put(generation, committer.txn, state, first, buffer, (count, at))
                    first, buffer, last_write = state.next_seq, [], now
                    # What survived until now is the state: out of the cyclic collector's
                    # sight, else a full collection walks all of it (tens of ms on a small
                    # log, seconds on a large one), stalling every record behind it.
                    # Refcounting still frees it; only cyclic garbage made before this
                    # point would stay (the fold makes none on purpose).
                    gc.freeze()
                if now - last_progress > 0.25:
                    last_progress = now
                    # The high watermark the fetches brought: no broker round trip on the
                    # loop (-1001: none known yet).
                    cached = consumer.get_watermark_offsets(tp, cached=True)[1]
                    end = max(end, cached)
                    self._log_end = max(end, state.next_seq)
                    if self.progress is not None:
                        self.progress(state.next_seq, max(end, state.next_seq))
            drain()
            self._published_seq = state.last_seq
            if evidence is not None:
                evidence.finish()
                self.stats.checkpoints = evidence.cuts
                self.stats.evidence_halted = evidence.halted
            if buffer:
                at = tail.position if tail is not None else max(resume_at, acks.last_offset + 1)
                writer.put(generation, committer.txn, state, first, buffer, (count, at))
            writer.close()
            closed, writer = writer, None
            if closed.error is not None:
                raise closed.error
            if closed.lease_lost is not None:
                log.warning(
                    "%s: stopping; the last snapshot was not written (%s)",
                    self.location.topic,
                    closed.lease_lost,
                )
            if closed.lost == generation:
                log.warning(
                    "%s: stopping with the snapshot lost; the next run rebuilds",
                    self.location.topic,
                )
            self.state = state
        except (KafkaException, SystemError) as exc:
            # Anywhere in the tenure (a fatal producer error surfaces on any poll: fenced by a
            # successor, or by this process's own earlier producer still aborting in the
            # background): the tenure ends; the next one's producer fences every earlier one.
            cause = kafka_exception(exc, producer)
            if cause is None:
                raise
            raise self._transaction_failed("following the log", cause) from None
        finally:
            gc.unfreeze()  # the frozen state is garbage now, as far as this run goes
            self._stop_compactor()
            initialiser.join(35)
            if tail is not None:
                tail.close()
            committer.close()  # after the commit in flight, if any
            if committer.open:  # leaving on an error: what is open is not published
                try:
                    producer.abort_transaction(5)
                except KafkaException:
                    log.debug("abort failed (fenced?)", exc_info=True)
            if writer is not None:  # leaving on an error: write what is committed
                writer.close(5.0)
            consumer.close()

    def _snapshot(
        self, state: LogState, first: int, buffer: list[Entry], lifecycle: tuple[int, int]
    ) -> int:
        """Write the buffered records' chunk (their lifecycle events are committed)."""
        try:
            self.store.write(first, buffer, state, lifecycle=lifecycle)
            self.stats.snapshots += 1
            return state.next_seq
        except SnapshotLost as exc:
            # Redis was flushed (or another writer moved the position): rebuild from the
            # log under a new epoch. Lifecycle events already published are skipped.
            log.warning("%s: snapshot lost (%s); rebuilding from the log", self.location.topic, exc)
            self.stats.rebuilds += 1
            self.store.start_epoch(self._tid)
            raise _Rebuild from exc
