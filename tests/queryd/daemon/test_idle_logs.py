"""Issue 17: one daemon serves many logs without following each forever. A log no request
named for `idle_seconds` is dropped (its threads stopped, its state let go) and hydrated
again, from its snapshot and the log, by the next request that names it."""

from __future__ import annotations

import dataclasses
import threading
import time

import httpx
import pytest
from daemon_support import FAST, Seeded, in_process, seed, serve, wait_until

from producers.memory import Memory
from queryd.daemon import LogRegistry
from schemas.audit import Message

IDLE = dataclasses.replace(FAST, idle_seconds=0.5)


def threads_of(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.endswith(f"-{name}")]


def test_an_idle_log_is_dropped_and_hydrated_again_when_asked(seeded: Seeded) -> None:
    name = seeded.name
    with in_process([seeded.location], IDLE) as client:
        registry = client.app.state.daemon.registry  # type: ignore[attr-defined]
        handle = registry.handles[name]
        before = client.get(f"/logs/{name}").json()
        assert before["seq"] == seeded.last_seq
        assert threads_of(name), "the log is followed while it is asked for"
        wait_until(lambda: handle.dropped, 15, "the idle log dropped")
        # Gone from memory: no thread follows it, no state or open log is kept.
        wait_until(lambda: not threads_of(name), 10, "its threads gone")
        assert handle.state is None and handle.memory is None
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text  # an idle log is still served
        [summary] = ready.json()["logs"]
        assert summary["status"] == "idle" and "dropped from memory" in summary["error"]
        # Written while it was dropped: the next request sees it (read-your-writes).
        with Memory(seeded.location) as memory:
            new = memory.log.append([Message(speaker="user", content="while idle")])[0].seq
        answer = client.get(f"/logs/{name}", params={"min_seq": new})
        assert answer.status_code == 200, answer.text
        assert answer.json()["seq"] == new
        assert answer.json()["audit_events"] == before["audit_events"] + 1
        assert not handle.dropped and threads_of(name)


def test_a_log_asked_for_keeps_being_served_from_memory(seeded: Seeded) -> None:
    with in_process([seeded.location], IDLE) as client:
        handle = client.app.state.daemon.registry.handles[seeded.name]  # type: ignore[attr-defined]
        thread = handle._thread
        deadline = time.monotonic() + 2.0  # four idle periods
        while time.monotonic() < deadline:
            assert client.get(f"/logs/{seeded.name}").status_code == 200
            assert not handle.dropped
            time.sleep(0.1)
        assert handle._thread is thread and thread is not None and thread.is_alive()


def test_idle_seconds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_seconds"):
        LogRegistry([], idle_seconds=0)


def _status(http: httpx.Client, name: str) -> str:
    logs = http.get("/readyz").json()["logs"]
    return str(next(s["status"] for s in logs if s["name"] == name))


def test_a_log_with_an_open_lifecycle_stream_is_not_dropped(embedded_location: str) -> None:
    seeded = seed(embedded_location)
    with (
        serve([embedded_location], "--idle-seconds", "0.5", "--sse-keepalive", "0.5") as base,
        httpx.Client(base_url=base, timeout=httpx.Timeout(30, read=20)) as http,
    ):
        path = f"/logs/{seeded.name}/lifecycle"
        with http.stream("GET", path, params={"from_offset": 0}) as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            next(line for line in lines if line.startswith("data:"))
            deadline = time.monotonic() + 2.0  # four idle periods, no other request
            while time.monotonic() < deadline:
                assert _status(http, seeded.name) == "ready"
                time.sleep(0.2)
        wait_until(lambda: _status(http, seeded.name) == "idle", 15, "dropped once closed")
        answer = http.get(f"/logs/{seeded.name}")
        assert answer.status_code == 200 and answer.json()["seq"] == seeded.last_seq
        assert _status(http, seeded.name) == "ready"
