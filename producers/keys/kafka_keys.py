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
  (the broker's default keeps them 60 s).

The broker's cleaner thread looks for work every ``log.cleaner.backoff.ms`` (15 s by
default): with the roll, that is the bound on how long a destroyed key's bytes stay on the
broker's disk (measured: README, "Erasure").

The value of a key record is ``0x01 || key (32 bytes) || JSON {"subject", "event_id"}``,
read back as untrusted bytes (bounded, checked). Every process reads the whole topic (small:
one record per live key) and keeps the live keys in memory; a key it does not know is looked
up by reading the topic to its end first (a record sealed under it was acknowledged after
it). Tombstones read make the process forget the key.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from producers.logs.kafka_client import (
    KafkaLogError,
    KafkaUnavailableError,
    auth_error,
    consume_ready,
    consumer_conf,
    error_cause,
    producer_conf,
)
from schemas.crypto.envelope import KEY_BYTES, new_key, new_key_id
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
    "retention.ms": "-1",
    "retention.bytes": "-1",
}
_VERSION = 1
_MAX_VALUE = 64 * 1024
_TIMEOUT_S = 15.0


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
    meta = json.dumps({"subject": subject, "event_id": event_id}, separators=(",", ":"))
    return bytes([_VERSION]) + key + meta.encode()


class KafkaKeyStore:
    """The keys of one encrypted Kafka log (see the module's docstring). Thread-safe."""

    def __init__(self, bootstrap: str, log_topic: str, timeout: float = _TIMEOUT_S) -> None:
        self.log_topic = log_topic
        self.topic = keys_topic(log_topic)
        self.location = log_topic
        self._timeout = timeout
        self._lock = threading.RLock()
        self._by_id: dict[str, tuple[str, str | None, bytes]] = {}  # id -> subject, event, key
        self._shared: dict[str, str] = {}  # subject -> its shared key's id
        self._tp = TopicPartition(self.topic, 0)
        try:
            self._producer = Producer(
                producer_conf(
                    bootstrap,
                    **{"linger.ms": 0, "compression.type": "none"},
                )
            )
            self._consumer = Consumer(consumer_conf(bootstrap))
            # The topic's end is asked of a consumer that never fetches: asked of the one
            # that reads, it waits behind its pending fetch (fetch.wait.max.ms) every time.
            self._meta = Consumer(consumer_conf(bootstrap))
        except KafkaException as exc:
            raise KafkaUnavailableError(
                f"log {log_topic}: cannot open its key store: {error_cause(exc)}"
            ) from None
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._position = 0
        self._reload = False
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
            found = self._by_id.pop(key_id, None)
            if found is not None and self._shared.get(found[0]) == key_id:
                del self._shared[found[0]]
            return
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
        self._by_id[key_id] = (subject, event_id, value[1 : 1 + KEY_BYTES])
        if event_id is None:
            self._shared[subject] = key_id

    def refresh(self) -> None:
        """Read the key topic to its end (one round trip when nothing is new)."""
        with self._lock:
            if self._reload:
                self._by_id.clear()
                self._shared.clear()
                self._consumer.assign([TopicPartition(self.topic, 0, 0)])
                self._position = 0
                self._reload = False
            try:
                _, end = self._meta.get_watermark_offsets(self._tp, timeout=self._timeout)
            except KafkaException as exc:
                raise KafkaUnavailableError(
                    f"log {self.log_topic}: cannot read its key store: {error_cause(exc)}"
                ) from None
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

    def key(self, key_id: str) -> bytes | None:
        """The key named `key_id`, or None when it was destroyed (or never existed)."""
        with self._lock:
            found = self._by_id.get(key_id)
            if found is None:
                self.refresh()  # created by another process after this one last read
                found = self._by_id.get(key_id)
            return None if found is None else found[2]

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
        first use, durable before this returns) or a new key of that one event. The caller
        reads the topic to its end first (`refresh`, once for a batch), so that a subject
        another process erased is not sealed under its destroyed key."""
        if event_id is None and subject.startswith(EVENT_SUBJECT_PREFIX):
            event_id = subject[len(EVENT_SUBJECT_PREFIX) :]
        with self._lock:
            if event_id is None:
                key_id = self._shared.get(subject)
                if key_id is not None:
                    return key_id, self._by_id[key_id][2]
            key_id, key = new_key_id(), new_key()
            self._send([(key_id.encode(), _encode(subject, event_id, key))], "writing a key")
            self._by_id[key_id] = (subject, event_id, key)
            if event_id is None:
                self._shared[subject] = key_id
            return key_id, key

    def shared_key_id(self, subject: str) -> str | None:
        with self._lock:
            self.refresh()
            return self._shared.get(subject)

    def existing(self, key_ids: Iterable[str]) -> list[str]:
        with self._lock:
            self.refresh()
            return [k for k in dict.fromkeys(key_ids) if k in self._by_id]

    def shared_key_ids(self, key_ids: Iterable[str]) -> set[str]:
        with self._lock:
            return {k for k in key_ids if k in self._by_id and self._by_id[k][1] is None}

    def delete(self, key_ids: Iterable[str]) -> int:
        """Tombstone the keys (acknowledged before this returns); how many were known."""
        ids = list(dict.fromkeys(key_ids))
        if not ids:
            return 0
        with self._lock:
            known = sum(1 for k in ids if k in self._by_id)
            self._send([(k.encode(), None) for k in ids], "destroying keys")
            self.forget_ids(ids)
            return known

    def roll(self) -> None:
        """Close the key topic's active segment (which holds the latest tombstones), so that
        the broker's cleaner may remove the destroyed keys: a segment rolls on an append
        made `segment.ms` after it began."""
        time.sleep(SEGMENT_MS / 1000 + 0.05)
        self._send([(ROLL_KEY, b"")], "rolling the key store")

    # --- the cache ------------------------------------------------------------------------

    def forget_ids(self, key_ids: Iterable[str]) -> None:
        with self._lock:
            for key_id in key_ids:
                found = self._by_id.pop(key_id, None)
                if found is not None and self._shared.get(found[0]) == key_id:
                    del self._shared[found[0]]

    def forget_subject(self, subject: str) -> None:
        """`subject`'s Erasure was folded: its eraser tombstoned the keys before appending
        it, so reading the topic to its end drops them from this process's memory. When the
        topic cannot be read now, the subject's keys are dropped and the whole topic is read
        again at the next lookup (a retention erasure leaves the subject's other keys)."""
        with self._lock:
            try:
                self.refresh()
            except KafkaLogError:
                for key_id in [k for k, v in self._by_id.items() if v[0] == subject]:
                    del self._by_id[key_id]
                self._shared.pop(subject, None)
                self._reload = True

    def forget_all(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._shared.clear()

    def close(self) -> None:
        with self._lock:
            try:
                self._producer.flush(5)
                self._consumer.close()
                self._meta.close()
            except (KafkaException, RuntimeError):
                log.debug("closing the key store of %s", self.log_topic, exc_info=True)
