"""Issue 11, items 10 and 11 (queryd side): what /readyz and /metrics say of a log.

- The projector's liveness and lag, from its status record in Redis (written here as the
  projector writes it): up, stale, missing, malformed. A projector that is not up does
  not make the daemon unready (reads do not need it) unless the probe asks for it.
- A log that does not exist (a typo in --log): 503 naming the log and "does not exist",
  reads 503 saying so, nothing created on disk or on the broker; the daemon keeps
  checking, and serves the log once a writer creates it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka.admin import AdminClient
from daemon_support import FAST, wait_until, write_status
from fastapi.testclient import TestClient

from producers.logs.location import is_kafka_location, parse_kafka_location
from producers.memory import Memory
from projector.status import status_key
from queryd.daemon import create_app, log_name
from schemas.audit import Message


@pytest.mark.kafka
def test_readyz_and_metrics_report_the_projector(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with Memory(location) as writer:
        for i in range(3):
            writer.add_message(Message(speaker="u", content=f"m{i}"))
    key = status_key(parse_kafka_location(location).key_prefix)
    store = redis.Redis.from_url(redis_url)
    app = create_app([location], FAST)
    try:
        with TestClient(app, base_url="http://localhost") as client:
            assert app.state.daemon.registry.wait_ready(60)

            def report() -> dict[str, Any]:
                return client.get("/readyz").json()["logs"][0]["projector"]  # type: ignore[no-any-return]

            # no record: no projector has run
            missing = wait_until(
                lambda: (r := report())["state"] == "missing" and r, 5, "missing", interval=0.05
            )
            assert key in missing["cause"]
            assert client.get("/readyz").status_code == 200  # reads do not need it
            assert client.get("/readyz", params={"require_projector": True}).status_code == 503

            # a fresh heartbeat: up, with its lag and the lifecycle lag against our head (2)
            written = time.monotonic()
            write_status(redis_url, location, folded=1, published=0, log_end=2)
            up = wait_until(lambda: (r := report())["state"] == "up" and r, 5, "up", interval=0.05)
            # The heartbeat's age is the time since it was written, however slow the
            # answer was (a /readyz that took 8 s under CI's load once made it 7.95 s).
            since = time.monotonic() - written
            assert up["owner"] == "test-projector" and up["heartbeat_age_s"] <= since + 0.5
            assert (up["folded_seq"], up["lag"], up["published_seq"], up["lifecycle_lag"]) == (
                1,
                1,
                0,
                2,
            )
            assert client.get("/readyz", params={"require_projector": True}).status_code == 200
            metrics = client.get("/metrics").text
            for line in (
                f'memstream_queryd_projector_up{{log="{unique_name}"}} 1.0',
                f'memstream_queryd_projector_lag_records{{log="{unique_name}"}} 1.0',
                f'memstream_queryd_lifecycle_lag_records{{log="{unique_name}"}} 2.0',
                f'memstream_queryd_log_available{{log="{unique_name}"}} 1.0',
            ):
                assert line in metrics, line
            assert f'memstream_queryd_projector_heartbeat_age_seconds{{log="{unique_name}"}}' in (
                metrics
            )

            # a heartbeat older than three lease periods: the projector stopped
            write_status(
                redis_url, location, folded=2, published=2, log_end=3, age_s=10, lease_ms=1000
            )
            stale = wait_until(
                lambda: (r := report())["state"] == "stale" and r, 5, "stale", interval=0.05
            )
            assert re.search(r"heartbeat was 1\d\.\d s ago \(stale after 3 s", stale["cause"])
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["ready"] is True
            assert client.get("/readyz", params={"require_projector": True}).status_code == 503
            metrics = client.get("/metrics").text
            assert f'memstream_queryd_projector_up{{log="{unique_name}"}} 0.0' in metrics

            # bytes that are not a status (Redis is untrusted): reported, never raised
            store.set(key, b"\x80not json" * 10)
            bad = wait_until(
                lambda: (r := report())["state"] == "unknown" and r, 5, "malformed", interval=0.05
            )
            assert "malformed" in bad["cause"]
            store.set(key, b"{" * 5000)
            wait_until(
                lambda: "malformed" in (report()["cause"] or ""), 5, "oversized", interval=0.05
            )
            assert client.get("/healthz").status_code == 200
    finally:
        store.delete(key)
        store.close()


def test_an_embedded_log_has_no_projector(embedded_location: str) -> None:
    with Memory(embedded_location) as writer:
        writer.add_message(Message(speaker="u", content="x"))
    app = create_app([embedded_location], FAST)
    with TestClient(app, base_url="http://localhost") as client:
        assert app.state.daemon.registry.wait_ready(30)
        body = wait_until(
            lambda: (r := client.get("/readyz")).status_code == 200 and r, 5, "ok", interval=0.05
        )
        (summary,) = body.json()["logs"]
        assert summary["projector"] is None and summary["status"] == "ready"
        assert client.get("/readyz", params={"require_projector": True}).status_code == 200


def _nothing_created(location: str, request: pytest.FixtureRequest) -> None:
    if is_kafka_location(location):
        kafka = parse_kafka_location(location)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        topics = admin.list_topics(timeout=10).topics
        assert kafka.topic not in topics and kafka.lifecycle_topic not in topics
        with redis.Redis.from_url(kafka.redis_url) as store:
            assert store.keys(f"{kafka.key_prefix}*") == []
    else:
        assert not Path(location).exists(), f"{location} was created by a reader"


def test_a_log_that_does_not_exist_is_reported_and_not_created(
    location: str, request: pytest.FixtureRequest
) -> None:
    name = log_name(location)
    app = create_app([location], FAST)
    with TestClient(app, base_url="http://localhost") as client:
        ready = wait_until(
            lambda: (r := client.get("/readyz")).json()["logs"][0]["status"] == "missing" and r,
            30,
            "reported missing",
            interval=0.05,
        )
        assert ready.status_code == 503 and ready.json()["ready"] is False
        (summary,) = ready.json()["logs"]
        assert f"log {name!r} does not exist" in summary["error"]
        assert summary["hydrated"] is False and summary["seq"] is None
        for path in ("search?q=x", "state", "graph/stats", "lifecycle"):
            got = client.get(f"/logs/{name}/{path}")
            assert got.status_code == 503, (path, got.text)
            assert f"log {name!r} does not exist" in got.json()["message"]
            assert got.headers["Retry-After"]
        recall = client.post(f"/logs/{name}/recall", json={"query": "x"})
        assert recall.status_code == 503 and "does not exist" in recall.json()["message"]
        time.sleep(1.5)  # several attempts to open it (reopen_interval 0.5 s)
        _nothing_created(location, request)

        # a writer creates it later: the daemon, still checking, serves it
        with Memory(location) as writer:
            stored = writer.add_message(Message(speaker="u", content="created later"))
        wait_until(
            lambda: client.get("/readyz").status_code == 200,
            30,
            "served once created",
            interval=0.05,
        )
        got = client.get(f"/logs/{name}/search", params={"q": "later", "min_seq": stored.seq})
        assert got.status_code == 200 and got.json()["items"][0]["content"] == "created later"
