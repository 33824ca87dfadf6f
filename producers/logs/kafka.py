"""The distributed log: one Kafka topic with one partition; a record's offset is its seq.

`KafkaLog` is the adapter of ``kafka://`` locations (registered with
`producers.logs.adapters`); the client configurations, headers, size limits, topic creation
and error types it shares with the projector are in `producers.logs.kafka_client`.

Producers are idempotent with ``acks=all`` and not transactional (seq is the offset): a retry
never duplicates or reorders a record, and offsets stay dense. The logs a process appends to
on one cluster, with the same settings, share one producer
(`producers.logs.shared_producer`: one produce request per broker for all their batches).
The state is the same total fold as everywhere (`projector.record_fold.fold_record`),
hydrated from the projector's Redis snapshot when there is one, then following the topic.

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

Reads cost one round trip (issue 16): the log's end (high watermark) is asked of a consumer
that never fetches, so it is not queued behind the reading consumer's pending fetch; and
this process's own acknowledged records are folded from the bytes it produced (what the
log holds at the offsets their delivery reports give), so read-your-writes needs no fetch.
Records of others are fetched as ever, each at its seq: an own record is folded from its
bytes only when the state reaches exactly its seq. A synchronous append (`append`,
`transact`) goes further: it sends its batch at once and folds it while the broker
acknowledges, at the seqs it will get if nothing lands before it (`_speculate`); the
delivery reports then tell whether that guess was right, and only then is that fold kept
(`_adopt`), so a read right after the append needs no fold at all. A wrong guess (another
writer's record came first) is dropped, and the records are folded in place as above.

`submit` is pipelined: it produces and returns a future at once, and the broker's
acknowledgements resolve the futures (a background thread serves the delivery reports), so
many batches are in flight together and librdkafka packs them into few requests. A future
resolves only after ``acks=all`` (acknowledged means durable).

Failures are bounded in time and say what became of each record:

- An append answers within `append_timeout` (default `APPEND_TIMEOUT_S`, 30 s). A batch
  not acknowledged after 0.6 of it makes the log give up on its producer (`_give_up`):
  everything the producer holds, queued or in flight, is dropped (`Producer.purge`) and it
  never sends again; the next append gets a new one. So a reported failure is final:
  nothing is retried behind the caller's back. Records dropped from the queue are reported
  by librdkafka as never sent: those are "not appended" (`AppendFailedError`). Records that
  were sent and not acknowledged may have been written, or may still be (a broker that was
  paused writes what it had received when it resumes): their outcome is unknown
  (`AppendOutcomeUnknownError`, naming their ids to look for before retrying).
  confluent-kafka does not expose librdkafka's per-message persistence status, so this
  split (dropped from the queue or not) is how the two are told apart; except where
  librdkafka may have put records it had sent back in the queue to retry them: after a
  broker connection failed while the batch was out, and on a replicated log (several
  replicas), whose partition leader can move to another node. Records dropped then are
  reported with an unknown outcome too.
- No record is written twice. The idempotent producer's sequence numbers let the broker
  drop a retry of what it wrote already, but only within one producer epoch, and
  librdkafka bumps the epoch and renumbers the records it still holds, some of which it
  may have sent before, when its own message timeout fires, after a gap in the sequence
  (records purged from the queue of a producer that goes on), and when a later one of
  several requests in flight is refused as out of order during a leader change (see
  confluentinc/librdkafka#4953). So a log never lets its producer time out records
  (``message.timeout.ms`` is twice the append timeout, past the give-up above), never
  purges a producer it goes on using, and keeps one produce request in flight
  (``max.in.flight.requests.per.connection`` = 1).
- A producer that hits a fatal error is replaced: the records it held are reported with
  an unknown outcome, and the next append goes to a new producer.
- A read (`state`, `end_offset`) fails with `KafkaUnavailableError` (a
  `LogUnavailableError`) naming the log, the seq it waits for and the cause once nothing
  has arrived for `read_timeout` seconds (default `READ_TIMEOUT_S`, 15 s); opening the log
  gives up after the same time.
- A reader never accepts a seq gap: on an error in the middle of a consumed batch, or a
  record past the state's next seq, its consumer goes back to that seq; records deleted
  under the log (the topic starts past it) raise `CorruptLogError`.
- Every confluent-kafka error leaves `KafkaLog` as a `KafkaLogError` naming the log, the
  operation and the cause. A record's encoded size is checked against
  `schemas.limits.MAX_RECORD_BYTES` before anything of its batch is produced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from functools import partial
from os import PathLike
from typing import Any, TypeVar, cast
from uuid import UUID

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import AdminClient

from producers.keys.cipher import SealedError, check_receipt, encode_sealed, open_record
from producers.keys.kafka_keys import KafkaKeyStore, create_keys_topic, keys_topic_exists
from producers.logs.adapters import register_opener
from producers.logs.base import (
    Appended,
    LifecycleRecord,
    StopFlag,
    Transaction,
    encode_records,
    prepare,
    sign_encoded,
    stamp_actor,
)
from producers.logs.kafka_client import (
    BATCH_HEADER_BYTES,
    DENIED_ERRORS,
    PRODUCER_MESSAGE_MAX_BYTES,
    KafkaAuthenticationError,
    KafkaHeaders,
    KafkaLogError,
    KafkaUnavailableError,
    check_login,
    client_conf,
    consume_ready,
    consumer_conf,
    ensure_topic,
    error_cause,
    follower_conf,
    producer_conf,
    watermarks,
)
from producers.logs.kafka_evidence import Head, KafkaEvidence
from producers.logs.lifecycle_topic import follow_lifecycle
from producers.logs.location import KAFKA_SCHEME, KafkaLocation, parse_kafka_location
from producers.logs.shared_producer import PRODUCERS
from producers.logs.topic_identity import LogIdentity, admin_for, partition_end, topic_id
from projector.authorship import AuthorshipError
from projector.lifecycle import Lifecycle
from projector.record_fold import (
    LogState,
    apply_record,
    check_records,
    empty_state,
    fold_record,
)
from projector.snapshot_store import RedisAccessError, SnapshotStore
from schemas.audit import BaseEvent, Document, Message
from schemas.codec import KIND_HEADER, KINDS, record_id, record_kind
from schemas.crypto.envelope import KEY_ID_HEX
from schemas.crypto.envelope import PREFIX as SEALED_PREFIX
from schemas.crypto.graph_content import content_slots
from schemas.crypto.subjects import CONTENT_FIELD
from schemas.errors import (
    AppendFailedError,
    AppendOutcomeUnknownError,
    CorruptLogError,
    EncryptionError,
    MemstreamError,
)
from schemas.evidence.note import NoteSigner
from schemas.evidence.proof import ConsistencyProof, EvidenceError, InclusionProof
from schemas.records import GraphEnvelope, Record

__all__ = [
    "KafkaLog",
    "APPEND_TIMEOUT_S",
    "READ_TIMEOUT_S",
    "APPEND_TIMEOUT_ENV",
    "READ_TIMEOUT_ENV",
]

log = logging.getLogger("memstream.producers.kafka")
T = TypeVar("T")
R = TypeVar("R")

# An append reports success or failure within this; reads and opening give up after
# READ_TIMEOUT_S without progress. Both can be set per log (KafkaLog's keywords, else
# MEMSTREAM_KAFKA_APPEND_TIMEOUT / MEMSTREAM_KAFKA_READ_TIMEOUT).
APPEND_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 15.0
# Shares of the append timeout: a batch not acknowledged after the first makes its log give
# up on its producer (`KafkaLog._give_up`); librdkafka's own message timeout, the second,
# is a backstop past the call's deadline, never reached while a log watches its batches
# (when it fires, librdkafka renumbers what it still holds: see the module's docstring).
_PURGE_SHARE = 0.6
# How long a log giving up on its producer serves the reports of what it dropped.
_GIVE_UP_REPORTS_S = 2.0
_MESSAGE_TIMEOUT_SHARE = 2.0

# The kind header's bytes, made once.
_KIND_BYTES = {kind: kind.encode() for kind in KINDS}


# Delivery errors after which librdkafka knows the record was never written: the broker
# refused its batch, or it was dropped (purged, or refused locally) before being sent.
# Any other failure (a message timed out after being sent, a fatal producer error) leaves
# the outcome unknown.
_NOT_WRITTEN = frozenset(
    {
        KafkaError._PURGE_QUEUE,
        KafkaError._INVALID_ARG,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.POLICY_VIOLATION,
        KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    }
)


class _Delivery:
    """The delivery reports of one produced batch, and what to do once all are in.

    Reports are served by whichever thread polls the producer (the background poller or
    a thread waiting in flush), so the count is kept under the log's `_dr_lock`. Every
    record gets exactly one outcome: its offset, or a failure (`failures[i]` = whether its
    outcome is unknown, and why); the first outcome given wins, so a batch abandoned at its
    deadline or with a failed producer ignores late reports.
    """

    __slots__ = (
        "log",
        "records",
        "offsets",
        "stored",
        "failures",
        "remaining",
        "future",
        "then",
        "track",
        "finished",
        "error",
        "appended",
        "producer",
        "purge_at",
        "deadline",
        "encoded",
        "errors_at_start",
    )

    def __init__(
        self,
        owner: KafkaLog,
        records: list[Record],
        future: Future[Any] | None,
        then: Callable[[list[Appended]], Any] | None,
        *,
        track: bool,
        producer: Producer,
        encoded: Sequence[bytes] = (),
    ) -> None:
        self.log = owner
        self.records = records
        # The bytes produced: what the log holds at each acknowledged offset, so the
        # owner folds its own records without fetching them back (see `_own`).
        self.encoded = encoded
        self.offsets: list[int | None] = [None] * len(records)
        self.stored: list[BaseEvent | None] = [None] * len(records)
        self.failures: dict[int, tuple[bool, str]] = {}
        self.remaining = len(records)
        self.future = future
        self.then = then
        # Own audit appends tracked as in flight / pending (not transact's records).
        self.track = track
        self.finished = False
        self.error: BaseException | None = None
        self.appended: list[Appended] = []
        self.producer = producer
        now = time.monotonic()
        self.purge_at = now + owner._append_timeout * _PURGE_SHARE
        self.deadline = now + owner._append_timeout
        self.errors_at_start = owner._client_errors

    def report(self, index: int, err: KafkaError | None, msg: KafkaMessage) -> None:
        with self.log._dr_lock:
            if self.remaining == 0 or index in self.failures or self.offsets[index] is not None:
                return
            if err is None:
                self.offsets[index] = msg.offset()
                if not self.log._producer_acked:
                    self.log._producer_acked = True
                    PRODUCERS.mark_acked(self.producer)
            elif err.code() == KafkaError._PURGE_QUEUE and (
                self.log._replicated or self.log._client_errors != self.errors_at_start
            ):
                # librdkafka puts the records of a request it lost (a connection failed, or
                # the partition's leader moved to another node) back in the queue to retry,
                # so a record purged from the queue may have been written already (the
                # broker wrote it, then died or lost leadership before acknowledging).
                self.failures[index] = (
                    True,
                    f"{self.log._reason(err, self)}; "
                    + (
                        "the log is replicated, so its leader may have moved and they may "
                        "have been sent before"
                        if self.log._replicated
                        else "a broker connection failed meanwhile, so they may have been "
                        "sent before"
                    ),
                )
            else:
                self.failures[index] = (err.code() not in _NOT_WRITTEN, self.log._reason(err, self))
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self._finish()

    def fail(self, indexes: range | list[int], unknown: bool, reason: str) -> None:
        """Give every record of `indexes` still without an outcome this failure."""
        with self.log._dr_lock:
            if self.remaining == 0:
                return
            for index in indexes:
                if index not in self.failures and self.offsets[index] is None:
                    self.failures[index] = (unknown, reason)
                    self.remaining -= 1
            last = self.remaining == 0
        if last:
            self._finish()

    def abandon(self, reason: str) -> None:
        """No report will come for what is left (a failed producer, the deadline, close):
        those records may have been sent, so their outcome is unknown."""
        self.fail(range(len(self.records)), True, reason)

    def _finish(self) -> None:
        self.log._keep_own(self)
        if self.track:
            self.log._delivered(self)
        if self.failures:
            self.error = _append_error(self.log, self.records, self.offsets, self.failures)
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


def _ids(ids: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(ids[:most])
    return shown if len(ids) <= most else f"{shown}, ... ({len(ids)} in all)"


def _append_error(
    owner: KafkaLog,
    records: list[Record],
    offsets: list[int | None],
    failures: dict[int, tuple[bool, str]],
) -> AppendFailedError:
    """What became of each record of a batch some of which failed, in one error."""
    unknown = tuple(record_id(records[i]) for i in sorted(failures) if failures[i][0])
    lost = tuple(record_id(records[i]) for i in sorted(failures) if not failures[i][0])
    landed = tuple(
        (record_id(r), seq) for r, seq in zip(records, offsets, strict=True) if seq is not None
    )
    causes = dict.fromkeys(failures[i][1] for i in sorted(failures))
    parts = []
    if unknown:
        parts.append(
            f"{len(unknown)} record(s) with outcome unknown: they may have reached the broker "
            "unacknowledged, so the log may hold them or come to hold them; look for "
            f"{_ids(unknown)} in the log before appending them again"
        )
    if lost:
        parts.append(f"{len(lost)} record(s) not appended (never written): {_ids(lost)}")
    if landed:
        seqs = [seq for _, seq in landed]
        parts.append(f"{len(landed)} record(s) appended, at seqs {min(seqs)}-{max(seqs)}")
    kind = AppendOutcomeUnknownError if unknown else AppendFailedError
    return kind(
        f"append to log {owner.topic} failed: {'; '.join(causes)}: {'; '.join(parts)}",
        not_appended=lost,
        unknown=unknown,
        appended=landed,
    )


def _fatal(exc: BaseException) -> KafkaError | None:
    """The fatal librdkafka error behind `exc`, if any (confluent-kafka raises a fatal error
    from poll/flush; a delivery callback running after it in the same call then fails with
    a SystemError chained to it)."""
    while exc is not None:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            error: KafkaError = exc.args[0]
            if error.fatal() or error.code() == KafkaError._FATAL:
                return error
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def _fatal_cause(producer: Producer) -> KafkaError | None:
    """The fatal error behind a generic "Local: Fatal error", which `produce()` raises once
    the producer has failed for good (a broker that refused it an id, say): poll raises
    the error itself, with its cause, once it serves the event (up to 0.1 s)."""
    try:
        producer.poll(0.1)
    except Exception as exc:
        cause = _fatal(exc)
        if cause is not None and cause.code() != KafkaError._FATAL:
            return cause
    return None


_MAX_GAPS = 100
# Own acknowledged records kept (their bytes) for folding without a fetch, at most this
# many bytes: a process that only appends and never reads does not grow without bound;
# past it, its records are fetched back as any other (the slower path, never a wrong one).
_OWN_MAX_BYTES = 8 * 1024 * 1024
APPEND_TIMEOUT_ENV = "MEMSTREAM_KAFKA_APPEND_TIMEOUT"
READ_TIMEOUT_ENV = "MEMSTREAM_KAFKA_READ_TIMEOUT"


def _seconds(given: float | None, variable: str, default: float) -> float:
    if given is None:
        text = os.environ.get(variable, "").strip()
        if not text:
            return default
        try:
            given = float(text)
        except ValueError:
            raise ValueError(f"{variable}={text!r}: expected a number of seconds") from None
    if not given > 0:
        raise ValueError(f"a Kafka log timeout must be a positive number of seconds, not {given}")
    return float(given)


def _seek(consumer: Consumer, topic: str, offset: int) -> None:
    """Move an assigned consumer to `offset`, dropping what it fetched beyond."""
    tp = TopicPartition(topic, 0, offset)
    try:
        try:
            consumer.seek(tp)
        except KafkaException:  # not fetching yet: assigning starts over at offset as well
            consumer.assign([tp])
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"log {topic}: cannot read from offset {offset}: {error_cause(exc)}"
        ) from None


# An erase or a sweep holds the erasure lock at most this long (it expires by itself).
_ERASURE_LOCK_MS = 60_000


# After this many speculative folds in a row guessed wrong seqs (others write between),
# skip this many appends before guessing again.
_SPEC_MISSES = 4
_SPEC_SKIP = 64


@dataclass(frozen=True)
class _Guess:
    """A batch folded before its acknowledgement (`KafkaLog._speculate`)."""

    base: LogState
    seqs: list[int]
    state: LogState
    lifecycle: dict[int, list[Lifecycle]]
    errors: dict[int, BaseException]


class KafkaLog:
    """A log on a Kafka topic, folded into a `LogState` (hydrated from Redis if it can).

    `append_timeout`: an append answers within it (see the module's docstring);
    `read_timeout`: opening and reads give up after it without progress. Unset, they come
    from ``MEMSTREAM_KAFKA_APPEND_TIMEOUT`` / ``MEMSTREAM_KAFKA_READ_TIMEOUT`` (seconds),
    else `APPEND_TIMEOUT_S` / `READ_TIMEOUT_S`.
    """

    def __init__(
        self,
        location: KafkaLocation,
        *,
        hydrate: bool = True,
        create: bool = True,
        append_timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> None:
        self.kafka_location = location
        self.location = str(location)
        self.topic = location.topic
        self._tp = TopicPartition(self.topic, 0)
        self._agent: NoteSigner | None = None
        self._first_read = False
        self._append_timeout = _seconds(append_timeout, APPEND_TIMEOUT_ENV, APPEND_TIMEOUT_S)
        self._read_timeout = _seconds(read_timeout, READ_TIMEOUT_ENV, READ_TIMEOUT_S)
        failed: MemstreamError | None = None
        # Whether the log's partition has several replicas, so that its leader can move.
        self._replicated = False
        # An encrypted log's key store (the topic LOG.keys; `producers.keys.kafka_keys`).
        self.keys: KafkaKeyStore | None = None
        self._encrypted = False
        try:
            self._replicated = self._ensure_topics(create) > 1
            if self._encrypted:
                self.keys = KafkaKeyStore(location.bootstrap, self.topic, self._read_timeout)
        except MemstreamError as exc:
            failed = exc
        if failed is not None:
            # Without the frames that hold the admin client, which would otherwise go on
            # reconnecting to an unreachable broker for as long as the error is kept.
            raise failed.with_traceback(None)
        self._lock = threading.RLock()
        self._dr_lock = threading.Lock()
        self._last_error: str | None = None  # the producer's last broker error, for messages
        self._client_errors = 0  # how many the producer reported so far
        # Whether the current producer had a record acknowledged: until then a fatal
        # authorization error (no producer id granted) means nothing of it was ever sent.
        self._producer_acked = False
        self._producer: Producer | None = self._new_producer()
        # The log's reader of others' records, made at the first read that needs one
        # (`_follower`); then assigned for the log's life, it prefetches (an idle log is
        # asked rarely). A process that only appends never fetches its own records back.
        self._consumer: Consumer | None = None
        # Watermarks are asked of a consumer that never fetches: the broker answers a
        # connection's requests in order, so asked of `_consumer` they would wait behind
        # its pending fetch (up to fetch.wait.max.ms) on every read. Made at the first
        # read (`_meta_consumer`): a process that only appends needs none.
        self._meta: Consumer | None = None
        self._meta_lock = threading.Lock()
        # Own acknowledged records by seq: the bytes the log holds there (`_keep_own`),
        # folded in place of a fetch when the state reaches them. Under `_dr_lock`.
        self._own: dict[int, bytes] = {}
        self._own_bytes = 0
        self._lost_position = False  # a failed read could not rewind: rewind first next time
        # Speculative folds (`_speculate`): misses in a row, appends left to skip.
        self._spec_missed = 0
        self._spec_skip = 0
        self._state = self._hydrate() if hydrate else empty_state()
        # Own audit appends acknowledged but not folded yet (checked against, see `append`),
        # and those produced but not acknowledged yet; both guarded by `_dr_lock`.
        self._pending: dict[UUID, BaseEvent] = {}
        self._inflight: dict[UUID | str, Record] = {}
        self._outstanding = 0  # pipelined batches not fully acknowledged
        self._open: deque[_Delivery] = deque()  # batches produced, oldest first
        self._poller: threading.Thread | None = None
        self._closed = False
        self._evidence: KafkaEvidence | None = None  # made at the first proof asked
        self._evidence_lock = threading.Lock()

    def _ensure_topics(self, create: bool) -> int:
        """Create or check the log's topics; the number of replicas of the log's partition."""
        location = self.kafka_location
        errors: list[KafkaError] = []  # the client's own errors, e.g. a refused connection
        try:
            conf = {
                **client_conf(location.bootstrap),
                "error_cb": errors.append,
                # Its reconnect attempts are not logged one by one: a failure names the last.
                "log_level": 0,
            }
            admin = AdminClient(conf)
        except (KafkaException, ValueError) as exc:
            raise KafkaUnavailableError(
                f"log {self.topic}: cannot connect to {location.bootstrap}: {error_cause(exc)}"
            ) from None
        opening = time.monotonic()
        try:
            # A refused login fails here at once, not after the read timeout.
            check_login(admin, conf, self.topic, errors, self._read_timeout)
            replicas = ensure_topic(
                admin,
                self.topic,
                location.replication_factor,
                create=create,
                # One read timeout for the whole open, the login check included.
                timeout=max(0.5, self._read_timeout - (time.monotonic() - opening)),
                bootstrap=location.bootstrap,
                min_message_bytes=(
                    PRODUCER_MESSAGE_MAX_BYTES + BATCH_HEADER_BYTES if create else None
                ),
            )
            if create:  # a reader finds the lifecycle topic once a writer or projector made it
                ensure_topic(
                    admin,
                    location.lifecycle_topic,
                    location.replication_factor,
                    timeout=max(0.1, self._read_timeout - (time.monotonic() - opening)),
                    bootstrap=location.bootstrap,
                )
            self._encrypted = keys_topic_exists(
                admin, self.topic, max(0.5, self._read_timeout - (time.monotonic() - opening))
            )
        except KafkaAuthenticationError:
            raise
        except KafkaUnavailableError as exc:
            try:
                admin.poll(0)  # serves error_cb
            except Exception:  # only a better message is at stake
                pass
            if not errors:
                raise
            raise KafkaUnavailableError(
                f"{exc} (the client's last error: {errors[-1].str()})"
            ) from None
        return replicas

    def _hydrate(self) -> LogState:
        if self.keys is not None:
            # The projector folds an encrypted log as stored (sealed content, no plaintext
            # in Redis): a reader that serves plaintext folds the log itself.
            return empty_state()
        try:
            store = SnapshotStore.connect(self.kafka_location)
            # Only a snapshot of this topic (its id now), within the partition's end (asked
            # after the snapshot's position was read), is this log's.
            tid = topic_id(admin_for(self.kafka_location.bootstrap), self.topic)
            # Asked of the process's admin client: a log opened only to append makes no
            # watermark consumer.
            store.identify = lambda: LogIdentity(tid, self._end_once())
            loaded = store.load()
        except Exception as exc:  # a cache: without it, the log is folded from seq 0
            log.warning("%s: no snapshot from Redis (%s); folding the log", self.topic, exc)
            return empty_state()
        return loaded if loaded is not None else empty_state()

    # --- clients --------------------------------------------------------------------------

    def _new_producer(self) -> Producer:
        """The process's producer for this log's cluster and settings, shared with the
        other logs that append with the same (`producers.logs.shared_producer`)."""
        conf = producer_conf(
            self.kafka_location.bootstrap,
            **{
                "message.timeout.ms": int(self._append_timeout * _MESSAGE_TIMEOUT_SHARE * 1000),
                # One request in flight: no later request to be refused as out of order
                # during a leader change, which librdkafka answers with an epoch bump
                # that may write records twice (the module's docstring).
                "max.in.flight.requests.per.connection": 1,
                "message.max.bytes": PRODUCER_MESSAGE_MAX_BYTES,
            },
        )
        try:
            return PRODUCERS.acquire(conf, self._on_client_error)
        except KafkaException as exc:
            raise KafkaUnavailableError(
                f"log {self.topic}: cannot create a producer: {error_cause(exc)}"
            ) from None

    def _new_consumer(self, topic: str, *, follow: bool = False) -> Consumer:
        """A consumer of this log's cluster; `follow`: one that stays assigned (see
        `follower_conf`)."""
        make_conf = follower_conf if follow else consumer_conf
        try:
            return Consumer(make_conf(self.kafka_location.bootstrap))
        except KafkaException as exc:
            raise KafkaUnavailableError(
                f"log {topic}: cannot create a consumer: {error_cause(exc)}"
            ) from None

    def _on_client_error(self, error: KafkaError) -> None:
        # Non-fatal client errors (librdkafka retries them): kept to explain a failure, and
        # counted, since after one a purged record may have been sent before (see _Delivery).
        self._last_error = str(error.str())
        self._client_errors += 1

    def _reason(self, err: KafkaError, delivery: _Delivery | None = None) -> str:
        """Why a record (of `delivery`) failed, in words; with the broker's last error
        when it helps."""
        code = err.code()
        if (
            code == KafkaError._PURGE_QUEUE
            and delivery is not None
            and time.monotonic() < delivery.purge_at
        ):
            # Before its own deadline: dropped with the queue of the producer it shares.
            reason = (
                "dropped from this process's queue before being sent, when another log "
                "sharing its Kafka producer gave up on its own records or the producer failed"
            )
        elif code == KafkaError._PURGE_QUEUE:
            reason = (
                f"not acknowledged within {self._append_timeout * _PURGE_SHARE:g} s, so the "
                "records still queued in this process were dropped before being sent"
            )
        elif code == KafkaError._PURGE_INFLIGHT:
            reason = (
                f"not acknowledged within {self._append_timeout * _PURGE_SHARE:g} s, so the "
                "Kafka producer was given up while the records were in flight (the broker "
                "may still write them)"
            )
        elif code == KafkaError._MSG_TIMED_OUT:
            reason = (
                f"not acknowledged within {self._append_timeout * _MESSAGE_TIMEOUT_SHARE:g} s "
                "of being produced"
            )
        elif code in DENIED_ERRORS:
            return (
                f"not authorized to write log {self.topic}: the broker's ACLs do not grant it "
                f"to this principal ({err.name()}; `memstream acl grant` grants a log)"
            )
        else:
            return str(err.str())
        last = self._last_error
        return f"{reason} (the broker's last error: {last})" if last else reason

    # --- reading --------------------------------------------------------------------------

    def _follower(self, seq: int) -> Consumer:
        """The log's consumer, made and put at `seq` (the state's next) if there is none."""
        consumer = self._consumer
        if consumer is None:
            consumer = self._new_consumer(self.topic, follow=True)
            try:
                consumer.assign([TopicPartition(self.topic, 0, seq)])
            except KafkaException as exc:
                consumer.close()
                raise KafkaUnavailableError(
                    f"log {self.topic}: cannot read from seq {seq}: {error_cause(exc)}"
                ) from None
            self._consumer = consumer
        return consumer

    def _rewind(self, seq: int) -> None:
        """After an error or a gap: back to `seq`, the state's next, so nothing is skipped
        (a log without its consumer yet starts it there)."""
        if self._consumer is not None:
            _seek(self._consumer, self.topic, seq)

    def _watermarks(self, consumer: Consumer, topic: str, doing: str) -> tuple[int, int]:
        try:
            low, high = watermarks(consumer, topic, self._read_timeout)
        except KafkaException as exc:
            raise KafkaUnavailableError(
                f"log {topic}: {doing}: no answer from the broker "
                f"({self.kafka_location.bootstrap}) within {self._read_timeout:g} s: "
                f"{error_cause(exc)}"
            ) from None
        return int(low), int(high)

    def _meta_consumer(self) -> Consumer:
        """The consumer watermarks are asked of, made at the first call."""
        meta = self._meta
        if meta is None:
            with self._meta_lock:
                if self._closed:
                    raise KafkaLogError(f"log {self.topic}: the log is closed")
                meta = self._meta
                if meta is None:
                    meta = self._meta = self._new_consumer(self.topic)
        return meta

    def _known_end(self) -> int:
        """The log's end as this reader knows it without a round trip: the high watermark
        its follower had with its last fetch, and at least its state's end. The follower
        goes on fetching while assigned, and a fetch waiting at the log's end is answered
        as soon as a record is committed there, so this knows of every record committed
        about a round trip before. The first call starts the follower and asks the broker.
        Under `_lock`."""
        consumer = self._consumer
        next_seq = self._state.next_seq
        if consumer is None:
            end = self.end_offset()
            self._follower(next_seq)
            return end
        tp = TopicPartition(self.topic, 0)
        try:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            position = consumer.position([tp])[0].offset
        except KafkaException:
            return self.end_offset()
        if high < 0:  # no fetch answered yet
            return self.end_offset()
        if high <= next_seq and 0 <= position < next_seq:
            # Only this process's own records since: the follower skips past them, so its
            # queue never fills with records folded already (a full queue stops fetching,
            # and with it the watermark this relies on). A seek refused now is tried at the
            # next recall; this one's end is known either way.
            try:
                self._rewind(next_seq)
            except KafkaLogError:
                log.debug("%s: the follower did not move to seq %d", self.topic, next_seq)
        return max(int(high), next_seq)

    def end_offset(self) -> int:
        """The partition's high watermark: the seq the next record will get."""
        meta = self._meta_consumer()
        return self._watermarks(meta, self.topic, "cannot find the log's end")[1]

    def _end_once(self) -> int:
        """`end_offset`, asked of the process's shared admin client (for a question asked
        once, at an open or a first append: not worth a consumer of this log's own)."""
        try:
            return partition_end(
                admin_for(self.kafka_location.bootstrap), self.topic, self._read_timeout
            )
        except MemstreamError as exc:
            raise KafkaUnavailableError(
                f"log {self.topic}: cannot find the log's end (broker "
                f"{self.kafka_location.bootstrap}, waited up to {self._read_timeout:g} s): {exc}"
            ) from None

    def head(self) -> int | None:
        """The seq of the log's last record, folded yet or not (None: an empty log): one
        round trip to the broker (the partition's high watermark)."""
        end = self.end_offset()
        return end - 1 if end > 0 else None

    def _gap(self, topic: str, expected: int, got: int) -> None:
        """A record past `expected` came first: raise if `expected` is gone from the topic
        (records deleted under the log); else the caller goes back to `expected`."""
        low, _ = self._watermarks(self._meta_consumer(), topic, f"checking seq {expected}")
        if low > expected:
            raise CorruptLogError(
                f"log {topic}: seq {expected} is no longer in the topic (it now starts at "
                f"seq {low}): records were deleted under the log; a reader never skips a seq"
            )
        log.warning(
            "%s: seq %d came where %d was due; reading again from %d",
            topic,
            got,
            expected,
            expected,
        )

    def state(self, min_seq: int | None = None) -> LogState:
        with self._lock:
            last = self._state.last_seq
            if min_seq is not None and last is not None and last >= min_seq:
                return self._state
            if self._closed:
                raise KafkaLogError(f"log {self.topic}: the log is closed")
            self._fold_until(self.end_offset())
            return self._state

    # --- writing --------------------------------------------------------------------------

    def _sender(self) -> Producer:
        """The producer to send with, a new one if the last failed. Under `_lock`."""
        if self._closed:
            raise KafkaLogError(f"log {self.topic}: the log is closed")
        producer = self._producer
        if producer is None:
            producer = self._producer = self._new_producer()
            self._producer_acked = False
            log.warning("%s: a new Kafka producer replaces the one that failed", self.topic)
        return producer

    def _start(
        self,
        records: list[Record],
        encoded: Sequence[bytes],
        future: Future[Any] | None,
        then: Callable[..., Any] | None,
        *,
        track: bool,
    ) -> _Delivery:
        """Produce a checked, encoded batch; its delivery resolves in every case (acked,
        failed, or abandoned at its deadline). Under `_lock`."""
        producer = self._sender()
        delivery = _Delivery(
            self, records, future, then, track=track, producer=producer, encoded=encoded
        )
        with self._dr_lock:
            if track:
                for record in records:
                    self._inflight[record.id] = record
                self._outstanding += 1
            self._open.append(delivery)
        self._send(delivery, encoded)
        return delivery

    def _send(self, delivery: _Delivery, encoded: Sequence[bytes]) -> None:
        producer = delivery.producer
        produce = producer.produce
        topic = self.topic
        n = len(delivery.records)
        for i, (record, data) in enumerate(zip(delivery.records, encoded, strict=True)):
            headers: KafkaHeaders = [(KIND_HEADER, _KIND_BYTES[record_kind(record)])]
            while True:
                try:
                    produce(
                        topic,
                        data,
                        partition=0,
                        headers=headers,
                        on_delivery=partial(delivery.report, i),
                    )
                    break
                except BufferError:  # local queue full: let deliveries drain, for a while
                    if time.monotonic() > delivery.purge_at:
                        delivery.fail(range(i, n), False, "the producer's queue stayed full")
                        return
                    self._serve(producer, 0.05, flush=False)
                    self._watch(time.monotonic())
                    if producer is not self._producer:  # given up meanwhile: nothing sent
                        delivery.fail(range(i, n), False, "the Kafka producer was given up")
                        return
                except Exception as exc:  # refused before being queued: never sent
                    if _fatal(exc) is not None:
                        self._producer_failed(producer, exc)
                    delivery.fail(range(i, n), False, error_cause(exc))
                    return

    def _serve(self, producer: Producer, timeout: float, *, flush: bool = True) -> None:
        """Serve `producer`'s delivery reports (flush sends at once, ignoring linger.ms)."""
        try:
            if flush:
                producer.flush(timeout)
            else:
                producer.poll(timeout)
        except Exception as exc:  # a fatal producer error (see `_fatal`), or a callback's
            self._producer_failed(producer, exc)

    def _producer_failed(self, producer: Producer, exc: BaseException) -> None:
        """Retire a producer that raised: what it held gets an unknown outcome, and the
        next append creates a new producer (a fatal librdkafka error is for good)."""
        error = _fatal(exc)
        if error is not None and error.code() == KafkaError._FATAL:
            error = _fatal_cause(producer) or error
        with self._dr_lock:
            if producer is not self._producer:
                return  # retired already
            self._producer = None
            doomed = [d for d in self._open if d.producer is producer]
        PRODUCERS.retire(producer)  # no log is handed it again
        if error is None:
            log.error("%s: the Kafka producer failed; replacing it", self.topic, exc_info=exc)
        else:
            log.error(
                "%s: fatal Kafka producer error, replacing the producer: %s",
                self.topic,
                error.str(),
            )
        reason = f"the Kafka producer failed ({error_cause(exc) if error is None else error.str()})"
        if (
            error is not None
            and error.code() in DENIED_ERRORS
            and not self._producer_acked
            and not PRODUCERS.acked(producer)
        ):
            # The broker refused the producer its id: no record of it was ever sent.
            reason = self._reason(error)
            for delivery in doomed:
                delivery.fail(range(len(delivery.records)), False, reason)
        for delivery in doomed:
            delivery.abandon(reason)
        try:
            producer.purge(in_queue=True, in_flight=True, blocking=False)
        except Exception:  # a failed producer may refuse that too; it is dropped anyway
            log.debug("%s: purging the failed producer", self.topic, exc_info=True)
        PRODUCERS.release(producer, self._on_client_error)

    def _watch(self, now: float) -> None:
        """Deadlines of the batches in flight, oldest first: after `purge_at` the records
        still queued are dropped (librdkafka then reports them never sent); after
        `deadline` a batch without every report is abandoned (outcome unknown)."""
        with self._dr_lock:
            pending = self._open
            while pending and pending[0].remaining == 0:
                pending.popleft()
            if not pending or now < pending[0].purge_at:
                return
            oldest = pending[0]
            overdue = [d for d in pending if now >= d.deadline]
        producer = oldest.producer
        if producer is self._producer:
            self._give_up(producer)
        for delivery in overdue:
            delivery.abandon(
                f"not acknowledged within {self._append_timeout:g} s (no delivery report)"
            )

    def _give_up(self, producer: Producer) -> None:
        """A batch of `producer` was not acknowledged in time: drop everything it holds,
        queued and in flight, and never send with it again; the next append makes a new
        one. Dropped records get their outcome from librdkafka's reports (served here, for
        a while), the rest an unknown one. A producer that went on after its queue was
        purged would bump its epoch over the gap and renumber records it had sent already,
        which the broker would then write a second time (the module's docstring). One kept
        after a purge of everything would renumber only new records, but it waits out the
        requests it had in flight before it sends again: in two runs of the failover test
        so, 2,614 and 1,756 records got through against 4,857-9,613 in three runs with a
        new producer."""
        with self._dr_lock:
            if producer is not self._producer:
                return  # given up or retired already
            self._producer = None
            doomed = [d for d in self._open if d.producer is producer and d.remaining]
        PRODUCERS.retire(producer)  # no log is handed it again
        log.warning(
            "%s: a batch was not acknowledged within %g s; dropping what the Kafka producer "
            "holds and replacing it",
            self.topic,
            self._append_timeout * _PURGE_SHARE,
        )
        try:
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            until = time.monotonic() + _GIVE_UP_REPORTS_S
            while any(d.remaining for d in doomed) and time.monotonic() < until:
                producer.poll(0.05)
        except Exception:  # a producer refusing that too: its records' outcome is unknown
            log.debug("%s: purging the producer given up", self.topic, exc_info=True)
        for delivery in doomed:
            delivery.abandon(
                f"not acknowledged within {self._append_timeout * _PURGE_SHARE:g} s, and no "
                "report came after the Kafka producer was given up"
            )
        PRODUCERS.release(producer, self._on_client_error)

    def _await(self, delivery: _Delivery) -> None:
        """Wait in this thread for a delivery, flushing so the batch is sent at once."""
        while not delivery.finished:
            # Short flushes: other threads' appends, and other logs' sharing the producer,
            # may keep its queue from ever emptying; a flush returns only once it is empty
            # or its time is up, so its time bounds how late this batch's report is seen.
            self._serve(delivery.producer, 0.002)
            self._watch(time.monotonic())

    def _finish_own(self, producer: Producer) -> None:
        """Until this log's batches in flight are acknowledged or failed, or its append
        timeout passed (others' records in the shared producer are theirs to wait for)."""
        deadline = time.monotonic() + self._append_timeout
        while time.monotonic() < deadline:
            with self._dr_lock:
                if not any(d.remaining for d in self._open):
                    return
            self._serve(producer, 0.05)
            self._watch(time.monotonic())

    def _wait_inflight(self) -> None:
        """Until every pipelined append of this process is acknowledged or failed (each
        batch resolves by its deadline, so this ends)."""
        while self._outstanding:
            producer = self._producer
            if producer is not None:
                self._serve(producer, 0.05)
            else:
                time.sleep(0.01)
            self._watch(time.monotonic())

    def _delivered(self, delivery: _Delivery) -> None:
        """Every report of a batch is in: own appends move from in flight to pending."""
        last = -1 if self._state.last_seq is None else self._state.last_seq
        with self._dr_lock:
            inflight, pending = self._inflight, self._pending
            for i, record in enumerate(delivery.records):
                if delivery.track:
                    inflight.pop(record.id, None)
                seq = delivery.offsets[i]
                # Tracked batches hold audit events only (`submit` and `append` check).
                if seq is not None and delivery.track and isinstance(record, BaseEvent):
                    stored = record.with_seq(seq)
                    delivery.stored[i] = stored
                    if seq > last:
                        pending[stored.id] = stored
            if delivery.track:
                self._outstanding -= 1

    def transact(
        self, build: Transaction[T], *, agent: NoteSigner | None = None, ask_end: bool = True
    ) -> tuple[list[Appended], T]:
        with self._lock:
            # Own pipelined appends first, so the state read below includes them.
            self._wait_inflight()
            self._fold_until(self.end_offset() if ask_end else self._known_end())
            agent = agent or self._agent
            erasable = self.keys is not None
            records, encoded, value = prepare(
                self._state,
                build,
                erasable=erasable,
                agent=agent,
                seal=self._sealed if erasable else None,
            )
            # sealed, then signed: the signature covers the stored (sealed) bytes
            encoded = sign_encoded(agent, self._state, records, encoded)
            return self._publish_and_fold(records, encoded), value

    def _publish_and_fold(self, records: list[Record], encoded: list[bytes]) -> list[Appended]:
        if not records:
            return []
        delivery = self._start(records, encoded, None, None, track=False)
        guess = self._speculate(delivery, own=0)
        self._await(delivery)
        if delivery.error is not None:
            raise delivery.error
        offsets = cast(list[int], delivery.offsets)
        if guess is not None and self._adopt(guess, delivery):
            lifecycle, errors = guess.lifecycle, guess.errors
        else:
            watch = dict(zip(offsets, records, strict=True))
            lifecycle = {}
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

    def _speculate(self, delivery: _Delivery, own: int) -> _Guess | None:
        """The state as it will be if the batch just produced lands right after it (no
        other record before it), folded while the broker acknowledges. Under `_lock`.

        The batch is sent at once (not after ``linger.ms``), then folded from its bytes at
        the seqs it gets if nothing comes between: exactly what `_fold_until` would fold
        there. `_adopt` keeps it only if the delivery reports give those very seqs and
        nothing was folded meanwhile; otherwise it is dropped and the records are folded
        as ever. None when the seqs cannot be guessed (own records acknowledged and not
        folded, or other own batches in flight: `own` is how many are this one), or after
        recent guesses missed (others write between: not worth the work)."""
        if self._spec_skip > 0:
            self._spec_skip -= 1
            return None
        with self._dr_lock:
            if self._own or self._outstanding != own or not delivery.encoded:
                return None
        self._serve(delivery.producer, 0)  # sent now: the fold below overlaps the trip
        base = state = self._state
        watch = dict(
            zip(
                range(base.next_seq, base.next_seq + len(delivery.records)),
                delivery.records,
                strict=True,
            )
        )
        lifecycle: dict[int, list[Lifecycle]] = {}
        errors: dict[int, BaseException] = {}
        try:
            for seq, data in zip(watch, delivery.encoded, strict=True):
                opener = None if self.keys is None else self._own_opener(watch[seq])
                state = self._fold_one(state, seq, data, watch, lifecycle, errors, opener)
        except Exception:  # e.g. a key store that did not answer: fold them later, as ever
            log.debug("%s: no speculative fold", self.topic, exc_info=True)
            return None
        return _Guess(base, list(watch), state, lifecycle, errors)

    def _adopt(self, guess: _Guess, delivery: _Delivery) -> bool:
        """Take `guess` as the state if it folded the batch at the seqs it got, on the
        state still held (see `_speculate`). Under `_lock`."""
        if self._state is not guess.base or delivery.offsets != guess.seqs:
            self._spec_missed += 1
            if self._spec_missed >= _SPEC_MISSES:
                self._spec_missed = 0
                self._spec_skip = _SPEC_SKIP
            return False
        self._spec_missed = 0
        self._state = guess.state
        self._prune_pending()
        return True

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

        Never accepts a gap: a record past the state's next seq sends the consumer back to
        it (or raises `CorruptLogError` if that seq was deleted), and so does any error in
        the middle of a batch, so the next read starts where the state ends. Raises
        `KafkaUnavailableError` once nothing arrived for `read_timeout` seconds.
        """
        watch = watch or {}
        lifecycle = {} if lifecycle is None else lifecycle
        errors: dict[int, BaseException] = {}
        state = self._state
        consumer: Consumer | None = None
        if self._lost_position:  # the last read failed and could not rewind then
            self._rewind(state.next_seq)
            self._lost_position = False
        waited_since = time.monotonic()
        try:
            while state.next_seq < end:
                # Own records next: their bytes are what the log holds at their seqs.
                while state.next_seq < end and (own := self._own_bytes_at(state.next_seq)):
                    state = self._fold_one(state, state.next_seq, own, watch, lifecycle, errors)
                    waited_since = time.monotonic()
                if state.next_seq >= end:
                    break
                if consumer is None:
                    consumer = self._follower(state.next_seq)
                try:
                    messages = consume_ready(consumer, 5000, 0.2)
                except KafkaException as exc:
                    raise KafkaUnavailableError(
                        f"log {self.topic}: reading seq {state.next_seq}: {error_cause(exc)}"
                    ) from None
                before_batch = state.next_seq
                for message in messages:
                    if message.error() is not None:
                        raise KafkaUnavailableError(
                            f"log {self.topic}: reading seq {state.next_seq}: {message.error()}"
                        )
                    # A consumed message that is not an error has an offset (the stubs
                    # type it optional for every message).
                    seq = cast(int, message.offset())
                    if seq != state.next_seq:
                        if seq < state.next_seq:  # folded already
                            continue
                        self._gap(self.topic, state.next_seq, seq)
                        self._rewind(state.next_seq)
                        break
                    # A null value (None) is folded as a refused record: the fold is total.
                    value = cast(bytes, message.value())
                    state = self._fold_one(state, seq, value, watch, lifecycle, errors)
                if state.next_seq > before_batch:
                    waited_since = time.monotonic()
                elif time.monotonic() - waited_since > self._read_timeout:
                    raise self._stalled(state.next_seq, end)
        except BaseException:
            # The consumer has fetched past the state: back to its next seq, so that the
            # rest of the batch is read again next time rather than lost to this reader.
            try:
                self._rewind(state.next_seq)
            except Exception:  # the next read rewinds first
                self._lost_position = True
                log.warning(
                    "%s: cannot rewind to seq %d", self.topic, state.next_seq, exc_info=True
                )
            raise
        finally:
            self._state = state
            self._prune_pending()
        return errors

    def _fold_one(
        self,
        state: LogState,
        seq: int,
        value: bytes,
        watch: dict[int, Record],
        lifecycle: dict[int, list[Lifecycle]],
        errors: dict[int, BaseException],
        opener: Callable[[Record], Record] | None = None,
    ) -> LogState:
        """`state` with the record at `seq` folded (see `_fold_until` for `watch`;
        `opener`: `_opened`, unless the caller knows better)."""
        before = state
        keys = self.keys
        if keys is None:
            state, events = fold_record(state, seq, value)
        else:
            opener = self._opened if opener is None else opener
            state, events = fold_record(state, seq, value, erasable=True, opener=opener)
        if seq in watch:
            lifecycle[seq] = events
            if len(state.rejections) > len(before.rejections):
                refused = state.rejections[-1]
                if refused.error == "AuthorshipError":  # its own reason: no other is truer
                    errors[seq] = AuthorshipError(refused.reason)
                    return state
                try:
                    apply_record(before, seq, watch[seq], erasable=keys is not None)
                    errors[seq] = KafkaLogError(f"seq {seq}: refused by the fold")
                except Exception as exc:
                    errors[seq] = exc
        return state

    def _own_bytes_at(self, seq: int) -> bytes | None:
        """The bytes of this process's own acknowledged record at `seq`, if kept."""
        if not self._own:
            return None
        with self._dr_lock:
            data = self._own.pop(seq, None)
            if data is not None:
                self._own_bytes -= len(data)
            return data

    def _keep_own(self, delivery: _Delivery) -> None:
        """Keep the bytes of a batch's acknowledged records by seq, within `_OWN_MAX_BYTES`
        (called once, when every report of the batch is in)."""
        encoded = delivery.encoded
        if not encoded:
            return
        with self._dr_lock:
            own = self._own
            for seq, data in zip(delivery.offsets, encoded, strict=True):
                if seq is None or self._own_bytes + len(data) > _OWN_MAX_BYTES:
                    continue
                own[seq] = data
                self._own_bytes += len(data)

    def _stalled(self, seq: int, end: int) -> KafkaUnavailableError:
        last = f"; its last error: {self._last_error}" if self._last_error else ""
        return KafkaUnavailableError(
            f"log {self.topic}: seq {seq} did not arrive within {self._read_timeout:g} s "
            f"(the log ends at seq {end - 1}; broker {self.kafka_location.bootstrap}{last})"
        )

    def _prune_pending(self) -> None:
        own = self._own
        if own:
            # Kept records folded already (fetched, as another process's records are);
            # batches are acknowledged in seq order, so the first kept seq tells if any is.
            next_seq = self._state.next_seq
            with self._dr_lock:
                if own and next(iter(own)) < next_seq:
                    for seq in [s for s in own if s < next_seq]:
                        self._own_bytes -= len(own.pop(seq))
        if self._pending:
            last = -1 if self._state.last_seq is None else self._state.last_seq
            with self._dr_lock:
                self._pending = {k: e for k, e in self._pending.items() if e.seq > last}  # type: ignore[operator]

    @property
    def _signer_name(self) -> str | None:
        return None if self._agent is None else self._agent.name

    @property
    def _signer_key(self) -> bytes | None:
        return None if self._agent is None else self._agent.verifier.key_id

    def use_agent_key(self, agent: NoteSigner | None) -> None:
        """Sign every record this producer appends with `agent` (provable authorship)."""
        with self._lock:
            self._agent = agent

    def _check_state(self, records: list[Record], erasable: bool) -> None:
        """`check_records` against this log's state and pending appends, as this writer
        (its agent key) would append them. Under `_lock`."""
        check_records(
            self._state,
            records,
            self._pending,
            erasable=erasable,
            signer=self._signer_name,
            signer_key=self._signer_key,
        )

    def _check(self, records: list[Record]) -> None:
        """Raise what the fold would refuse (see the module's docstring). Under `_lock`."""
        if not self._first_read:
            # Whether the log requires signatures is decided by its first record: read at
            # least that far once, before this writer's first check (one round trip).
            if self._state.last_seq is None:
                # Asked of the process's admin client: a log only appended to makes no
                # watermark consumer.
                self._fold_until(self._end_once())
            self._first_read = True
        inflight = self._inflight
        erasable = self.keys is not None
        if not inflight or not any(r.id in inflight for r in records):
            try:
                self._check_state(records, erasable)
                return
            except Exception:
                pass
        # A duplicate or a target among own appends in flight, or one another agent wrote:
        # wait for own acknowledgements, then read to the log's end, checking after each.
        if self._outstanding:
            self._wait_inflight()
            try:
                self._check_state(records, erasable)
                return
            except Exception:
                pass
        self._fold_until(self.end_offset())
        self._check_state(records, erasable)

    def submit(self, records: Sequence[Record], then: Callable[[list[Appended]], R]) -> Future[R]:
        """Check and produce audit events without waiting; a future of `then(appended)`.

        The future resolves once every record is acknowledged (``acks=all``), or with the
        error that refused the batch (nothing produced) or failed a delivery, within the
        append timeout.
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
                raise KafkaLogError(f"log {self.topic}: the log is closed")
            agent = self._agent
            records = stamp_actor(records, agent)
            self._check(records)
            stored = encode_records(records) if self.keys is None else self._sealed(records)
            encoded = sign_encoded(agent, self._state, records, stored)
            return self._start(records, encoded, future, then, track=True)

    def append(self, records: Sequence[Record]) -> list[Appended]:
        records = list(records)
        if not all(isinstance(r, BaseEvent) for r in records):
            return self.transact(lambda state: (records, None))[0]
        if not records:
            return []
        delivery = self._enqueue(records, None, None)
        with self._lock:
            guess = self._speculate(delivery, own=1)
        self._await(delivery)
        if delivery.error is not None:
            raise delivery.error
        if guess is not None:
            with self._lock:
                self._adopt(guess, delivery)
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
        # Serves delivery reports, which resolve `submit`'s futures, and the batches'
        # deadlines; poll() returns as soon as a report is ready, so the timeout only
        # bounds how late a close or a deadline is noticed.
        while not self._closed:
            try:
                producer = self._producer
                if producer is None:
                    time.sleep(0.05)
                else:
                    self._serve(producer, 0.1, flush=False)
                self._watch(time.monotonic())
            except Exception:  # logged; the loop keeps serving
                log.exception("%s: delivery report handling failed", self.topic)

    # --- following ------------------------------------------------------------------------

    def _follow(
        self,
        topic: str,
        from_offset: int,
        timeout: float | None,
        stop: StopFlag | None,
        *,
        dense: bool,
    ) -> Iterator[KafkaMessage]:
        """Messages of `topic` from `from_offset` on. `dense` (the log itself): offsets are
        seqs, yielded without a gap (see `_fold_until`)."""
        consumer = self._new_consumer(topic)
        expected = from_offset
        gaps = 0  # in a row: a gap that persists is an error, not a loop
        try:
            try:
                consumer.assign([TopicPartition(topic, 0, from_offset)])
            except KafkaException as exc:
                raise KafkaUnavailableError(
                    f"log {topic}: cannot read from offset {from_offset}: {error_cause(exc)}"
                ) from None
            idle_since = time.monotonic()
            while stop is None or not stop.is_set():
                try:
                    messages = consume_ready(consumer, 500, 0.05)
                except KafkaException as exc:
                    raise KafkaUnavailableError(
                        f"log {topic}: reading offset {expected}: {error_cause(exc)}"
                    ) from None
                for message in messages:
                    if message.error() is not None:
                        raise KafkaUnavailableError(
                            f"log {topic}: reading offset {expected}: {message.error()}"
                        )
                    if dense:
                        seq = cast(int, message.offset())  # consumed, not an error
                        if seq != expected:
                            if seq < expected:
                                continue
                            gaps += 1
                            if gaps > _MAX_GAPS:
                                raise KafkaLogError(
                                    f"log {topic}: seq {expected} keeps being skipped by the "
                                    f"consumer (the broker serves seq {seq} instead)"
                                )
                            self._gap(topic, expected, seq)
                            _seek(consumer, topic, expected)
                            break
                        expected = seq + 1
                        gaps = 0
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
        for message in self._follow(self.topic, from_seq, timeout, stop, dense=True):
            # As `_fold_until`: an offset, and a value that may be null (folded as refused).
            yield cast(int, message.offset()), cast(bytes, message.value())

    def lifecycle(
        self, from_offset: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[LifecycleRecord]:
        # Lifecycle offsets (not topic offsets), checked records of this topic id only.
        yield from follow_lifecycle(self.kafka_location, from_offset, timeout=timeout, stop=stop)

    # --- evidence (producers.logs.kafka_evidence) ------------------------------------------

    def _prover(self) -> KafkaEvidence:
        if self._evidence is None:
            self._evidence = KafkaEvidence(self.kafka_location, read_timeout=self._read_timeout)
        return self._evidence

    def _head(self) -> Head:
        # What this reader folded is in the log (the seq it reached, checked against the
        # topic's id at hydration); past it, the broker is asked.
        return Head(self.end_offset, self._state.next_seq)

    def latest_checkpoint(self) -> str:
        """The latest signed checkpoint on LOG.checkpoints (`NoCheckpointError`: none)."""
        with self._evidence_lock:
            return self._prover().latest_checkpoint()

    def checkpoint(self) -> str:
        """On Kafka the projector cuts the checkpoints (it holds the key): refused."""
        raise EvidenceError(
            f"log {self.topic}: on Kafka the projector signs the checkpoints as it folds "
            "(`memstream projector run --key FILE`); `memstream checkpoint --latest` shows "
            "the latest"
        )

    def prove(self, seq: int, size: int | None = None) -> InclusionProof:
        """An inclusion proof of record `seq` against the latest checkpoint on
        LOG.checkpoints (or the one of `size`)."""
        with self._evidence_lock:
            return self._prover().prove(seq, size, self._head())

    def consistency(self, old_size: int, new_size: int | None = None) -> ConsistencyProof:
        """A consistency proof from the tree of `old_size` records to the checkpoint of
        `new_size` (the latest when None)."""
        with self._evidence_lock:
            return self._prover().consistency(old_size, new_size, self._head())

    # --- encryption and erasure (producers.keys, producers.erasure) ---------------------

    def _sealed(self, records: list[Record]) -> list[bytes]:
        """The bytes to produce, of an encrypted log's records: content sealed under keys that are
        durable in the key store before this returns, and a receipt refused unless it tells
        the truth (`check_receipt`). Under `_lock`."""
        keys = self.keys
        assert keys is not None
        if any(
            isinstance(r, Message | Document) or (type(r) is GraphEnvelope and content_slots(r))
            for r in records
        ):
            # Once for the batch: a subject another process erased before this append
            # began is not sealed under its destroyed key (its tombstones are read first;
            # a view read less than CURRENT_S ago counts, `KafkaKeyStore.current`).
            keys.current()
        state = self._state
        return encode_sealed(
            keys,
            records,
            lambda receipt: check_receipt(keys, state, receipt, self.stored_records),
            state.graph,
        )

    def _own_opener(self, plain: Record) -> Callable[[Record], Record]:
        """`_opened` for the bytes this process sealed from `plain` and has not sent
        anywhere it could read them back from (a speculative fold's): the content is
        `plain`'s, so it is taken rather than decrypted, while its key is still held (a key
        destroyed meanwhile opens as `_opened` says). Any other record is opened."""

        def opener(record: Record) -> Record:
            if (
                isinstance(record, Message | Document)
                and type(record) is type(plain)
                and record.id == plain.id
            ):
                field = CONTENT_FIELD[record.kind]
                value = getattr(record, field)
                keys = self.keys
                if (
                    keys is not None
                    and value.startswith(SEALED_PREFIX)
                    and keys.holds(value[len(SEALED_PREFIX) : len(SEALED_PREFIX) + KEY_ID_HEX])
                ):
                    return record.with_field(field, getattr(plain, field))
            return self._opened(record)

        return opener

    def _opened(self, record: Record) -> Record:
        """The readable record (an encrypted log's content opened with its key);
        `CorruptLogError` when a sealed value does not open (the stored bytes changed)."""
        assert self.keys is not None
        try:
            return open_record(self.keys, record)
        except SealedError as exc:
            raise CorruptLogError(
                f"log {self.topic}: record {record_id(record)}: the sealed content does not "
                f"open: {exc}; the log is corrupt (every record was sealed before it was "
                "written)"
            ) from None

    def enable_encryption(self) -> None:
        """Make this log encrypted (create its key store, the topic LOG.keys): only an empty
        log may become one; `EncryptionError` for one holding records, nothing created."""
        with self._lock:
            if self.keys is not None:
                return
            held = self.end_offset()
            if held:
                raise EncryptionError(
                    f"log {self.topic}: holds {held} records written without encryption, "
                    "which cannot be erased; copy it into a new encrypted log with "
                    "`memstream reencrypt SRC DST`"
                )
            create_keys_topic(
                admin_for(self.kafka_location.bootstrap),
                self.topic,
                self.kafka_location.replication_factor,
                self._read_timeout,
            )
            self.keys = KafkaKeyStore(self.kafka_location.bootstrap, self.topic, self._read_timeout)
            self._encrypted = True

    def stored_records(self, seqs: Sequence[int]) -> dict[int, bytes]:
        """The bytes the log holds at `seqs` (read from the topic; none past its end)."""
        end = self.end_offset()
        wanted = sorted(s for s in set(seqs) if 0 <= s < end)
        found: dict[int, bytes] = {}
        if not wanted:
            return found
        consumer = self._new_consumer(self.topic)
        try:
            consumer.assign([TopicPartition(self.topic, 0, wanted[0])])
            waited = time.monotonic()
            index = 0
            while index < len(wanted):
                messages = consume_ready(consumer, 1000, 0.2)
                for message in messages:
                    if message.error() is not None:
                        raise KafkaUnavailableError(
                            f"log {self.topic}: reading seq {wanted[index]}: {message.error()}"
                        )
                    seq = cast(int, message.offset())
                    while index < len(wanted) and wanted[index] < seq:
                        index += 1  # not in the topic (past its end, or a gap)
                    if index < len(wanted) and wanted[index] == seq:
                        found[seq] = bytes(cast(bytes, message.value()) or b"")
                        index += 1
                if messages:
                    waited = time.monotonic()
                elif time.monotonic() - waited > self._read_timeout:
                    raise self._stalled(wanted[index], end)
        finally:
            consumer.close()
        return found

    @contextlib.contextmanager
    def exclusive(self, what: str) -> Iterator[None]:
        """Hold the log's erasure lock (a Redis key with an expiry) for an erase or a
        sweep, so that those of several processes run one after the other: each catches up
        to the log's end under it, and sees the receipts the previous one appended."""
        client = redis.Redis.from_url(self.kafka_location.redis_url)
        key = f"{self.kafka_location.key_prefix}erasure:lock"
        token = uuid.uuid4().hex
        deadline = time.monotonic() + self._append_timeout
        try:
            while not client.set(key, token, nx=True, px=_ERASURE_LOCK_MS):
                if time.monotonic() > deadline:
                    raise KafkaLogError(
                        f"log {self.topic}: {what}: another process held the erasure lock "
                        f"for {self._append_timeout:g} s"
                    )
                time.sleep(0.05)
        except redis.RedisError as exc:
            raise RedisAccessError(
                f"log {self.topic}: {what}: cannot take the erasure lock in Redis: {exc}"
            ) from None
        try:
            yield
        finally:
            try:
                if client.get(key) == token.encode():
                    client.delete(key)
            except redis.RedisError:
                log.warning("%s: the erasure lock expires by itself", self.topic)
            client.close()

    def purge(self) -> bool:
        """After an erasure: roll the key store's active segment, so the broker's cleaner
        removes the destroyed keys (`producers.keys.kafka_keys`)."""
        if self.keys is not None:
            self.keys.roll()
        return True

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            producer = self._producer
            if producer is not None:
                self._finish_own(producer)
                PRODUCERS.release(producer, self._on_client_error)
            self._closed = True
            with self._dr_lock:
                left = [d for d in self._open if d.remaining]
            for delivery in left:
                delivery.abandon("the log was closed before its acknowledgement came")
            with self._meta_lock:  # no watermark consumer made after this
                consumers = (self._consumer, self._meta)
            for consumer in consumers:
                if consumer is None:
                    continue
                try:
                    consumer.close()
                except Exception:
                    log.debug("%s: closing a consumer", self.topic, exc_info=True)
        if self._evidence is not None:
            self._evidence.close()
        if self.keys is not None:
            self.keys.close()
        # Outside the lock: a future's callback on the poller thread may still want it.
        if self._poller is not None and self._poller is not threading.current_thread():
            self._poller.join()


def _open(location: str | PathLike[str], *, create: bool) -> KafkaLog:
    return KafkaLog(parse_kafka_location(str(location)), create=create)


register_opener(KAFKA_SCHEME, _open)
