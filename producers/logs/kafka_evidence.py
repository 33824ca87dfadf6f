"""The Kafka log's evidence: its Merkle tree, the projector's signed checkpoints, proofs,
`verify`.

What a leaf covers: leaf ``seq`` is ``SHA-256(0x00 || V)`` where ``V`` is exactly the value
of the record at offset ``seq`` of the log topic's one partition, as the broker returns it
(the record's single-object Avro encoding, or the JSON envelope, as `schemas.codec` wrote
it; a null value counts as zero bytes). Keys, headers and timestamps are not covered. Every
offset is a seq (the topic is written without transactions, so offsets are dense), so the
leaves are the records that get a seq, the same as the embedded log's for the same history,
and the tree is RFC 9162's (`schemas.evidence.merkle`).

Checkpoints are cut by the projector (`CheckpointCutter`), in seq order, as it folds: at
the end of a consumed batch, at most every ``checkpoint_ms`` (default 1 s), and when it
stops; each is a C2SP signed note of origin ``memstream/kafka/<LOG>`` (the topic's name: a
topic deleted and created again is the same log, and its records must agree with what was
signed of it), signed with the projector's key (``--key`` / ``$MEMSTREAM_SIGNING_KEY``).
It is published to the topic ``LOG.checkpoints`` (one partition, never compacted: the
history of checkpoints, what `verify` bisects over) and to Redis (``memstream:LOG:
evidence:checkpoint``).

Where the leaf hashes are kept: in Redis (``memstream:LOG:evidence:leaves``, the 32-byte
leaf hashes in seq order, written before each checkpoint is published), as a cache that is
never trusted: whoever reads it (the projector at a restart, a prover) keeps only a prefix
whose root equals a checkpoint's signed root, and re-reads the rest from the log topic. A
projector restart therefore reads from the log only the records after the latest
checkpoint; a Redis flush costs one read of the log (the projector then folds it from seq 0
anyway).

A projector never signs a fork: at each tenure it reads the latest checkpoint published on
``LOG.checkpoints`` with its key, signs nothing smaller, and once its tree reaches that size
signs only if the roots agree. A log topic deleted and created with other records is thus
never signed; the projector says so and `memstream verify` names the first seq that differs.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from producers.logs.kafka_client import (
    KafkaUnavailableError,
    client_conf,
    consume_ready,
    consumer_conf,
    ensure_topic,
    error_cause,
    producer_conf,
    watermarks,
)
from producers.logs.location import KafkaLocation, parse_kafka_location, redact
from producers.logs.sqlite_evidence import ORIGIN_PREFIX
from schemas.errors import LogNotFoundError
from schemas.evidence.merkle import HASH_SIZE, MerkleTree, leaf_hash
from schemas.evidence.note import (
    Checkpoint,
    CheckpointSigner,
    NoteError,
    NoteSigner,
    NoteVerifier,
)
from schemas.evidence.proof import (
    ConsistencyProof,
    EvidenceMismatchError,
    InclusionProof,
    NoCheckpointError,
    ProofRangeError,
)
from schemas.evidence.verify import Found, VerifyReport, judge, note_text, unsigned_checkpoint

__all__ = [
    "CHECKPOINTS_SUFFIX",
    "checkpoints_topic",
    "kafka_origin",
    "CheckpointCutter",
    "KafkaEvidence",
    "Head",
    "verify_kafka_log",
]

log = logging.getLogger("memstream.producers.kafka.evidence")

CHECKPOINTS_SUFFIX = ".checkpoints"
_LEAF_PREFIX = hashlib.sha256(b"\x00")
# A projector looks this far back on LOG.checkpoints for its own latest checkpoint (what
# others published there is skipped, and said).
_SCAN_BACK = 256
_READ_BATCH = 10_000


def checkpoints_topic(location: KafkaLocation) -> str:
    return f"{location.topic}{CHECKPOINTS_SUFFIX}"


def kafka_origin(location: KafkaLocation) -> str:
    """The origin line of a Kafka log's checkpoints: ``memstream/kafka/<LOG>``."""
    return f"{ORIGIN_PREFIX}kafka/{location.topic}"


def _checkpoint_key(location: KafkaLocation) -> str:
    return f"{location.key_prefix}evidence:checkpoint"


def _leaves_key(location: KafkaLocation) -> str:
    return f"{location.key_prefix}evidence:leaves"


def _packed(values: Iterable[bytes | None]) -> bytes:
    out = []
    prefix = _LEAF_PREFIX
    for value in values:
        h = prefix.copy()
        if value:
            h.update(value)
        out.append(h.digest())
    return b"".join(out)


def _eof_consumer(bootstrap: str) -> Consumer:
    return Consumer(consumer_conf(bootstrap, **{"enable.partition.eof": True}))


def _read(
    bootstrap: str,
    topic: str,
    start: int,
    end: int,
    timeout: float,
    reuse: Consumer | None = None,
) -> Iterator[list[tuple[int, bytes | None]]]:
    """The records of [start, end) of a one-partition topic, in batches of (offset,
    value); stops early at a gap (the caller checks the offsets). `KafkaUnavailableError`
    when nothing arrives for `timeout` seconds. `reuse`: a consumer (made by
    `_eof_consumer`) to assign, and leave open, rather than a new one."""
    if start >= end:
        return
    consumer = reuse if reuse is not None else _eof_consumer(bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        last = time.monotonic()
        at = start
        while at < end:
            messages = consume_ready(consumer, min(_READ_BATCH, end - at), 0.2)
            batch: list[tuple[int, bytes | None]] = []
            for message in messages:
                if message.topic() != topic:
                    continue  # left from a reused consumer's former assignment
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        offset = message.offset()
                        if offset is not None and offset < end and offset <= at:
                            return  # the topic ends before `end`: records are missing
                        continue
                    raise KafkaUnavailableError(f"log {topic}: reading it: {error.str()}")
                offset = message.offset()
                if offset is None or offset >= end or offset < start:
                    continue
                batch.append((offset, message.value()))
                at = offset + 1
            if batch:
                last = time.monotonic()
                yield batch
            elif time.monotonic() - last > timeout:
                raise KafkaUnavailableError(
                    f"log {topic}: no record at offset {at} within {timeout:g} s"
                )
    except KafkaException as exc:
        raise KafkaUnavailableError(f"log {topic}: reading it: {error_cause(exc)}") from None
    finally:
        if reuse is None:
            consumer.close()


def _watermarks(consumer: Consumer, topic: str, timeout: float) -> tuple[int, int]:
    try:
        return watermarks(consumer, topic, timeout)
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"log {topic}: no watermarks within {timeout:g} s: {error_cause(exc)}"
        ) from None


def _topic_exists(admin: AdminClient, topic: str, timeout: float) -> bool:
    try:
        metadata = admin.list_topics(topic, timeout=timeout)
    except KafkaException as exc:
        raise KafkaUnavailableError(f"log {topic}: no metadata: {error_cause(exc)}") from None
    found = metadata.topics.get(topic)
    return found is not None and found.error is None


def _leaves_from_log(location: KafkaLocation, tree: MerkleTree, end: int, timeout: float) -> None:
    """Extend `tree` with the leaves of the log's records [tree.size, end)."""
    expected = tree.size
    for batch in _read(location.bootstrap, location.topic, expected, end, timeout):
        if batch[0][0] != expected:
            break
        tree.extend_packed(_packed(value for _, value in batch))
        expected += len(batch)
    if tree.size < end:
        raise EvidenceMismatchError(
            f"log {location.topic}: seq {tree.size} is missing (records deleted under the log)"
        )


# --- the projector's side -------------------------------------------------------------------


class CheckpointCutter:
    """The projector's tree, and the checkpoints it signs and publishes (see the module's
    doc). The fold loop calls `add` for each record, `cut` after each batch; `resume` at
    each tenure's start, `restart` when it folds again from seq 0; `close` at the end."""

    def __init__(
        self,
        location: KafkaLocation,
        signer: NoteSigner,
        admin: AdminClient,
        *,
        every_ms: int = 1000,
        read_timeout: float = 30.0,
    ) -> None:
        self.location = location
        self.topic = checkpoints_topic(location)
        self.origin = kafka_origin(location)
        self.verifier = signer.verifier
        self.every_s = every_ms / 1000
        self.read_timeout = read_timeout
        ensure_topic(admin, self.topic, location.replication_factor)
        self._signer = CheckpointSigner(self.origin, signer)
        self._bootstrap = location.bootstrap
        self._made: Producer | None = None  # made at the first checkpoint (`_producer`)
        self._redis = redis.Redis.from_url(
            location.redis_url, socket_timeout=0.5, socket_connect_timeout=0.5
        )
        self._redis_retry_at = 0.0
        self.tree = MerkleTree()
        self._pending = bytearray()
        self.published: Checkpoint | None = None  # the latest of ours on LOG.checkpoints
        self._published_checked = False
        self.halted: str | None = None  # why no checkpoint is signed (a fork)
        self.cut_size = 0
        self.last_cut = 0.0
        self.cuts = 0
        self._in_redis = 0  # leaves known to be in Redis, from seq 0
        self._failed: str | None = None

    # --- kept as the loop folds ---------------------------------------------------------

    def add(self, value: bytes | None) -> None:
        h = _LEAF_PREFIX.copy()
        if value:
            h.update(value)
        self._pending += h.digest()

    def _sync(self) -> None:
        if self._pending:
            self.tree.extend_packed(self._pending)
            self._pending = bytearray()

    # --- tenures --------------------------------------------------------------------------

    def resume(self, size: int, end: int | None = None) -> None:
        """The tree of the log's first `size` records (the state the tenure resumes from):
        from Redis as far as a checkpoint of ours vouches for it, the rest from the log.
        `end`: the log's end now (a published checkpoint past it is said)."""
        self._pending = bytearray()
        self.halted = None
        self.published = self._latest_published()
        self._published_checked = False
        self.tree = MerkleTree()
        self._in_redis = 0
        published = self.published
        if published is not None and end is not None and published.size > end:
            log.error(
                "%s: the checkpoint of size %d published on %s is past the log's end (%d "
                "records): the log was truncated, or its topic created again; nothing is "
                "signed until the log holds that many records and agrees with it",
                self.location.topic,
                published.size,
                self.topic,
                end,
            )
        if published is not None and published.size > 0:
            try:
                raw = self._redis.getrange(_leaves_key(self.location), 0, published.size * 32 - 1)
            except redis.RedisError as exc:
                log.info("%s: no leaf hashes from Redis (%s); reading the log", self.topic, exc)
                raw = b""
            if isinstance(raw, bytes) and len(raw) == published.size * HASH_SIZE:
                candidate = MerkleTree()
                candidate.extend_packed(raw)
                if candidate.root() == published.root:
                    if size < candidate.size:
                        candidate.truncate(size)
                    self.tree = candidate
                    self._in_redis = candidate.size
                else:
                    log.warning(
                        "%s: the leaf hashes in Redis disagree with the checkpoint of size %d; "
                        "reading the log instead",
                        self.topic,
                        published.size,
                    )
        try:
            _leaves_from_log(self.location, self.tree, size, self.read_timeout)
        except EvidenceMismatchError as exc:
            # The fold goes on (it is the projector's job); nothing is signed of this log.
            self.halted = f"{exc}: no checkpoint is signed for it"
            log.error("%s: %s", self.location.topic, self.halted)
            return
        self.cut_size = self.tree.size
        self._check_fork()
        if published is not None:
            log.info(
                "%s: resuming checkpoints from seq %d (latest published: size %d)",
                self.topic,
                size,
                published.size,
            )

    def restart(self) -> None:
        """The fold starts again from seq 0 (the snapshot was lost)."""
        self._pending = bytearray()
        self.tree = MerkleTree()
        self.cut_size = 0
        self._in_redis = 0
        self._published_checked = False

    def _latest_published(self) -> Checkpoint | None:
        """The latest checkpoint of ours on LOG.checkpoints (signature and origin checked);
        what else is there is skipped, with a warning naming its offset. The last
        `_SCAN_BACK` records are read, all of them when none of those is ours (so that
        records published by others cannot hide our latest)."""
        consumer = Consumer(consumer_conf(self.location.bootstrap))
        try:
            low, high = _watermarks(consumer, self.topic, self.read_timeout)
        finally:
            consumer.close()
        start = max(low, high - _SCAN_BACK)
        found = self._scan(start, high)
        if found is None and start > low:
            found = self._scan(low, start)
        return found

    def _scan(self, start: int, end: int) -> Checkpoint | None:
        found: Checkpoint | None = None
        skipped = 0
        for batch in _read(self.location.bootstrap, self.topic, start, end, self.read_timeout):
            for offset, value in batch:
                try:
                    checkpoint = Checkpoint.open(value or b"", self.verifier, origin=self.origin)
                except NoteError as exc:
                    skipped += 1
                    if skipped <= 10:
                        log.warning(
                            "%s: offset %d is not a checkpoint of this projector's (%s); ignored",
                            self.topic,
                            offset,
                            exc,
                        )
                    continue
                if found is None or checkpoint.size >= found.size:
                    found = checkpoint
        if skipped > 10:
            log.warning("%s: %d records in all are not its checkpoints", self.topic, skipped)
        return found

    def _check_fork(self) -> None:
        published = self.published
        if published is None or self._published_checked or self.tree.size < published.size:
            return
        self._published_checked = True
        if self.tree.root(published.size) != published.root:
            self.halted = (
                f"the log's first {published.size} records disagree with the checkpoint of "
                f"size {published.size} published on {self.topic}: the log was rewritten "
                "(its topic deleted and created again?); no checkpoint is signed for it: run "
                f"`memstream verify` to find the first seq that differs"
            )
            log.error("%s: %s", self.location.topic, self.halted)

    # --- cutting --------------------------------------------------------------------------

    def cut(self, now: float, *, force: bool = False) -> None:
        """Sign and publish a checkpoint of the tree as folded, when one is due."""
        self._sync()
        if self.halted is not None:
            return
        size = self.tree.size
        if size == self.cut_size or (not force and now - self.last_cut < self.every_s):
            return
        self._check_fork()
        if self.halted is not None:
            return
        if self.published is not None and size <= self.published.size:
            return  # never a checkpoint of a tree smaller than one already published
        note = self._signer.sign(size, self.tree.root())
        self.cut_size, self.last_cut = size, now
        self.cuts += 1
        self._to_redis(size, note, now)
        try:
            self._producer.produce(self.topic, note.encode(), on_delivery=self._delivered)
        except (KafkaException, BufferError) as exc:
            log.warning("%s: checkpoint of size %d not published: %s", self.topic, size, exc)
        self._producer.poll(0)

    def _delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._failed = err.str()
            log.warning("%s: a checkpoint was not published: %s", self.topic, err.str())

    def _to_redis(self, size: int, note: str, now: float) -> None:
        """The leaves not in Redis yet, then the note (a reader finds a note's leaves)."""
        if now < self._redis_retry_at:
            return
        key = _leaves_key(self.location)
        try:
            # Fewer leaves there than written (the key deleted, Redis flushed): from there.
            start = min(self._in_redis, int(self._redis.strlen(key)) // HASH_SIZE)
            pipe = self._redis.pipeline(transaction=True)
            if size > start:
                pipe.setrange(key, start * HASH_SIZE, self.tree.leaves(start, size))
            pipe.set(_checkpoint_key(self.location), note)
            pipe.execute()
            self._in_redis = size
        except redis.RedisError as exc:
            # A cache: the checkpoint still goes to LOG.checkpoints; retried at a later cut.
            self._redis_retry_at = now + 1.0
            log.warning("%s: checkpoint not written to Redis (%s)", self.topic, exc)

    @property
    def _producer(self) -> Producer:
        # Made when first needed: a projector made ahead of its tenure (a projector group's
        # standby) holds no client.
        if self._made is None:
            self._made = Producer(producer_conf(self._bootstrap, **{"linger.ms": 0}))
        return self._made

    def finish(self, timeout: float = 10.0) -> None:
        """A last checkpoint of what is folded, published before this returns."""
        self.cut(time.monotonic(), force=True)
        if self._made is not None and self._made.flush(timeout):
            log.warning("%s: checkpoints not acknowledged in %g s", self.topic, timeout)


# --- readers: provers, verify ---------------------------------------------------------------


class Head:
    """How many records the log holds, asked of the broker only when what the reader has
    folded (`known`, surely in the log) does not settle it: a round trip saved a proof."""

    def __init__(self, ask: Callable[[], int], known: int = 0) -> None:
        self._ask = ask
        self.known = known
        self._value: int | None = None

    def value(self) -> int:
        if self._value is None:
            self._value = self._ask()
        return self._value

    def holds(self, count: int) -> bool:
        """Whether the log holds at least `count` records."""
        return count <= self.known or count <= self.value()


class KafkaEvidence:
    """A reader's view of a Kafka log's evidence: the checkpoints on LOG.checkpoints, and
    the tree as far as a checkpoint vouches for it (leaf hashes from Redis, else from the
    log). Not thread-safe: its owner (`KafkaLog`) serialises calls."""

    def __init__(self, location: KafkaLocation, *, read_timeout: float = 15.0) -> None:
        self.location = location
        self.topic = checkpoints_topic(location)
        self.origin = kafka_origin(location)
        self.read_timeout = read_timeout
        self.tree = MerkleTree()
        self._notes: dict[int, bytes] = {}  # size -> the last note of that size
        self._latest: bytes | None = None  # the last record of LOG.checkpoints
        self._next = 0
        self._redis = redis.Redis.from_url(
            location.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0
        )
        self._admin: AdminClient | None = None
        self._exists = False  # LOG.checkpoints was found (it is never deleted by memstream)
        self._consumer: Consumer | None = None  # reused: a new one costs ~100 ms to start

    def close(self) -> None:
        self._redis.close()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _reader(self) -> Consumer:
        if self._consumer is None:
            # Small fetches: it reads one record, or a few notes (a fetch of 1 MB of records
            # for one of them cost milliseconds).
            self._consumer = Consumer(
                consumer_conf(
                    self.location.bootstrap,
                    **{"enable.partition.eof": True, "max.partition.fetch.bytes": 65536},
                )
            )
        return self._consumer

    def _refresh(self, quick: bool = False) -> None:
        """Read what LOG.checkpoints holds past what was read. `quick`: not when Redis's
        copy of the latest note is the one read last (a Redis round trip, not Kafka's)."""
        if quick and self._latest is not None:
            try:
                current = self._redis.get(_checkpoint_key(self.location))
            except redis.RedisError:
                current = None
            if current == self._latest:
                return
        if not self._exists:
            if self._admin is None:
                self._admin = AdminClient(client_conf(self.location.bootstrap))
            if not _topic_exists(self._admin, self.topic, self.read_timeout):
                raise NoCheckpointError(
                    f"log {self.location.topic}: no signed checkpoint: {self.topic} does not "
                    "exist (a projector with a signing key publishes them: `memstream "
                    "projector run --key`)"
                )
            self._exists = True
        consumer = self._reader()
        low, high = _watermarks(consumer, self.topic, self.read_timeout)
        start = max(self._next, low)
        for batch in _read(
            self.location.bootstrap, self.topic, start, high, self.read_timeout, consumer
        ):
            for _, value in batch:
                raw = value or b""
                self._latest = raw
                try:
                    claimed = unsigned_checkpoint(note_text(raw, ""), "")
                except EvidenceMismatchError:
                    continue  # not a note: `latest` says so if it is the last
                self._notes[claimed.size] = raw
            self._next = batch[-1][0] + 1

    def latest_checkpoint(self) -> str:
        """The latest note on LOG.checkpoints (its signature unchecked: the caller's)."""
        self._refresh()
        return self._latest_note()

    def _latest_note(self) -> str:
        if self._latest is None:
            raise NoCheckpointError(
                f"log {self.location.topic}: no signed checkpoint yet: the projector cuts "
                "one as it folds (with a signing key)"
            )
        return note_text(self._latest, f"log {self.location.topic}: the latest checkpoint")

    def _checkpoint(self, size: int | None, head: Head) -> tuple[Checkpoint, str]:
        """A checkpoint (the latest, or the one of `size`) that the log agrees with."""
        self._refresh(quick=True)
        where_log = f"log {self.location.topic}"
        if size is None:
            note = self._latest_note()
        else:
            raw = self._notes.get(size)
            if raw is None:
                raise NoCheckpointError(f"{where_log}: no signed checkpoint of size {size}")
            note = note_text(raw, f"{where_log}: checkpoint")
        checkpoint = unsigned_checkpoint(note, f"{where_log}: the checkpoint on {self.topic}")
        where = f"{where_log}: checkpoint of size {checkpoint.size}"
        if checkpoint.origin != self.origin:
            raise EvidenceMismatchError(
                f"{where}: its origin is {checkpoint.origin!r}, the log's is {self.origin!r}"
            )
        if not head.holds(checkpoint.size):
            raise EvidenceMismatchError(
                f"{where}: the log holds only {head.value()} records: seq {head.value()} to "
                f"{checkpoint.size - 1} are missing (the log was truncated, or its topic "
                "created again); run `memstream verify`"
            )
        self._grow(checkpoint)
        if self.tree.root(checkpoint.size) != checkpoint.root:
            # The leaves held may come from a cache: once more from the log itself.
            self.tree = MerkleTree()
            _leaves_from_log(self.location, self.tree, checkpoint.size, self.read_timeout)
            if self.tree.root(checkpoint.size) != checkpoint.root:
                raise EvidenceMismatchError(
                    f"{where}: the log's records disagree with it: the log was altered; run "
                    "`memstream verify` to find the first altered seq"
                )
        return checkpoint, note

    def _grow(self, checkpoint: Checkpoint) -> None:
        """Leaves up to the checkpoint's size: from Redis, else from the log."""
        have, size = self.tree.size, checkpoint.size
        if have >= size:
            return
        try:
            raw = self._redis.getrange(
                _leaves_key(self.location), have * HASH_SIZE, size * HASH_SIZE - 1
            )
        except redis.RedisError as exc:
            log.info("%s: no leaf hashes from Redis (%s)", self.location.topic, exc)
            raw = b""
        if isinstance(raw, bytes) and len(raw) == (size - have) * HASH_SIZE:
            self.tree.extend_packed(raw)
        else:
            _leaves_from_log(self.location, self.tree, size, self.read_timeout)

    def _record(self, seq: int) -> bytes:
        for batch in _read(
            self.location.bootstrap,
            self.location.topic,
            seq,
            seq + 1,
            self.read_timeout,
            self._reader(),
        ):
            for offset, value in batch:
                if offset == seq:
                    return value or b""
        raise EvidenceMismatchError(f"log {self.location.topic}: seq {seq} is missing")

    def prove(self, seq: int, size: int | None, head: Head) -> InclusionProof:
        """An inclusion proof of record `seq` against the latest checkpoint (or the one of
        `size`); `head` says how many records the log holds."""
        where = f"log {self.location.topic}"
        if type(seq) is not int or seq < 0:
            raise ProofRangeError(f"{where}: seq {seq!r}: a seq is an int >= 0")
        if not head.holds(seq + 1):
            end = head.value()
            last = "the log is empty" if end == 0 else f"the last seq is {end - 1}"
            raise ProofRangeError(f"{where}: seq {seq} is past the head ({last})")
        checkpoint, note = self._checkpoint(size, head)
        if seq >= checkpoint.size:
            raise NoCheckpointError(
                f"{where}: seq {seq} is not covered by the checkpoint of size "
                f"{checkpoint.size} yet (the projector cuts one at most every second)"
            )
        data = self._record(seq)
        if leaf_hash(data) != self.tree.leaf(seq):
            raise EvidenceMismatchError(
                f"{where}: seq {seq}: the stored record is not the one the checkpoint covers: "
                "the log was altered; run `memstream verify`"
            )
        return InclusionProof(
            note, seq, data, tuple(self.tree.inclusion_proof(seq, checkpoint.size))
        )

    def consistency(self, old_size: int, new_size: int | None, head: Head) -> ConsistencyProof:
        """A consistency proof from the tree of `old_size` records to the checkpoint of
        `new_size` (the latest when None)."""
        where = f"log {self.location.topic}"
        for name, value in (("old_size", old_size), ("new_size", new_size)):
            if value is not None and (type(value) is not int or value < 0):
                raise ProofRangeError(f"{where}: {name} {value!r}: an int >= 0")
        if new_size is not None and not head.holds(new_size):
            raise ProofRangeError(
                f"{where}: new_size {new_size}: the log holds {head.value()} records"
            )
        checkpoint, note = self._checkpoint(new_size, head)
        if old_size > checkpoint.size:
            raise ProofRangeError(
                f"{where}: old_size {old_size} is past the checkpoint's size {checkpoint.size}"
            )
        old_note = None
        if 0 < old_size < checkpoint.size and old_size in self._notes:
            old_note = note_text(self._notes[old_size], f"{where}: checkpoint")
        elif old_size == checkpoint.size:
            old_note = note
        return ConsistencyProof(
            note,
            old_size,
            self.tree.root(old_size),
            old_note,
            tuple(self.tree.consistency_proof(old_size, checkpoint.size)),
        )


def verify_kafka_log(
    location: str | KafkaLocation,
    verifier: NoteVerifier,
    external: Iterable[tuple[str, str]] = (),
    *,
    all_signatures: bool = False,
    read_timeout: float = 30.0,
) -> VerifyReport:
    """Re-hash the Kafka log's records and check them against the checkpoints on
    LOG.checkpoints and the `external` ones, as `verify_sqlite_log` does for a file (see
    `schemas.evidence.verify.judge` for which signatures are checked)."""
    loc = location if isinstance(location, KafkaLocation) else parse_kafka_location(location)
    admin = AdminClient(client_conf(loc.bootstrap))
    if not _topic_exists(admin, loc.topic, read_timeout):
        raise LogNotFoundError(f"log {loc.topic}: no such topic on {loc.bootstrap}")
    consumer = Consumer(consumer_conf(loc.bootstrap))
    try:
        low, high = _watermarks(consumer, loc.topic, read_timeout)
        has_checkpoints = _topic_exists(admin, checkpoints_topic(loc), read_timeout)
        c_low, c_high = (
            _watermarks(consumer, checkpoints_topic(loc), read_timeout)
            if has_checkpoints
            else (0, 0)
        )
    finally:
        consumer.close()
    tree = MerkleTree()
    gap: str | None = None
    if low > 0:
        gap = f"seq 0 is missing (the topic's first record is seq {low}: records deleted)"
    else:
        expected = 0
        for batch in _read(loc.bootstrap, loc.topic, 0, high, read_timeout):
            if batch[0][0] != expected or batch[-1][0] != expected + len(batch) - 1:
                for offset, _ in batch:
                    if offset != expected:
                        gap = f"seq {expected} is missing (the next record is seq {offset})"
                        break
                    expected += 1
                break
            tree.extend_packed(_packed(value for _, value in batch))
            expected += len(batch)
        if gap is None and tree.size < high:
            gap = f"seq {tree.size} is missing (the topic ends at {high})"
    notes: dict[int, bytes] = {}
    for batch in _read(loc.bootstrap, checkpoints_topic(loc), c_low, c_high, read_timeout):
        for offset, value in batch:
            raw = value or b""
            try:
                claimed = unsigned_checkpoint(note_text(raw, ""), "")
            except EvidenceMismatchError:
                log.warning("%s: offset %d is not a checkpoint", checkpoints_topic(loc), offset)
                continue
            notes[claimed.size] = raw  # the last of a size is the one relied on
    report = VerifyReport(redact(str(location)), kafka_origin(loc))
    report.size, report.root = tree.size, tree.root()
    sizes = sorted(notes)
    report.stored_checkpoints = len(sizes)
    note_at: Callable[[int], object] = notes.get
    external = list(external)
    try:
        judge(report, tree, gap, sizes, verifier, external, all_signatures, note_at)
    except Found as found:
        report.problem = found.problem
        report.first_bad_seq = found.first_bad_seq
    if report.first_bad_seq is not None and report.first_bad_seq < tree.size:
        _narrow(loc, report, tree, [n for _, n in external] + [notes[z] for z in sizes], verifier)
    return report


def _narrow(
    loc: KafkaLocation,
    report: VerifyReport,
    tree: MerkleTree,
    notes: list[str | bytes],
    verifier: NoteVerifier,
) -> None:
    """Name the exact first seq that differs, when the leaf hashes cached in Redis are the
    ones a signed checkpoint covering it vouches for (the checkpoints alone bound it to
    the span between two of them)."""
    start = report.first_bad_seq
    assert start is not None
    signed: list[Checkpoint] = []
    for note in notes:
        try:
            checkpoint = Checkpoint.open(note, verifier, origin=report.origin)
        except NoteError:
            continue
        if checkpoint.size > start:
            signed.append(checkpoint)
    if not signed:
        return
    client = redis.Redis.from_url(loc.redis_url, socket_timeout=5.0, socket_connect_timeout=5.0)
    try:
        for checkpoint in sorted(signed, key=lambda c: c.size):
            try:
                raw = client.getrange(_leaves_key(loc), 0, checkpoint.size * HASH_SIZE - 1)
            except redis.RedisError:
                return
            if not isinstance(raw, bytes) or len(raw) != checkpoint.size * HASH_SIZE:
                continue
            kept = MerkleTree()
            kept.extend_packed(raw)
            if kept.root() != checkpoint.root:
                continue  # not the leaves that checkpoint signed
            for seq in range(start, min(checkpoint.size, tree.size)):
                if kept.leaf(seq) != tree.leaf(seq):
                    report.first_bad_seq = seq
                    report.problem = (
                        f"seq {seq} is the first record that differs from what the signed "
                        f"checkpoint of size {checkpoint.size} covers (by the leaf hashes kept "
                        f"in Redis, which it vouches for); {report.problem}"
                    )
                    return
            return
    finally:
        client.close()
