"""Issue 11, items 9 and 10: queryd through a real broker outage and a real Redis outage.

A broker and a Redis of the test's own (the shared stack is never stopped) serve a log to a
real `memstream queryd serve`. The broker is frozen (SIGSTOP: connections stay open and
nothing answers, the worst case for a client), then killed and started again; Redis is
frozen. Throughout, /healthz, /readyz, searches and /metrics must answer within a second
or so: liveness never asks the broker, readiness says 503 naming the log and the cause,
reads answer from the state already folded, min_seq waits and recalls fail fast; after the
broker returns, the daemon catches up. Everything started here is stopped whatever happens.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from daemon_support import serve, wait_until, write_status
from private_stack import PrivateStack, private_stack

from producers.memory import Memory
from schemas.audit import Message

pytestmark = pytest.mark.kafka

QUICK = 1.5  # seconds: "well under a second or two", on a machine shared by five sessions


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateStack]:
    with private_stack(tmp_path_factory.mktemp("own-stack")) as own:
        yield own


def timed(http: httpx.Client, path: str, **kwargs: Any) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = http.get(path, **kwargs)
    return response, time.monotonic() - started


def assert_serving_through_outage(http: httpx.Client, name: str, seq: int) -> dict[str, Any]:
    """Until /readyz says 503: every probe answers quickly, reads answer from the state."""
    deadline = time.monotonic() + 12
    while True:
        health, t_health = timed(http, "/healthz")
        assert health.status_code == 200 and t_health < QUICK, (health.text, t_health)
        search, t_search = timed(http, f"/logs/{name}/search", params={"q": "outage"})
        assert search.status_code == 200 and t_search < QUICK, (search.text, t_search)
        assert search.json()["seq"] == seq  # the state already folded, and says which
        metrics, t_metrics = timed(http, "/metrics")
        assert metrics.status_code == 200 and t_metrics < QUICK, t_metrics
        ready, t_ready = timed(http, "/readyz")
        assert t_ready < QUICK, t_ready
        if ready.status_code == 503:
            return ready.json()  # type: ignore[no-any-return]
        assert ready.status_code == 200, ready.text
        assert time.monotonic() < deadline, "/readyz never said 503 during the outage"
        time.sleep(0.2)


def test_a_broker_outage_does_not_freeze_queryd(stack: PrivateStack, unique_name: str) -> None:
    location = stack.location(unique_name)
    with Memory(location) as writer:
        for i in range(3):
            writer.add_message(Message(speaker="u", content=f"before the outage {i}"))
    name = unique_name
    try:
        with serve([location]) as base, httpx.Client(base_url=base, timeout=10) as http:
            before = http.get(f"/logs/{name}/search", params={"q": "outage"}).json()
            assert before["seq"] == 2 and len(before["items"]) == 3

            # -- frozen broker ---------------------------------------------------------
            stack.pause_kafka()
            body = assert_serving_through_outage(http, name, seq=2)
            (summary,) = body["logs"]
            assert body["ready"] is False and summary["status"] == "unavailable"
            assert name in summary["error"] and "Kafka broker" in summary["error"]
            assert summary["seq"] == 2
            # a seq the state has not reached cannot come now: said at once, with the seq
            late, t_late = timed(http, f"/logs/{name}/search", params={"q": "x", "min_seq": 3})
            assert late.status_code == 503 and t_late < QUICK, (late.text, t_late)
            assert late.json()["seq"] == 2 and "unavailable" in late.json()["message"]
            started = time.monotonic()
            recall = http.post(f"/logs/{name}/recall", json={"query": "outage"})
            assert recall.status_code == 503 and time.monotonic() - started < QUICK
            assert "not appended" in recall.json()["message"]
            metrics = http.get("/metrics").text
            assert f'memstream_queryd_log_available{{log="{name}"}} 0.0' in metrics

            # -- the broker answers again: the daemon catches up ------------------------
            stack.resume_kafka()
            with Memory(location) as writer:
                stored = writer.add_message(Message(speaker="u", content="after the outage"))
            wait_until(lambda: http.get("/readyz").status_code == 200, 60, "ready again")
            got = http.get(f"/logs/{name}/search", params={"q": "after", "min_seq": stored.seq})
            assert got.status_code == 200 and got.json()["seq"] >= stored.seq
            assert [i["content"] for i in got.json()["items"]] == ["after the outage"]

            # -- killed broker (connections refused), then started again ----------------
            stack.kill_kafka()
            body = assert_serving_through_outage(http, name, seq=stored.seq)
            assert body["logs"][0]["status"] == "unavailable"
            stack.restart_kafka()
            with Memory(location) as writer:
                again = writer.add_message(Message(speaker="u", content="after the restart"))
            wait_until(lambda: http.get("/readyz").status_code == 200, 90, "ready after restart")
            got = http.get(f"/logs/{name}/search", params={"q": "restart", "min_seq": again.seq})
            assert got.status_code == 200, got.text
            assert [i["content"] for i in got.json()["items"]] == ["after the restart"]
    finally:
        stack.resume_kafka()


def test_a_redis_outage_reports_the_projector_unknown_and_stays_ready(
    stack: PrivateStack, unique_name: str
) -> None:
    location = stack.location(unique_name)
    with Memory(location) as writer:
        writer.add_message(Message(speaker="u", content="one"))
        writer.add_message(Message(speaker="u", content="two"))
    write_status(stack.redis_url, location, folded=1, published=0, log_end=2)
    name = unique_name
    try:
        with serve([location]) as base, httpx.Client(base_url=base, timeout=10) as http:

            def projector() -> dict[str, Any]:
                return http.get("/readyz").json()["logs"][0]["projector"]  # type: ignore[no-any-return]

            up = wait_until(lambda: (p := projector())["state"] == "up" and p, 10, "projector up")
            assert up["folded_seq"] == 1 and up["published_seq"] == 0
            assert up["lag"] == 0 and up["lifecycle_lag"] == 1
            stack.pause_redis()
            deadline = time.monotonic() + 10
            while True:
                ready, t_ready = timed(http, "/readyz")
                assert t_ready < QUICK and ready.status_code == 200, (ready.text, t_ready)
                report = ready.json()["logs"][0]["projector"]
                if report["state"] == "unknown":
                    break
                assert time.monotonic() < deadline, "the projector never became unknown"
                time.sleep(0.2)
            assert "Redis" in report["cause"] and "did not answer" in report["cause"]
            search, t_search = timed(http, f"/logs/{name}/search", params={"q": "two"})
            assert search.status_code == 200 and t_search < QUICK
            metrics = http.get("/metrics").text
            assert f'memstream_queryd_projector_up{{log="{name}"}} 0.0' in metrics
            stack.resume_redis()
            wait_until(lambda: projector()["state"] == "up", 15, "projector up again")
    finally:
        stack.resume_redis()


def test_private_stack_is_separate_from_the_shared_one(
    stack: PrivateStack, kafka_bootstrap: str, redis_url: str
) -> None:
    # what the tests above stop must never be what every other session uses
    assert stack.bootstrap != kafka_bootstrap and stack.redis_url != redis_url
    assert Path(stack.paths.root).is_dir()
