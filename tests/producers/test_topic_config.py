"""Issue 17, misconfiguration refused clearly: a log topic with less replication than its
location asks for, ``min.insync.replicas`` above the topic's replicas (no ``acks=all``
append could ever be acknowledged), replication the cluster cannot give, and a broker list
none of which answers. Each fails opening the log, naming it and what is wrong, within a
bounded time, and leaves nothing behind."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from memstream.stack.probes import free_ports
from producers.logs.kafka import READ_TIMEOUT_ENV, KafkaLog
from producers.logs.kafka_client import TopicConfigError, client_conf
from producers.logs.location import parse_kafka_location
from producers.memory import Memory
from projector.service import Projector
from schemas.errors import LogUnavailableError

pytestmark = pytest.mark.kafka

READ_TIMEOUT = 3.0


def _make_topic(bootstrap: str, topic: str, replication: int, **config: str) -> None:
    admin = AdminClient(client_conf(bootstrap))
    new = NewTopic(topic, num_partitions=1, replication_factor=replication, config=config)
    admin.create_topics([new])[topic].result(30)


def _exists(bootstrap: str, topic: str) -> bool:
    admin = AdminClient(client_conf(bootstrap))
    return topic in admin.list_topics(timeout=10).topics


def test_replication_the_cluster_cannot_give_is_refused_and_creates_nothing(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    """The shared stack has one broker: a location asking for replication=3 cannot be met."""
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}&replication=3"
    with pytest.raises(TopicConfigError) as refused:
        Memory(location)
    text = str(refused.value)
    assert f"log {unique_name}" in text and "replication=3" in text, text
    assert not _exists(kafka_bootstrap, unique_name)


@pytest.mark.parametrize("create", [True, False], ids=["writer", "reader"])
def test_a_topic_with_less_replication_than_the_location_asks_is_refused(
    kafka_bootstrap: str, redis_url: str, unique_name: str, create: bool
) -> None:
    _make_topic(kafka_bootstrap, unique_name, 1)
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}&replication=2"
    with pytest.raises(TopicConfigError) as refused:
        KafkaLog(parse_kafka_location(location), create=create, read_timeout=10)
    text = str(refused.value)
    assert f"log {unique_name}" in text and "1 replica(s)" in text, text
    assert "replication=2" in text


def test_the_projector_refuses_a_topic_with_less_replication_than_asked(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    _make_topic(kafka_bootstrap, unique_name, 1)
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}&replication=2"
    with pytest.raises(TopicConfigError, match="below the location's replication=2"):
        Projector(location)


def test_min_insync_replicas_above_the_replicas_is_refused(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    """Every acks=all append to such a topic would fail (NOT_ENOUGH_REPLICAS) for ever:
    refused when the log is opened, not at the first append."""
    _make_topic(kafka_bootstrap, unique_name, 1, **{"min.insync.replicas": "2"})
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with pytest.raises(TopicConfigError) as refused:
        Memory(location)
    text = str(refused.value)
    assert f"log {unique_name}" in text, text
    assert "min.insync.replicas=2" in text and "1 replica(s)" in text, text


def test_no_replication_asked_takes_the_cluster_default(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    """Without replication= the topic gets the cluster's default.replication.factor (1
    here; 3 on the stack's cluster), and the location's text says nothing of it."""
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    assert str(parse_kafka_location(location)) == location
    with Memory(location):
        pass
    admin = AdminClient(client_conf(kafka_bootstrap))
    metadata = admin.list_topics(unique_name, timeout=10).topics[unique_name]
    assert len(metadata.partitions[0].replicas) == 1


def test_an_unreachable_broker_list_is_log_unavailable_in_bounded_time(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three brokers, none listening: opening the log (writer or reader) fails within the
    read timeout naming the log and the brokers, never hangs."""
    brokers = ",".join(f"127.0.0.1:{port}" for port in free_ports(3))
    topic = f"t-nowhere-{uuid.uuid4().hex[:8]}"
    location = f"kafka://{brokers}/{topic}?redis={redis_url}&replication=3"
    monkeypatch.setenv(READ_TIMEOUT_ENV, str(READ_TIMEOUT))
    for create in (True, False):
        started = time.monotonic()
        with pytest.raises(LogUnavailableError) as unavailable:
            Memory(location, create=create)
        assert time.monotonic() - started < READ_TIMEOUT + 3
        text = str(unavailable.value)
        assert f"log {topic}" in text and brokers in text, text
