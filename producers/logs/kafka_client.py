"""The Kafka client helpers every Kafka adapter shares: client, producer and consumer
configurations, the header names and size limits, topic creation and checks
(`ensure_topic`), reading what is ready (`consume_ready`), and the error types.

`KafkaLog` (`producers.logs.kafka`), the lifecycle topic's readers
(`producers.logs.lifecycle_topic`), the projector and the stack's health check all build
their clients and topics here, so a log topic is made and checked one way.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from schemas.codec import MAX_DECODE_BYTES
from schemas.errors import LogNotFoundError, LogUnavailableError, MemstreamError
from schemas.limits import MAX_RECORD_BYTES

__all__ = [
    "ask_until",
    "watermarks",
    "KafkaLogError",
    "KafkaUnavailableError",
    "KafkaAuthenticationError",
    "KafkaAuthorizationError",
    "TopicConfigError",
    "ENV_USERNAME",
    "ENV_PASSWORD",
    "ENV_MECHANISM",
    "AUTH_ERRORS",
    "DENIED_ERRORS",
    "auth_error",
    "check_login",
    "error_cause",
    "kafka_exception",
    "client_conf",
    "producer_conf",
    "consumer_conf",
    "follower_conf",
    "FOLLOW_FETCH_WAIT_MS",
    "consume_ready",
    "ensure_topic",
    "SEQ_HEADER",
    "INDEX_HEADER",
    "PRODUCER_MESSAGE_MAX_BYTES",
    "TOPIC_MAX_MESSAGE_BYTES",
    "BATCH_HEADER_BYTES",
    "DERIVED_PRODUCER_MESSAGE_MAX_BYTES",
    "DERIVED_TOPIC_MAX_MESSAGE_BYTES",
    "TOPIC_CONFIG",
    "KafkaHeaders",
]

log = logging.getLogger("memstream.producers.kafka")
_client_log = logging.getLogger("memstream.kafka.client")

# Lifecycle records name the log record that caused them, and their index among its events.
SEQ_HEADER = "memstream.seq"
INDEX_HEADER = "memstream.index"
# A message's headers as the producer takes them: (name, value) in order.
KafkaHeaders = list[tuple[str, str | bytes | None]]
# The size limits that let Kafka take every record under `MAX_RECORD_BYTES` (see
# `schemas.limits`): the producer refuses a message over PRODUCER_MESSAGE_MAX_BYTES and
# never sends a batch over it plus the batch header; topics take batches up to
# TOPIC_MAX_MESSAGE_BYTES (Kafka's default, set on the topics memstream creates).
PRODUCER_MESSAGE_MAX_BYTES = 1_000_000
TOPIC_MAX_MESSAGE_BYTES = 1_048_588
BATCH_HEADER_BYTES = 61
# The projector's derived topics (lifecycle, LOG.memex) take messages up to the readers'
# decoding bound (`MAX_DECODE_BYTES`, which `encode_lifecycle` keeps each event under) and
# its producer sends them; a batch header and headers fit in the margins.
DERIVED_PRODUCER_MESSAGE_MAX_BYTES = MAX_DECODE_BYTES + 32 * 1024
DERIVED_TOPIC_MAX_MESSAGE_BYTES = MAX_DECODE_BYTES + 64 * 1024
TOPIC_CONFIG = {
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "retention.bytes": "-1",
    "max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES),
}
_TIMEOUT_S = 30.0  # admin calls of ensure_topic when no timeout is given (the projector)


class KafkaLogError(MemstreamError):
    """The Kafka log could not do what was asked (delivery failed, broker unreachable)."""


class KafkaUnavailableError(KafkaLogError, LogUnavailableError):
    """The broker could not be reached or answered with an error: the message names the
    log, the operation and the cause."""


class KafkaAuthenticationError(KafkaUnavailableError):
    """The broker refused the client's credentials (none given, or wrong): the message names
    the log and says "authentication failed", never the password."""


class KafkaAuthorizationError(KafkaLogError):
    """The broker's ACLs do not let this principal do what was asked (write, read, create
    or describe the log's topic); nothing was written."""


class TopicConfigError(KafkaLogError):
    """A log topic that is not one partition, is compacted, or takes too small messages."""


def kafka_exception(exc: BaseException, producer: Producer | None = None) -> KafkaException | None:
    """The KafkaException `exc` is, or stands for: confluent-kafka raises a fatal error (a
    producer fenced, say) from poll, flush or a transaction call, and a delivery callback
    it runs after that in the same call fails with a SystemError caused by it. None for
    any other exception.

    How that callback fails depends on how far CPython has specialised its bytecode: it
    can also lose the fatal error (a SystemError that a call "returned NULL without setting
    an exception"). Given the `producer` the call was made on, that error is asked of it
    again: a producer in a fatal state raises it from every transaction call (this one
    aborts the transaction, which every caller here is leaving anyway)."""
    if isinstance(exc, KafkaException):
        return exc
    if isinstance(exc, SystemError) and isinstance(exc.__cause__, KafkaException):
        return exc.__cause__
    if isinstance(exc, SystemError) and producer is not None:
        try:
            producer.abort_transaction(5)
        except KafkaException as fatal:
            return fatal
    return None


def error_cause(exc: BaseException) -> str:
    """The text of a confluent-kafka error (a KafkaException holds a KafkaError)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return str(exc.args[0].str())
    return str(exc) or type(exc).__name__


# A secured broker's credentials (`memstream stack up --secure`): read from the environment
# by `client_conf`, the one place every Kafka client of memstream is configured. They never
# travel in a location string, so a printed location never shows them.
ENV_USERNAME = "MEMSTREAM_KAFKA_USERNAME"
ENV_PASSWORD = "MEMSTREAM_KAFKA_PASSWORD"
ENV_MECHANISM = "MEMSTREAM_KAFKA_SASL_MECHANISM"
_DEFAULT_MECHANISM = "SCRAM-SHA-512"

# librdkafka's codes for "these credentials were refused", and for "this principal may not".
AUTH_ERRORS = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
DENIED_ERRORS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)


def _sasl_conf(username: str | None, password: str | None) -> dict[str, Any]:
    if username is None and password is None:
        username = os.environ.get(ENV_USERNAME) or None
        password = os.environ.get(ENV_PASSWORD) or None
    if username is None and password is None:
        return {}
    if not username or not password:
        raise ValueError(
            f"Kafka credentials: {ENV_USERNAME} and {ENV_PASSWORD} must be set together "
            f"({ENV_USERNAME} is {'set' if username else 'missing'}, {ENV_PASSWORD} is "
            f"{'set' if password else 'missing'})"
        )
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": os.environ.get(ENV_MECHANISM) or _DEFAULT_MECHANISM,
        "sasl.username": username,
        "sasl.password": password,
    }


def client_conf(
    bootstrap: str, *, username: str | None = None, password: str | None = None
) -> dict[str, Any]:
    """The settings every memstream Kafka client starts from: the brokers and, when
    `username`/`password` are given or ``MEMSTREAM_KAFKA_USERNAME``/``..._PASSWORD`` are set,
    SASL/SCRAM (``MEMSTREAM_KAFKA_SASL_MECHANISM``, default SCRAM-SHA-512). ValueError when
    only one of the two is set."""
    return {
        "bootstrap.servers": bootstrap,
        "logger": _client_log,
        "log_level": 3,
        # memstream creates its topics itself, with their settings; a client's metadata
        # request for a topic (a producer's, an admin client's look-up) never creates one,
        # whatever the broker's auto.create.topics.enable.
        "allow.auto.create.topics": False,
        # A new client learns the brokers from its bootstrap connection, then connects to
        # the broker it must talk to; librdkafka spaces such connections by half this
        # (at least 11 ms). At the default 100 ms, every new client's first produce or
        # fetch waited about 45 ms for it: a log's first append took 50 ms against 1 ms.
        # It also starts the backoff between reconnects, which doubles up to 10 s.
        "reconnect.backoff.ms": 20,
        **_sasl_conf(username, password),
    }


def auth_error(topic: str, operation: str, error: KafkaError | None) -> KafkaLogError | None:
    """The memstream error for a refused login or a denied operation, None for any other
    error (`operation` in words: "write", "read", "create its topic", ...)."""
    if error is None:
        return None
    code = error.code()
    if code in AUTH_ERRORS:
        return KafkaAuthenticationError(
            f"log {topic}: authentication failed: the broker refused this client's credentials "
            f"(set {ENV_USERNAME} and {ENV_PASSWORD} to a user of the secured stack)"
        )
    if code in DENIED_ERRORS:
        return KafkaAuthorizationError(
            f"not authorized to {operation} log {topic}: the broker's ACLs do not grant it to "
            f"this principal ({error.name()}; `memstream acl grant` grants a log)"
        )
    return None


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


# The broker may hold an empty fetch of a consumer that stays assigned to a partition (a
# log's reader, a projector) this long. A fetch is answered as soon as a record arrives, so
# the wait adds no latency to records; it bounds how often an idle partition is asked
# again: at the default 20 ms, 50 empty fetches a second per idle log, for the broker to
# answer and the client to make (a process of 33 idle logs: 1,650 a second). A consumer
# that must learn soon that nothing more is there (partition EOF, a seek to re-fetch) keeps
# the short wait.
FOLLOW_FETCH_WAIT_MS = 500


def consumer_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        **client_conf(bootstrap),
        # Partitions are assigned by hand and offsets never committed: the position is the
        # state's own seq (state and position are one). librdkafka still wants a group id.
        "group.id": f"memstream-reader-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 20,
        "enable.partition.eof": False,
        **extra,
    }


def follower_conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """`consumer_conf` for a consumer that stays assigned to a partition it follows (a
    log's reader, a projector): an idle partition is fetched every `FOLLOW_FETCH_WAIT_MS`."""
    return consumer_conf(bootstrap, **{"fetch.wait.max.ms": FOLLOW_FETCH_WAIT_MS, **extra})


def _sasl_mechanisms(bootstrap: str, timeout: float = 2.0) -> list[str] | None:
    """The SASL mechanisms a broker of `bootstrap` asks for, from one raw SaslHandshake
    request (Kafka's API key 17, v1): a SASL listener answers with no error and its
    mechanisms, a plaintext one with an error. None when no broker answers at all."""
    request = b"".join(
        (
            struct.pack(">hhi", 17, 1, 1),  # api key, version, correlation id
            struct.pack(">h", 9) + b"memstream",  # client id
            struct.pack(">h", 13) + b"SCRAM-SHA-512",
        )
    )
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
                sock.sendall(struct.pack(">i", len(request)) + request)
                head = sock.recv(4, socket.MSG_WAITALL)
                size = struct.unpack(">i", head)[0] if len(head) == 4 else 0
                if not 6 <= size <= 4096:
                    continue
                body = sock.recv(size, socket.MSG_WAITALL)
        except (OSError, ValueError, struct.error):
            continue
        if len(body) < 10:
            continue
        error_code, count = struct.unpack(">hi", body[4:10])
        if error_code != 0:
            return []  # not a SASL listener
        names, at = [], 10
        for _ in range(max(0, min(count, 16))):
            (length,) = struct.unpack(">h", body[at : at + 2])
            names.append(body[at + 2 : at + 2 + length].decode("ascii", "replace"))
            at += 2 + length
        return names
    return None


def check_login(
    admin: AdminClient,
    conf: dict[str, Any],
    topic: str,
    errors: list[KafkaError],
    timeout: float,
) -> None:
    """Return once the broker answers a metadata request from `admin` (made from `conf`,
    with an ``error_cb`` appending to `errors`); raise `KafkaAuthenticationError` as soon
    as the broker refuses its login, instead of waiting out `timeout` as librdkafka would.

    Two refusals are told apart: wrong credentials (librdkafka reports a SASL
    authentication error), and none given to a broker that wants them (it closes the
    connection at the first request; a raw SaslHandshake then asks it whether it wants SASL).
    When no broker answers within `timeout`: `KafkaUnavailableError`, naming the brokers.
    """
    deadline = time.monotonic() + timeout
    asked = False
    while True:
        try:
            admin.list_topics(topic, timeout=min(0.5, max(0.05, deadline - time.monotonic())))
            return
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb
            refused = [e for e in errors if e.code() in AUTH_ERRORS]
            failed = auth_error(topic, "open", refused[-1]) if refused else None
            if failed is not None:
                raise failed from None
            error = exc.args[0] if exc.args else None
            if (
                not asked
                and "sasl.username" not in conf
                and isinstance(error, KafkaError)
                and error.code() == KafkaError._TRANSPORT
            ):
                asked = True  # once: only on this failure path, never on a working one
                wanted = _sasl_mechanisms(str(conf["bootstrap.servers"]))
                if wanted:
                    raise KafkaAuthenticationError(
                        f"log {topic}: authentication failed: the broker at "
                        f"{conf['bootstrap.servers']} requires SASL ({', '.join(wanted)}) and "
                        f"this client gives no credentials; set {ENV_USERNAME} and "
                        f"{ENV_PASSWORD}"
                    ) from None
            if time.monotonic() >= deadline:
                raise KafkaUnavailableError(
                    f"log {topic}: cannot read its metadata (broker {conf['bootstrap.servers']}, "
                    f"waited up to {timeout:g} s): {error_cause(exc)}"
                ) from None


# Answers a partition gives for a moment while its leadership moves (a node stopped, a
# busy broker): asked again rather than taken for an outage.
_LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.OFFSET_NOT_AVAILABLE,  # "Leader high watermark is not caught up"
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.REPLICA_NOT_AVAILABLE,
    }
)


# Local errors of a client whose cached metadata lacks the partition (see `watermarks`), and
# how many times a watermark question is asked again after one (each after a refresh).
_STALE_METADATA = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC})
# Local errors of a client whose brokers are failing over, which it does not call
# retriable: the question went to a bootstrap connection the client let go once it knew
# the cluster ("Broker handle destroyed without termination"), or every connection it had
# was to a node that just died ("All broker connections are down"), or that connection
# broke. Asked again, it goes to a live node. In the three-node failover test a
# projector's new tenure met them after a leader's kill and ended at once, three times in
# one run. (`_DESTROY`, the client itself closing, is no such error.)
_CONNECTIONS_MOVING = frozenset(
    {KafkaError._DESTROY_BROKER, KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT}
)
_STALE_TRIES = 3

# At most this long for one try of a watermark question: a try sent to a node that died
# waits out its whole timeout, while a new leader answers within a second or two.
_WATERMARK_TRY_S = 3.0
_BACKOFF_S = (0.05, 1.0)  # the first pause between tries of a question, and the longest
T = TypeVar("T")


def ask_until(
    question: Callable[[float], T],
    timeout: float,
    *,
    try_s: float,
    passing: Callable[[Exception], bool],
    refresh: Callable[[float], object],
    refresh_first: bool = False,
) -> T:
    """`question(wait)`'s answer (each try waits at most `try_s`), asked again with backoff
    while what it raises is `passing`, until `timeout`; the last error is raised as it was.

    `refresh(wait)` asks a live broker for the topic's metadata, before each try
    (`refresh_first`) or between tries: a client's view of which broker leads a partition
    is otherwise as old as its last request, and each try would go to a leader that died
    (seen in the three-node cluster: queryd's watermark questions, an admin client's
    list-offsets, timing out try after try after the leader they knew was killed)."""
    deadline = time.monotonic() + timeout
    pause = _BACKOFF_S[0]
    while True:
        wait = max(0.1, min(deadline - time.monotonic(), try_s))
        try:
            if refresh_first:
                refresh(wait)
            return question(wait)
        except Exception as exc:
            if not passing(exc) or time.monotonic() + pause >= deadline:
                raise
        if not refresh_first:
            refresh(max(0.1, min(deadline - time.monotonic(), wait)))
        time.sleep(pause)
        pause = min(pause * 2, _BACKOFF_S[1])


def watermarks(consumer: Consumer, topic: str, timeout: float) -> tuple[int, int]:
    """Partition 0's (low, high) watermarks from the broker. An answer of a moving leader
    (or any error librdkafka calls retriable, or a connection let go or lost while the
    cluster fails over), or no answer within a try's few seconds, is
    asked again until `timeout`, asking any live broker for the topic's metadata between
    tries (`ask_until`; in the three-node failover test, queryd answered 503 for 15 s
    after each restart of the leader it had known). Any other error, or the last one at
    the deadline, is raised as the `KafkaException` it was."""

    def question(wait: float) -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, 0), timeout=wait, cached=False
        )
        return int(low), int(high)

    stale = [0]  # answers from a metadata cache that lacks the partition, so far

    def passing(exc: Exception) -> bool:
        error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
        if not isinstance(error, KafkaError):
            return False
        if error.code() in _STALE_METADATA:
            # The client's cached metadata lacks the partition: a node restarting may have
            # answered a metadata request before it knew every topic, and a consumer that
            # never fetches would keep that answer for minutes (queryd answered 503 for
            # 2.5 minutes in the failover test). Asked again after a refresh, a few times;
            # a topic that is really gone still fails, soon.
            stale[0] += 1
            return stale[0] <= _STALE_TRIES
        return (
            error.retriable()
            or error.code() in _LEADER_MOVING
            or error.code() in _CONNECTIONS_MOVING
            or error.code() == KafkaError._TIMED_OUT
        )

    def refresh(wait: float) -> None:
        try:
            consumer.list_topics(topic, timeout=wait)
        except KafkaException:
            pass  # no broker answered: the next try says so, or the deadline does

    return ask_until(question, timeout, try_s=_WATERMARK_TRY_S, passing=passing, refresh=refresh)


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


def _exists(admin: AdminClient, topic: str, timeout: float, denied: Callable[[Any], None]) -> bool:
    """Whether the cluster's metadata lists the topic now (False when it cannot be read:
    creating it then says why); `denied` raises on a metadata error that is a refusal."""
    try:
        metadata = admin.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException:
        return False
    denied(metadata)
    return metadata is not None and metadata.error is None and bool(metadata.partitions)


def ensure_topic(
    admin: AdminClient,
    topic: str,
    replication_factor: int | None,
    *,
    create: bool = True,
    timeout: float = _TIMEOUT_S,
    min_message_bytes: int | None = None,
    bootstrap: str | None = None,
    message_bytes: int | None = None,
) -> int:
    """Create the topic (one partition, never compacted, unlimited retention) or check it.

    `replication_factor`: the least replication the topic must have (a new topic gets it;
    None: the cluster's default.replication.factor, and no check). A topic with fewer
    replicas, or whose ``min.insync.replicas`` exceeds its replicas (no ``acks=all`` write
    could ever be acknowledged), raises `TopicConfigError`, as does a cluster with fewer
    brokers than the replication asked for.
    `create=False` (readers): a topic that does not exist raises `LogNotFoundError`.
    `min_message_bytes`: the least ``max.message.bytes`` the topic must take (writers), or
    `TopicConfigError`. `message_bytes` (the projector's derived topics, whose events can
    be larger than the record that caused them): the topic's ``max.message.bytes``, set on
    creation and raised to it on a topic that takes less. A broker that does not answer
    within `timeout` seconds in all raises `KafkaUnavailableError` (naming `bootstrap`, the
    brokers, when given). Returns the number of replicas of its partition.
    """
    deadline = time.monotonic() + timeout
    where = f"broker {bootstrap}, " if bootstrap else ""

    def left() -> float:
        return max(0.1, deadline - time.monotonic())

    def unavailable(operation: str, exc: BaseException | str) -> KafkaLogError:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            denied = auth_error(topic, "write" if create else "read", exc.args[0])
            if denied is not None:
                return denied
        cause = exc if isinstance(exc, str) else error_cause(exc)
        return KafkaUnavailableError(
            f"log {topic}: cannot {operation} ({where}waited up to {timeout:g} s): {cause}"
        )

    def denied(metadata: Any) -> None:
        if metadata is not None and metadata.error is not None:
            refused = auth_error(topic, "write" if create else "read", metadata.error)
            if refused is not None:
                raise refused

    config = dict(TOPIC_CONFIG)
    if message_bytes is not None:
        config["max.message.bytes"] = str(message_bytes)
    if create and _exists(admin, topic, left(), denied):
        # Created already (the usual case): no create request, which goes to the cluster's
        # controller and waits for it when that node is down.
        create = False
        existed = True
    else:
        existed = False
    if create:
        try:
            futures = admin.create_topics(
                [
                    NewTopic(
                        topic,
                        num_partitions=1,
                        # -1: the cluster's default.replication.factor
                        replication_factor=replication_factor or -1,
                        config=config,
                    )
                ],
                request_timeout=left(),
            )
            futures[topic].result(timeout=left())
            log.info(
                "created topic %s (1 partition, rf=%s)", topic, replication_factor or "default"
            )
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if (
                isinstance(error, KafkaError)
                and error.code() == KafkaError.INVALID_REPLICATION_FACTOR
            ):
                asked = (
                    f"replication={replication_factor}"
                    if replication_factor
                    else ("the cluster's default.replication.factor")
                )
                raise TopicConfigError(
                    f"log {topic}: cannot create its topic with {asked}: {error_cause(exc)} "
                    f"({where}lower the location's replication= or add brokers)"
                ) from None
            if not isinstance(error, KafkaError) or error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise unavailable("create its topic", exc) from None
        except TimeoutError:
            raise unavailable("create its topic", "no answer") from None
    # A topic just created may take a moment to show in the metadata.
    while True:
        try:
            metadata = admin.list_topics(topic, timeout=left()).topics.get(topic)
        except KafkaException as exc:
            raise unavailable("read its metadata", exc) from None
        if metadata is not None and metadata.error is None and metadata.partitions:
            break
        denied(metadata)
        if (
            not create
            and not existed
            and (
                metadata is None
                or (
                    metadata.error is not None
                    and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                )
            )
        ):
            raise LogNotFoundError(
                f"log {topic}: no such topic on the broker; only writers create logs "
                "(check the location's LOG name)"
            )
        if time.monotonic() > deadline:
            raise unavailable("read its metadata", str(metadata and metadata.error))
        time.sleep(0.05)
    if len(metadata.partitions) != 1:
        raise TopicConfigError(
            f"topic {topic} has {len(metadata.partitions)} partitions; a memstream log is "
            "one partition, so that offsets are a total order (seq)"
        )
    replicas = len(next(iter(metadata.partitions.values())).replicas)
    if replication_factor is not None and replicas < replication_factor:
        raise TopicConfigError(
            f"log {topic}: topic {topic} has {replicas} replica(s), below the location's "
            f"replication={replication_factor}; reassign its partition to more brokers, or "
            "ask for less in the location"
        )
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    while True:
        try:
            configs = admin.describe_configs([resource], request_timeout=left())[resource].result(
                timeout=left()
            )
            break
        except KafkaException as exc:
            # On a cluster, the broker asked may learn of a topic just created a moment
            # after the one that listed it.
            error = exc.args[0] if exc.args else None
            unknown = (
                isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            )
            if not unknown or time.monotonic() > deadline:
                raise unavailable("read its configuration", exc) from None
            time.sleep(0.05)
        except TimeoutError:
            raise unavailable("read its configuration", "no answer") from None
    policy = configs["cleanup.policy"].value if "cleanup.policy" in configs else "delete"
    if "compact" in (policy or ""):
        raise TopicConfigError(
            f"topic {topic} has cleanup.policy={policy}; a memstream log is never compacted"
        )
    isr_entry = configs.get("min.insync.replicas")
    if isr_entry is not None and isr_entry.value and int(isr_entry.value) > replicas:
        raise TopicConfigError(
            f"log {topic}: topic {topic} has min.insync.replicas={isr_entry.value} but only "
            f"{replicas} replica(s), so no append could ever be acknowledged (acks=all); "
            f"set min.insync.replicas to at most {replicas}"
        )
    entry = configs.get("max.message.bytes")
    if min_message_bytes is not None and entry is not None and entry.value:
        if int(entry.value) < min_message_bytes:
            raise TopicConfigError(
                f"topic {topic} has max.message.bytes={entry.value}; a memstream log takes "
                f"records up to {MAX_RECORD_BYTES:,} bytes, so it needs at least "
                f"{min_message_bytes} (set max.message.bytes={TOPIC_MAX_MESSAGE_BYTES} on the "
                "topic, or on the broker as message.max.bytes)"
            )
    if message_bytes is not None and (entry is None or int(entry.value or 0) < message_bytes):
        wanted = ConfigEntry(
            "max.message.bytes",
            str(message_bytes),
            incremental_operation=AlterConfigOpType.SET,
        )
        try:
            admin.incremental_alter_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[wanted])],
                request_timeout=left(),
            )[resource].result(timeout=left())
        except (KafkaException, TimeoutError) as exc:
            raise unavailable(f"raise its max.message.bytes to {message_bytes}", exc) from None
        log.info("topic %s: max.message.bytes raised to %d", topic, message_bytes)
    return replicas
