"""Which log a snapshot or a lifecycle record belongs to: the log topic's id and its end.

A topic deleted and created again under the same name is another log: Kafka gives it a new
topic id (a UUID) and its offsets start again at 0. Everything derived from a log (Redis
snapshots, lifecycle records) names the topic id it was derived from, and readers compare it
with the topic's id now, so nothing derived from a deleted log is served for its successor.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from producers.logs.kafka_client import client_conf
from schemas.errors import LogNotFoundError, MemstreamError

__all__ = [
    "LogIdentity",
    "TopicIdentityError",
    "admin_for",
    "log_identity",
    "partition_end",
    "topic_id",
]

log = logging.getLogger("memstream.producers.identity")

_TIMEOUT_S = 30.0
# A topic id as Kafka prints it: 22 characters of URL-safe base64 (16 bytes); checked when
# read back from Redis or a header, so no other text passes for one.
MAX_TOPIC_ID_LEN = 64


class TopicIdentityError(MemstreamError):
    """The broker could not say which topic a log is (unreachable, no topic id)."""


@dataclass(frozen=True)
class LogIdentity:
    """A log as it is now: its topic's id, and the partition's end (high watermark)."""

    topic_id: str
    end: int


def topic_id(admin: AdminClient, topic: str, timeout: float = _TIMEOUT_S) -> str:
    """The topic's id (Kafka's topic UUID, as text). `LogNotFoundError` when there is no
    such topic, `TopicIdentityError` when the broker does not answer."""
    try:
        description = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[
            topic
        ].result(timeout=timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise LogNotFoundError(f"log {topic}: no such topic on the broker") from None
        raise TopicIdentityError(f"log {topic}: cannot describe the topic: {error}") from None
    value = str(description.topic_id) if description.topic_id is not None else ""
    if not value or len(value) > MAX_TOPIC_ID_LEN:
        raise TopicIdentityError(f"log {topic}: the broker gave no topic id")
    return value


def admin_for(bootstrap: str) -> AdminClient:
    """One admin client per cluster and credentials (those of the environment now, see
    `client_conf`) for look-ups (thread-safe, long-lived): a look-up is then a round trip
    or two, not a client's start-up; and a process that changes its credentials never asks
    with the ones it had before."""
    auth = tuple(
        sorted(
            (name, value)
            for name, value in client_conf(bootstrap).items()
            if name.startswith(("sasl.", "security."))
        )
    )
    return _admin_for(bootstrap, auth)


@functools.lru_cache(maxsize=16)
def _admin_for(bootstrap: str, auth: tuple[tuple[str, str], ...]) -> AdminClient:
    return AdminClient({**client_conf(bootstrap), **dict(auth)})


def log_identity(bootstrap: str, topic: str, timeout: float = _TIMEOUT_S) -> LogIdentity:
    """The log's identity now (two broker round trips: describe, list offsets)."""
    admin = admin_for(bootstrap)
    return LogIdentity(topic_id(admin, topic, timeout), partition_end(admin, topic, timeout))


def partition_end(admin: AdminClient, topic: str, timeout: float = _TIMEOUT_S) -> int:
    """The end (high watermark) of the log's partition, asked of an admin client."""
    tp = TopicPartition(topic, 0)
    try:
        info = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=timeout)[tp].result(
            timeout=timeout
        )
    except KafkaException as exc:
        raise TopicIdentityError(f"log {topic}: no end offset: {exc.args[0]}") from None
    return int(info.offset)
