"""A Kafka benchmark removes what it made, and nothing else (real broker, real Redis)."""

from __future__ import annotations

import redis
from confluent_kafka.admin import AdminClient

from memstream import Memory, Message
from memstream.bench.cleanup import drop_logs
from producers.logs.kafka_client import client_conf
from projector.service import Projector


def _topics(bootstrap: str, prefix: str) -> set[str]:
    admin = AdminClient(client_conf(bootstrap))
    return {t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)}


def test_drop_logs_removes_a_logs_topics_and_keys_and_spares_a_neighbour(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    mine, other = f"{unique_name}-a", f"{unique_name}-ab"  # the neighbour's name extends mine
    for name in (mine, other):
        location = f"kafka://{kafka_bootstrap}/{name}?redis={redis_url}"
        with Memory(location) as memory:
            memory.add_message(Message(speaker="u", content=f"hello {name}"))
        Projector(location).run(until_caught_up=True)  # lifecycle, memex topics, snapshot
    client = redis.Redis.from_url(redis_url)
    before = _topics(kafka_bootstrap, unique_name)
    assert {mine, f"{mine}.lifecycle", other, f"{other}.lifecycle"} <= before
    assert list(client.scan_iter(match=f"memstream:{mine}:*"))
    other_keys = sorted(client.scan_iter(match=f"memstream:{other}:*"))
    assert other_keys

    deleted = drop_logs(kafka_bootstrap, redis_url, [mine])

    after = _topics(kafka_bootstrap, unique_name)
    gone = {t for t in before if t == mine or t.startswith(f"{mine}.")}
    assert deleted == len(gone) >= 2
    assert not after & gone
    assert after == before - gone  # the neighbour's topics are all there
    assert not list(client.scan_iter(match=f"memstream:{mine}:*"))
    assert sorted(client.scan_iter(match=f"memstream:{other}:*")) == other_keys
    drop_logs(kafka_bootstrap, redis_url, [other])


def test_drop_logs_of_a_log_already_gone_deletes_nothing_and_raises_nothing(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    # Its failures are logged, never raised: a name with no topic left is no failure at
    # all (the client refuses to delete an empty list of topics).
    assert drop_logs(kafka_bootstrap, redis_url, [f"{unique_name}-never-made"]) == 0
