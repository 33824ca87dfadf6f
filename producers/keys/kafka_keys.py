"""A Kafka log's key store: the compacted topic ``LOG.keys``, one record per data-subject key.

Why a topic: the key store must be durable (a Redis flush loses no key: Redis is a cache
here, with no persistence on the stack) and must really delete. A compacted topic is both:
a key is a record (key = the key id, value = the key and its subject), written with
``acks=all`` and acknowledged BEFORE any record sealed under it is produced, so no stored
record ever names a key the store lacks; an erasure writes a tombstone (a null value) per
key, and the broker's log cleaner then rewrites the segments without the key's record and
deletes the old segment files.

How soon the cleaner removes a key's bytes from the broker's disk depends on the topic's
settings, chosen here for a prompt, bounded deletion (`KEYS_TOPIC_CONFIG`):

- ``segment.ms=100``: the active segment is never cleaned, so it must roll soon; a segment
  rolls on the first append 100 ms after it began, so `roll` (called by `purge` after an
  erasure) waits that long and appends a marker record (key ``memstream.roll``), which
  rolls the segment holding the tombstones (and the key) into the cleanable part;
- ``min.cleanable.dirty.ratio=0.01``: any tombstone makes the log worth cleaning;
- ``min.compaction.lag.ms=0``: a record may be cleaned as soon as it is in a closed segment;
- ``delete.retention.ms=1000``: a tombstone (a key id only, no key) is kept for one second
  after the cleaning that removed the key, so readers following the topic see it; readers
  starting later never see the key anyway;
- ``file.delete.delay.ms=0``: the segment files the cleaner replaced are deleted at once
  (the broker's default keeps them 60 s);
- ``segment.index.bytes=65536``: a segment's two indexes are made at this size (the
  broker's default, 10 MB each, made a key write that rolled the segment take 6.1 ms at
  the median against 2.1 ms; such a segment holds a few keys).

The broker's cleaner thread looks for work every ``log.cleaner.backoff.ms`` (15 s by
default): with the roll, that is the bound on how long a destroyed key's bytes stay on the
broker's disk (measured: README, "Erasure").

The value of a key record is ``0x01 || key (32 bytes) || JSON {"subject", "event_id"}``,
read back as untrusted bytes (bounded, checked). Every process reads the whole topic (small:
one record per live key) and keeps the live keys in memory; a key it does not know is looked
up by reading the topic to its end first (a record sealed under it was acknowledged after
it). Tombstones read make the process forget the key. Keys of single events are made
ahead, many in one acknowledged write (`producers.keys.held_keys`), and stored with an
empty subject and event: the record sealed under one names it. The first batch (16 keys)
is written by the append that needs it; each next one by a thread while the last is used
(`own_key`).

Before an append seals content, the writer's view of the topic must include every tombstone
acknowledged before the append began (`current`). Asking the topic's end on every append
cost a round trip each; instead a watcher thread asks every `WATCH_S`, and a view whose
look was sent less than `CURRENT_S` ago counts as current, while `delete` of a shared key
returns only `CURRENT_S` after its tombstones were acknowledged. Clocks are compared only
as durations, each on its own process's monotonic clock.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterable
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from producers.keys.held_keys import UNASSIGNED, HeldKeys
from producers.logs.kafka_client import (
    KafkaLogError,
    KafkaUnavailableError,
    auth_error,
    consume_ready,
    consumer_conf,
    error_cause,
    follower_conf,
    producer_conf,
)
from schemas.crypto.envelope import KEY_BYTES, aead, new_key, new_key_id
from schemas.crypto.subjects import EVENT_SUBJECT_PREFIX
from schemas.errors import CorruptLogError

__all__ = [
    "KEYS_SUFFIX",
    "KEYS_TOPIC_CONFIG",
    "ROLL_KEY",
    "KafkaKeyStore",
    "keys_topic",
    "keys_topic_exists",
    "create_keys_topic",
]

log = logging.getLogger("memstream.producers.keys")

KEYS_SUFFIX = ".keys"
ROLL_KEY = b"memstream.roll"
SEGMENT_MS = 100
KEYS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(SEGMENT_MS),
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "1000",
    "file.delete.delay.ms": "0",
    "segment.index.bytes": "65536",
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
_VERSION = 1
_MAX_VALUE = 64 * 1024
_TIMEOUT_S = 15.0
# A view of the topic counts as current for this long after the look at its end that found
# it complete was sent; a watcher thread looks every WATCH_S (see `current`, `delete`).
CURRENT_S = 1.0
WATCH_S = 0.1


def keys_topic(log_topic: str) -> str:
    return f"{log_topic}{KEYS_SUFFIX}"


def keys_topic_exists(admin: AdminClient, log_topic: str, timeout: float = _TIMEOUT_S) -> bool:
    """Whether the log has a key store (it is encrypted). KafkaUnavailableError when the
    cluster's metadata cannot be read."""
    topic = keys_topic(log_topic)
    try:
        metadata = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"log {log_topic}: cannot look for its key store {topic}: {error_cause(exc)}"
        ) from None
    if metadata is not None:
        # Not allowed to see it: whether the log encrypts is unknown, which is no answer.
        denied = auth_error(log_topic, "describe the key store of", metadata.error)
        if denied is not None:
            raise denied
    return metadata is not None and metadata.error is None and bool(metadata.partitions)


def create_keys_topic(
    admin: AdminClient, log_topic: str, replication_factor: int | None, timeout: float = _TIMEOUT_S
) -> None:
    """Create ``LOG.keys`` (one partition, compacted, `KEYS_TOPIC_CONFIG`); one that exists
    already is kept."""
    topic = keys_topic(log_topic)
    futures = admin.create_topics(
        [
            NewTopic(
                topic,
                num_partitions=1,
                replication_factor=replication_factor or -1,
                config=dict(KEYS_TOPIC_CONFIG),
            )
        ],
        request_timeout=timeout,
    )
    try:
        futures[topic].result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        denied = auth_error(log_topic, "create the key store of", error)
        if denied is not None:
            raise denied from None
        if not isinstance(error, KafkaError) or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise KafkaUnavailableError(
                f"log {log_topic}: cannot create its key store {topic}: {error_cause(exc)}"
            ) from None
    deadline = time.monotonic() + timeout
    while not keys_topic_exists(admin, log_topic, timeout):
        if time.monotonic() > deadline:
            raise KafkaUnavailableError(f"log {log_topic}: its key store {topic} did not appear")
        time.sleep(0.05)


def _encode(subject: str, event_id: str | None, key: bytes) -> bytes:
    if subject == UNASSIGNED and event_id == UNASSIGNED:
        return _UNASSIGNED_HEAD + key + _UNASSIGNED_META
    meta = json.dumps({"subject": subject, "event_id": event_id}, separators=(",", ":"))
    return bytes([_VERSION]) + key + meta.encode()


# A key made ahead is written in batches of 64: its constant parts, encoded once.
_UNASSIGNED_HEAD = bytes([_VERSION])
_UNASSIGNED_META = json.dumps(
    {"subject": UNASSIGNED, "event_id": UNASSIGNED}, separators=(",", ":")
).encode()


# Keys are written ahead of need (`KafkaKeyStore.own_key`) once a batch this large was made.
_REFILL_FROM = 8
# A refill's thread produces its keys this many at a time, giving the GIL up between: an
# append that waits for the GIL meanwhile (its acknowledgement came) would otherwise wait
# out Python's switch interval, 5 ms, behind 512 produce calls.
_REFILL_CHUNK = 32


class _Refill:
    """A batch of keys made ahead, written by a thread of its own while the last batch is
    used (`KafkaKeyStore._write_ahead`): produced, every one acknowledged, their AES-GCM
    contexts made, then `done` is set. Its delivery reports may be served by any thread
    that polls the store's producer, so they only count here; the store holds the keys
    (`_settle_refill`) under its lock once `done` is set and nothing `failed`."""

    def __init__(self, batch: list[tuple[str, bytes]]) -> None:
        self.batch = batch
        self.ids = frozenset(key_id for key_id, _ in batch)
        self.acknowledged = 0
        self.failed: str | None = None
        self.contexts: list[AESGCM] = []
        self.done = threading.Event()
        self._count = threading.Lock()  # two polling threads may report at once

    def report(self, err: KafkaError | None, _msg: Any) -> None:
        with self._count:
            if err is not None:
                self.failed = err.str()
            else:
                self.acknowledged += 1


class KafkaKeyStore(HeldKeys):
    """The keys of one encrypted Kafka log (see the module's docstring). Thread-safe."""

    # Keys of single events are written 16 in the first batch (a process appending once
    # leaves 15 unused: 16 keys cost one write as 1 does, and the next batch is written
    # while they are used; started at 1, 2, 4 and 8, the first 15 appends waited for four
    # writes, 2-4 ms each), then in batches of up to `ahead_max` (`own_key`). Each
    # batch is an acknowledged write that may roll the topic's 100 ms segment, and is read
    # back by every process's consumer: batches of 512 took the broker's CPU per append
    # from about 215 to 170 µs against batches of 64 (probe, 3,000 appends each), for at
    # most 512 more unused keys per process (an AES-GCM context each while held, 1.3 KB).
    ahead_first = 16
    ahead_max = 512

    def __init__(self, bootstrap: str, log_topic: str, timeout: float = _TIMEOUT_S) -> None:
        super().__init__()
        self.log_topic = log_topic
        self.topic = keys_topic(log_topic)
        self.location = log_topic
        self._timeout = timeout
        self._bootstrap = bootstrap
        self._tp = TopicPartition(self.topic, 0)
        try:
            self._producer = Producer(
                producer_conf(
                    bootstrap,
                    **{"linger.ms": 0, "compression.type": "none"},
                )
            )
            # It stays assigned, reading the topic as it grows: asked again at most every
            # FOLLOW_FETCH_WAIT_MS while nothing is new (at 20 ms, its 50 empty fetches a
            # second cost the broker about 50 µs of CPU an append with a key per event), yet
            # a key written is still fetched as soon as the broker has it.
            self._consumer = Consumer(follower_conf(bootstrap))
            # The topic's end is asked of a consumer that never fetches: asked of the one
            # that reads, it waits behind its pending fetch (fetch.wait.max.ms) every time.
            self._meta = Consumer(consumer_conf(bootstrap))
        except KafkaException as exc:
            raise KafkaUnavailableError(
                f"log {log_topic}: cannot open its key store: {error_cause(exc)}"
            ) from None
        # Reading the topic (the consumer, the position) is one thread at a time under
        # `_read_lock`, taken before `_lock` (the keys in memory) and never after it: an
        # append that holds `_lock` to take a key never waits for a read.
        self._read_lock = threading.RLock()
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._position = 0
        self._reload = False
        # When the last look at the topic's end that found nothing unread was sent
        # (monotonic seconds): the view is current until CURRENT_S after it.
        self._current_since = -math.inf
        self._watcher: threading.Thread | None = None
        self._closed = threading.Event()
        self._refill: _Refill | None = None  # keys being written ahead (`own_key`)
        self._refill_wanted = threading.Event()
        self._ahead_writer: threading.Thread | None = None
        self._last_batch = 0  # how many keys the last batch made ahead held
        self.refresh()

    # --- reading --------------------------------------------------------------------------

    def _corrupt(self, offset: int, what: str) -> CorruptLogError:
        return CorruptLogError(
            f"log {self.log_topic}: key store {self.topic} offset {offset}: {what}"
        )

    def _apply(self, offset: int, key: bytes | None, value: bytes | None) -> None:
        if key is None or key == ROLL_KEY:
            return
        try:
            key_id = key.decode("ascii")
        except UnicodeDecodeError:
            raise self._corrupt(offset, "the record's key is not a key id") from None
        if value is None:  # a tombstone: the key is destroyed
            self.forget_ids([key_id])
            return
        if key_id in self._by_id:  # held already (made here, or read before): first wins
            return
        refill = self._refill
        if refill is not None and key_id in refill.ids:
            return  # made here, held once its whole batch is acknowledged (`own_key`)
        if len(value) > _MAX_VALUE or len(value) < 1 + KEY_BYTES or value[0] != _VERSION:
            raise self._corrupt(offset, f"key {key_id}: not a key record of version {_VERSION}")
        try:
            meta = json.loads(value[1 + KEY_BYTES :])
        except ValueError:
            raise self._corrupt(offset, f"key {key_id}: its subject is not JSON") from None
        subject = meta.get("subject") if isinstance(meta, dict) else None
        event_id = meta.get("event_id") if isinstance(meta, dict) else None
        if type(subject) is not str or (event_id is not None and type(event_id) is not str):
            raise self._corrupt(offset, f"key {key_id}: expected a subject and an event id")
        with self._lock:
            if key_id not in self._by_id:
                self._hold(key_id, subject, event_id, value[1 : 1 + KEY_BYTES])

    def refresh(self) -> None:
        """Read the key topic to its end (one round trip when nothing is new)."""
        with self._read_lock:
            if self._reload:
                self.forget_all()
                self._consumer.assign([TopicPartition(self.topic, 0, 0)])
                self._position = 0
                self._reload = False
            asked = time.monotonic()
            try:
                _, end = self._meta.get_watermark_offsets(self._tp, timeout=self._timeout)
            except KafkaException as exc:
                raise KafkaUnavailableError(
                    f"log {self.log_topic}: cannot read its key store: {error_cause(exc)}"
                ) from None
            self._read_to(end)
            self._current_since = max(self._current_since, asked)

    def _read_to(self, end: int) -> None:
        """Read the topic from this process's position up to `end`. Under `_read_lock`."""
        with self._read_lock:
            waited = time.monotonic()
            while self._position < end:
                messages = consume_ready(self._consumer, 1000, 0.2)
                for message in messages:
                    error = message.error()
                    if error is not None:
                        raise KafkaUnavailableError(
                            f"log {self.log_topic}: reading its key store: {error}"
                        )
                    offset = cast(int, message.offset())
                    self._apply(offset, message.key(), message.value())
                    self._position = offset + 1
                if messages:
                    waited = time.monotonic()
                elif time.monotonic() - waited > self._timeout:
                    raise KafkaUnavailableError(
                        f"log {self.log_topic}: its key store did not answer from offset "
                        f"{self._position} within {self._timeout:g} s"
                    )

    def current(self) -> None:
        """Make sure this process's view of the topic is current before content is sealed:
        a view that a look at the topic's end sent less than `CURRENT_S` ago found
        complete is (the watcher thread, started here, looks every `WATCH_S`); otherwise
        the topic is read to its end now (`refresh`). See `delete` for why that suffices."""
        if self._watcher is None:
            with self._read_lock:
                if self._watcher is None and not self._closed.is_set():
                    self._watcher = threading.Thread(
                        target=self._watch, name=f"memstream-keys-{self.log_topic}", daemon=True
                    )
                    self._watcher.start()
        if time.monotonic() - self._current_since >= CURRENT_S:
            self.refresh()

    def _watch(self) -> None:
        """Look at the topic's end every `WATCH_S` and read what is new, so appends find
        their view current without a round trip of their own. Its own consumer: the
        lookup waits on no lock and no one else's request."""
        try:
            meta = Consumer(consumer_conf(self._bootstrap))
        except KafkaException:
            log.warning("log %s: the key store's watcher cannot start", self.log_topic)
            return
        try:
            while not self._closed.wait(WATCH_S):
                asked = time.monotonic()
                try:
                    _, end = meta.get_watermark_offsets(self._tp, timeout=CURRENT_S)
                    with self._read_lock:
                        if self._closed.is_set() or self._reload:
                            continue
                        self._read_to(end)
                        self._current_since = max(self._current_since, asked)
                except (KafkaException, KafkaLogError):
                    # Appends read the topic themselves until a look succeeds again.
                    log.debug("log %s: watching the key store", self.log_topic, exc_info=True)
        finally:
            meta.close()

    def key(self, key_id: str) -> bytes | None:
        """The key named `key_id`, or None when it was destroyed (or never existed)."""
        found = self._by_id.get(key_id)
        if found is None:
            self.refresh()  # created by another process after this one last read
            found = self._by_id.get(key_id)
        return None if found is None else found.key

    # --- writing --------------------------------------------------------------------------

    def _send(self, items: list[tuple[bytes, bytes | None]], doing: str) -> None:
        """Produce and wait for every acknowledgement (acks=all); KafkaLogError if any
        record was not acknowledged."""
        errors: list[str] = []

        def report(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                errors.append(err.str())

        try:
            for key, value in items:
                self._producer.produce(self.topic, value=value, key=key, on_delivery=report)
            left = self._producer.flush(self._timeout)
        except (KafkaException, BufferError) as exc:
            raise KafkaLogError(
                f"log {self.log_topic}: {doing} failed: {error_cause(exc)}"
            ) from None
        if left or errors:
            cause = errors[0] if errors else f"{left} record(s) not acknowledged in time"
            raise KafkaLogError(f"log {self.log_topic}: {doing} failed: {cause}")

    def key_for(self, subject: str, event_id: str | None = None) -> tuple[str, bytes]:
        """(key id, key) to seal an event of `subject` with: its shared key (created on
        first use, durable before this returns) or a key of that one event (made ahead,
        `producers.keys.held_keys`). The caller makes its view current first (`current`,
        once for a batch), so that a subject another process erased is not sealed under
        its destroyed key."""
        with self._lock:
            if event_id is not None or subject.startswith(EVENT_SUBJECT_PREFIX):
                own_id, own, _ = self._own_key()
                return own_id, own
            key_id = self._shared.get(subject)
            if key_id is not None:
                return key_id, self._by_id[key_id].key
            key_id, key = new_key_id(), new_key()
            self._send([(key_id.encode(), _encode(subject, None, key))], "writing a key")
            self._hold(key_id, subject, None, key)
            return key_id, key

    def own_key(self) -> tuple[str, bytes, AESGCM]:
        """A durable key of one event, made ahead, now used, with its context (see
        `_own_key`)."""
        with self._lock:
            return self._own_key()

    def _own_key(self) -> tuple[str, bytes, AESGCM]:
        """`own_key`, under `_lock`.

        Once a process has used a batch of `_REFILL_FROM` keys or more, the next batch is
        written by a thread while the last ones are used (`_Refill`): an append then waits
        for a key write only when it uses keys faster than the broker acknowledges them. (A
        write to ``LOG.keys`` often rolls its 100 ms segment: 2 ms at the median.) A key is
        handed out only after its write was acknowledged; a refill that failed is dropped,
        and the next batch is written here, its error raised."""
        if self._refill is not None:
            self._settle_refill()
        taken = self._take_ahead()
        if taken is None and self._refill is not None:
            # Its thread gives up after `_timeout` (then `failed` says why).
            self._refill.done.wait(self._timeout + 5.0)
            self._settle_refill()
            taken = self._take_ahead()
        if taken is None:
            batch = self._next_batch()
            self._send(
                [(k.encode(), _encode(UNASSIGNED, UNASSIGNED, key)) for k, key in batch],
                "writing keys",
            )
            self._made_ahead(batch)
            self._last_batch = len(batch)
            taken = self._take_ahead()
            assert taken is not None
        if (
            self._refill is None
            and self._last_batch >= _REFILL_FROM
            and len(self._ahead) <= self._last_batch // 2
        ):
            self._start_refill()
        return taken

    def _start_refill(self) -> None:
        """Have the next batch of keys made ahead written by the store's writing thread
        (`_write_ahead`), started on first use: one thread for every batch (a thread
        started per batch cost the append that started it 0.4-7.7 ms, the new thread
        running first). Under `_lock`."""
        self._refill = _Refill(self._next_batch())
        if self._ahead_writer is None:
            self._ahead_writer = threading.Thread(
                target=self._write_ahead_loop,
                name=f"memstream-keys-ahead-{self.log_topic}",
                daemon=True,
            )
            self._ahead_writer.start()
        self._refill_wanted.set()

    def _write_ahead_loop(self) -> None:
        """The writing thread: each refill asked for, written (`_write_ahead`), until the
        store closes."""
        while True:
            self._refill_wanted.wait()
            self._refill_wanted.clear()
            refill = self._refill
            if refill is not None and not refill.done.is_set():
                self._write_ahead(refill)
            if self._closed.is_set():
                return

    def _write_ahead(self, refill: _Refill) -> None:
        """The refill's thread: produce its keys (`_REFILL_CHUNK` at a time), wait until
        every one is acknowledged (or `_timeout` passed, or the store closed), make their
        contexts; then set `done`. Takes no lock of the store's: the append that waits on
        `done` holds `_lock`."""
        batch = refill.batch
        try:
            for at in range(0, len(batch), _REFILL_CHUNK):
                for key_id, key in batch[at : at + _REFILL_CHUNK]:
                    self._producer.produce(
                        self.topic,
                        value=_encode(UNASSIGNED, UNASSIGNED, key),
                        key=key_id.encode(),
                        on_delivery=refill.report,
                    )
                time.sleep(0)  # gives the GIL up (see `_REFILL_CHUNK`)
            deadline = time.monotonic() + self._timeout
            while refill.failed is None and refill.acknowledged < len(batch):
                if self._closed.is_set() or time.monotonic() > deadline:
                    when = "before the store closed" if self._closed.is_set() else "in time"
                    left = len(batch) - refill.acknowledged
                    refill.failed = f"{left} key(s) written ahead not acknowledged {when}"
                    break
                self._producer.poll(0.05)
            if refill.failed is None:
                refill.contexts = [aead(key) for _, key in batch]
        except (KafkaException, BufferError) as exc:
            # Nothing is lost: the keys were never handed out; the next append that needs
            # one writes a batch itself, and says what failed.
            refill.failed = error_cause(exc)
        except Exception as exc:  # an append may be waiting on `done`: never left waiting
            refill.failed = f"writing keys ahead failed: {exc!r}"
            log.exception("log %s: writing keys ahead", self.log_topic)
        finally:
            refill.done.set()

    def _settle_refill(self) -> None:
        """Hold the refill's keys once its thread is done; drop a failed one. Under
        `_lock`."""
        refill = self._refill
        if refill is None or not refill.done.is_set():
            return
        self._refill = None
        if refill.failed is not None:
            log.debug("log %s: keys written ahead failed: %s", self.log_topic, refill.failed)
        else:
            self._made_ahead(refill.batch, refill.contexts)
            self._last_batch = len(refill.batch)

    def shared_key_id(self, subject: str) -> str | None:
        self.refresh()
        with self._lock:
            return self._shared.get(subject)

    def existing(self, key_ids: Iterable[str]) -> list[str]:
        self.refresh()
        with self._lock:
            return [k for k in dict.fromkeys(key_ids) if k in self._by_id]

    def shared_key_ids(self, key_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return {k for k in key_ids if k in self._by_id and self._by_id[k].event_id is None}

    def delete(self, key_ids: Iterable[str]) -> int:
        """Tombstone the keys (acknowledged before this returns); how many were known.

        When a subject's shared key is among them, this returns `CURRENT_S` after the
        tombstones were acknowledged: by then every other process's view that counts as
        current (`current`) was taken after them, so an append that starts after this
        returns seals nothing more under the destroyed key. (A process stopped for longer
        between its look and its produce is the race the erasure module describes.)"""
        ids = list(dict.fromkeys(key_ids))
        if not ids:
            return 0
        with self._lock:
            known = sum(1 for k in ids if k in self._by_id)
            shared = any(k in self._by_id and self._by_id[k].event_id is None for k in ids)
            self._send([(k.encode(), None) for k in ids], "destroying keys")
            self.forget_ids(ids)
        if shared:
            time.sleep(CURRENT_S)
        return known

    def roll(self) -> None:
        """Close the key topic's active segment (which holds the latest tombstones), so that
        the broker's cleaner may remove the destroyed keys: a segment rolls on an append
        made `segment.ms` after it began."""
        time.sleep(SEGMENT_MS / 1000 + 0.05)
        self._send([(ROLL_KEY, b"")], "rolling the key store")

    # --- the cache ---------------------------------------------------------------------

    def forget_subject(self, subject: str) -> None:
        """`subject`'s Erasure was folded: its eraser tombstoned the keys before appending
        it, so reading the topic to its end drops them from this process's memory. When the
        topic cannot be read now, the subject's keys are dropped and the whole topic is read
        again at the next lookup (a retention erasure leaves the subject's other keys)."""
        with self._read_lock:
            try:
                self.refresh()
            except KafkaLogError:
                self._forget_subject_here(subject)
                self._reload = True

    def close(self) -> None:
        self._closed.set()
        self._refill_wanted.set()  # the writing thread, if any, ends
        watcher = self._watcher
        if watcher is not None:
            watcher.join(CURRENT_S + self._timeout)
        with self._read_lock, self._lock:
            try:
                self._producer.flush(5)
                self._consumer.close()
                self._meta.close()
            except (KafkaException, RuntimeError):
                log.debug("closing the key store of %s", self.log_topic, exc_info=True)
