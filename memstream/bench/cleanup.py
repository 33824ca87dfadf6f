"""What a Kafka benchmark made, removed when it ends: its logs' topics (each log and the
topics derived from it) and their Redis keys.

A benchmark run makes hundreds of topics on the shared stack (`bench cluster`: 300 a run).
Left behind, they pile up run after run, and every client that lists the cluster's topics
(a projector group looks for new logs every few seconds) pays for all of them: with about
8,000 topics left by earlier runs and tests, `bench cluster` took 29 s instead of 8 s to
have its logs owned, and its writers waited seconds for metadata.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from producers.logs.kafka_client import client_conf
from projector.group import DERIVED_SUFFIXES

__all__ = ["drop_logs"]

log = logging.getLogger("memstream.bench")


def drop_logs(bootstrap: str, redis_url: str, logs: Iterable[str], timeout: float = 60.0) -> int:
    """Delete the topics of `logs` (log topic names) and the derived topics that exist,
    and every Redis key of theirs (``memstream:LOG:*``); the number of topics deleted.
    A benchmark's own data only: nothing else is named after its logs. Failures are
    logged, never raised (the run's figures are printed already)."""
    names = list(logs)
    wanted = {
        name
        for log_topic in names
        for name in (log_topic, *(log_topic + s for s in DERIVED_SUFFIXES))
    }
    admin = AdminClient(client_conf(bootstrap))
    deleted = 0
    try:
        present = [t for t in admin.list_topics(timeout=timeout).topics if t in wanted]
        # None left (deleted already): the client refuses an empty list with a ValueError.
        doomed = admin.delete_topics(present, operation_timeout=timeout) if present else {}
        for topic, future in doomed.items():
            try:
                future.result(timeout)
                deleted += 1
            except KafkaException as exc:
                log.warning("could not delete topic %s: %s", topic, exc)
    except KafkaException as exc:
        log.warning("could not list or delete the benchmark's topics: %s", exc)
    try:
        client = redis.Redis.from_url(redis_url, socket_timeout=timeout)
        mine = {name.encode() for name in names}
        # One pass over the keyspace (a topic name holds no ':'): memstream:LOG:...
        keys = [
            key
            for key in client.scan_iter(match="memstream:*", count=1000)
            if key.split(b":", 2)[1] in mine
        ]
        for start in range(0, len(keys), 1000):
            client.delete(*keys[start : start + 1000])
    except redis.RedisError as exc:
        log.warning("could not delete the benchmark's Redis keys: %s", exc)
    return deleted
