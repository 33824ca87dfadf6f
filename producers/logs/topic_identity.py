"""Which log a snapshot or a lifecycle record belongs to: the log topic's id and its end.

A topic deleted and created again under the same name is another log: Kafka gives it a new
topic id (a UUID) and its offsets start again at 0. Everything derived from a log (Redis
snapshots, lifecycle records) names the topic id it was derived from, and readers compare it
with the topic's id now, so nothing derived from a deleted log is served for its successor.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import (
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from producers.logs.kafka_client import ask_until, client_conf
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
# One try's wait: a broker that stalls (a paused process, a full queue) then costs one try,
# not the whole timeout; the next try's metadata request may go to another broker.
_ATTEMPT_S = 5.0
# What a partition's new leader, or a broker that knows of no leader yet, answers for a
# moment after a failover (seen in the cluster tests): asked again.
_RETRIABLE = frozenset(
    {
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.NOT_CONTROLLER,
    }
)
T = TypeVar("T")
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
    such topic, `TopicIdentityError` when the broker does not answer within `timeout`."""

    def describe(wait: float) -> object:
        futures = admin.describe_topics(TopicCollection([topic]), request_timeout=wait)
        return futures[topic].result(timeout=wait + 1.0)  # rdkafka's own timeout first

    try:
        description = _asked(admin, topic, timeout, describe)
    except _Unanswered as exc:
        if exc.code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise LogNotFoundError(f"log {topic}: no such topic on the broker") from None
        raise TopicIdentityError(f"log {topic}: cannot describe the topic: {exc}") from None
    found = getattr(description, "topic_id", None)
    value = str(found) if found is not None else ""
    if not value or len(value) > MAX_TOPIC_ID_LEN:
        raise TopicIdentityError(f"log {topic}: the broker gave no topic id")
    return value


class _Unanswered(Exception):
    """A question to the brokers that had no answer: the last error, its code, and whether
    it is asked again (while time is left)."""

    def __init__(self, text: str, code: int | None, again: bool = True) -> None:
        super().__init__(text)
        self.code = code
        self.again = again


def _asked(admin: AdminClient, topic: str, timeout: float, question: Callable[[float], T]) -> T:
    """`question(wait)`'s answer, asked until `timeout` while the errors are passing ones
    (`ask_until`), each try after asking any live broker for the topic's metadata, which
    renews the admin client's view of the partition's leader and of the controller (seen
    in a three-node cluster: after its leader was killed, the list-offsets question of a
    client that had asked before timed out 5 times in 6, once answering offset -1001).
    Raises `_Unanswered` with the last error."""
    try:
        return ask_until(
            question,
            timeout,
            try_s=_ATTEMPT_S,
            passing=lambda exc: _unanswered(exc)[2],
            refresh=lambda wait: admin.list_topics(topic, timeout=wait),
            refresh_first=True,
        )
    except (KafkaException, TimeoutError, _Unanswered) as exc:
        text, code, _ = _unanswered(exc)
        raise _Unanswered(text, code) from None


def _unanswered(exc: Exception) -> tuple[str, int | None, bool]:
    """What a try of `_asked` raised: its text, its Kafka error code, and whether it passes."""
    if isinstance(exc, _Unanswered):  # the question's own check of its answer
        return str(exc), exc.code, exc.again
    if isinstance(exc, TimeoutError):
        return f"no answer within a try's {_ATTEMPT_S:g} s", None, True
    if isinstance(exc, KafkaException):
        error = exc.args[0] if exc.args else None
        code = error.code() if isinstance(error, KafkaError) else None
        again = code in _RETRIABLE or (isinstance(error, KafkaError) and error.retriable())
        return str(error), code, again
    return str(exc), None, False


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


def partition_end(
    admin: AdminClient, topic: str, timeout: float = _TIMEOUT_S, *, stable: bool = False
) -> int:
    """The end (high watermark) of the topic's partition 0, asked of an admin client; with
    `stable`, its last stable offset instead (the first offset of the earliest transaction
    still open there, else the high watermark): how far a committed reader can read.
    `TopicIdentityError` when the brokers give none within `timeout`."""
    tp = TopicPartition(topic, 0)
    isolation = IsolationLevel.READ_COMMITTED if stable else IsolationLevel.READ_UNCOMMITTED

    def latest(wait: float) -> int:
        futures = admin.list_offsets(
            {tp: OffsetSpec.latest()}, isolation_level=isolation, request_timeout=wait
        )
        try:
            offset = int(futures[tp].result(timeout=wait + 1.0).offset)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() != KafkaError._NOENT:
                raise
            # "No leaders found": the client's metadata has no leader for the partition,
            # for a topic that does not exist, or for a moment while a stalled or failed
            # over broker's partitions get one (seen in bench cluster: 32 tenures ended on
            # it in one run). Asked again only in the second case.
            known = admin.list_topics(topic, timeout=wait).topics.get(topic)
            if known is None or known.error is not None or not known.partitions:
                raise _Unanswered(f"no such topic ({error.str()})", None, again=False) from None
            raise _Unanswered(f"no leader known yet ({error.str()})", None) from None
        if offset < 0:  # no offset (-1001): not an end, whatever the client says
            raise _Unanswered(f"the broker gave offset {offset} for the end", None)
        return offset

    try:
        return _asked(admin, topic, timeout, latest)
    except _Unanswered as exc:
        raise TopicIdentityError(f"log {topic}: no end offset: {exc}") from None
