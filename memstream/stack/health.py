"""Health checks: a real produce/consume round trip for Kafka, PING for Redis."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from memstream.stack.config import HEALTH_TOPIC
from memstream.stack.secure import Credentials
from producers.logs.kafka_client import client_conf, ensure_topic

log = logging.getLogger(__name__)


def _conf(bootstrap: str, credentials: Credentials | None) -> dict[str, Any]:
    if credentials is None:
        return client_conf(bootstrap)
    return client_conf(bootstrap, username=credentials.username, password=credentials.password)


def broker_ids(bootstrap: str, timeout: float = 5.0) -> set[int]:
    """The node ids of the brokers the cluster's metadata lists now."""
    admin = AdminClient(client_conf(bootstrap))
    return set(admin.list_topics(timeout=timeout).brokers)


def kafka_roundtrip(
    bootstrap: str,
    timeout: float = 15.0,
    replication_factor: int = 1,
    credentials: Credentials | None = None,
) -> int:
    """Produce one record with acks=all and read it back by offset. Returns the offset.

    `credentials`: the admin's, on a secured stack (else the environment's, if any).

    Raises RuntimeError (or a `KafkaLogError`) when the broker does not complete the trip.
    The health topic is made and checked as a log topic is (one partition).
    """
    ensure_topic(
        AdminClient(_conf(bootstrap, credentials)),
        HEALTH_TOPIC,
        replication_factor=replication_factor,
        timeout=timeout,
        bootstrap=bootstrap,
    )
    token = uuid.uuid4().hex.encode()
    producer = Producer(
        {**_conf(bootstrap, credentials), "acks": "all", "enable.idempotence": True}
    )
    delivered: list[Message] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg)

    producer.produce(HEALTH_TOPIC, value=token, on_delivery=on_delivery)
    remaining = producer.flush(timeout)
    if errors:
        raise RuntimeError(f"health produce to {HEALTH_TOPIC} failed: {errors[0]}")
    if remaining or not delivered:
        raise RuntimeError(f"health produce to {HEALTH_TOPIC} not acknowledged in {timeout}s")
    offset = delivered[0].offset()
    assert offset is not None
    consumer = Consumer(
        {
            **_conf(bootstrap, credentials),
            # assign() below reads by offset without joining the group; librdkafka still
            # requires a group id.
            "group.id": f"memstream-health-{token.decode()}",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(HEALTH_TOPIC, 0, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise RuntimeError(f"health consume from {HEALTH_TOPIC}: {msg.error()}")
            if msg.value() == token:
                return offset
        raise RuntimeError(f"health record at offset {offset} not consumed within {timeout}s")
    finally:
        consumer.close()


def redis_ping(url: str, timeout: float = 2.0) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return bool(client.ping())
    finally:
        client.close()


def redis_version(url: str) -> str | None:
    client = redis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
    try:
        info = client.info("server")
        return str(info.get("redis_version"))
    except redis.RedisError:
        return None
    finally:
        client.close()
