"""A real `memstream queryd serve` on a loopback port: read-your-writes with min_seq, the
SSE lifecycle stream resumed with Last-Event-ID, metrics, and JSON logs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from daemon_support import envelope, item_payload, projector_for, serve

from producers.memory import Memory
from queryd.daemon import SEQ_HEADER, log_name
from schemas.audit import Message


def sse_events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The events of an SSE response: dicts of id, event, data (comments skipped)."""
    fields: dict[str, Any] = {}
    for line in response.iter_lines():
        if not line:
            if "data" in fields:
                yield fields
            fields = {}
            continue
        if line.startswith(":"):
            continue
        key, _, value = line.partition(":")
        fields[key] = value[1:] if value.startswith(" ") else value


def test_read_your_writes_through_a_real_daemon(location: str) -> None:
    name = log_name(location)
    with Memory(location) as memory:
        memory.add_message(Message(speaker="u", content="before the daemon"))
        with serve([location]) as base, httpx.Client(base_url=base, timeout=30) as http:
            for i in range(5):
                stored = memory.add_message(Message(speaker="u", content=f"fresh note {i}"))
                got = http.get(
                    f"/logs/{name}/search", params={"q": f"fresh note {i}", "min_seq": stored.seq}
                )
                assert got.status_code == 200, got.text
                assert got.json()["seq"] >= stored.seq
                assert int(got.headers[SEQ_HEADER]) >= stored.seq
                assert str(stored.id) in [item["id"] for item in got.json()["items"]]
            appended, _ = memory.log.transact(
                lambda state: (
                    [
                        envelope(
                            {"type": "memory.create", "item": item_payload("i-new", authority=0.4)}
                        )
                    ],
                    None,
                )
            )
            seq = appended[0].seq
            items = http.post(
                f"/logs/{name}/graph/items/query",
                params={"min_seq": seq},
                json={"filter": {"ids": ["i-new"]}},
            )
            assert items.status_code == 200 and items.json()["total"] == 1
            recall = http.post(f"/logs/{name}/recall", json={"query": "fresh note"})
            assert recall.status_code == 200
            recall_seq = recall.json()["recall"]["seq"]
            assert recall_seq == seq + 1
            # the producer's own state sees the daemon's recall
            assert memory.log.state(min_seq=recall_seq).last_seq == recall_seq  # type: ignore[union-attr]


def test_sse_client_reconnects_with_last_event_id_and_misses_nothing(location: str) -> None:
    name = log_name(location)
    with Memory(location) as memory:
        for i in range(4):
            memory.add_message(Message(speaker="u", content=f"early {i}"))
        with (
            projector_for(location),
            serve([location], "--sse-keepalive", "0.5") as base,
            httpx.Client(base_url=base, timeout=httpx.Timeout(30, read=20)) as http,
        ):
            received: list[dict[str, Any]] = []
            # first connection: read three events, then drop the connection
            with http.stream("GET", f"/logs/{name}/lifecycle", params={"from_offset": 0}) as r:
                assert r.status_code == 200
                assert r.headers["content-type"].startswith("text/event-stream")
                for event in sse_events(r):
                    received.append(event)
                    if len(received) == 3:
                        break
            # meanwhile, more is written
            for i in range(3):
                memory.add_message(Message(speaker="u", content=f"late {i}"))
            memory.delete(memory.events()[0].id, "asked")
            expected = lifecycle_offsets(memory, until=8)
            # reconnect as an EventSource does: the same URL plus Last-Event-ID
            headers = {"Last-Event-ID": received[-1]["id"]}
            with http.stream(
                "GET", f"/logs/{name}/lifecycle", params={"from_offset": 0}, headers=headers
            ) as r:
                assert r.status_code == 200
                for event in sse_events(r):
                    received.append(event)
                    if len(received) == len(expected):
                        break
    offsets = [int(e["id"]) for e in received]
    assert offsets == expected == list(range(len(expected)))
    datas = [json.loads(e["data"]) for e in received]
    assert [d["offset"] for d in datas] == offsets
    assert [e["event"] for e in received][-1] == "deletion.appended"
    assert [d["envelope"]["payload"]["event"]["content"] for d in datas[:7]] == [
        "early 0",
        "early 1",
        "early 2",
        "early 3",
        "late 0",
        "late 1",
        "late 2",
    ]


def test_metrics_health_and_json_logs(embedded_location: str, tmp_path: Any) -> None:
    with Memory(embedded_location) as memory:
        memory.add_message(Message(speaker="u", content="hello metrics"))
    output = tmp_path / "queryd.log"
    with (
        serve([embedded_location], "--log-format", "json", output=output) as base,
        httpx.Client(base_url=base, timeout=30) as http,
    ):
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").json()["ready"] is True
        assert http.get("/logs/memory-db/search", params={"q": "hello"}).status_code == 200
        assert http.get("/openapi.json").json()["info"]["title"] == "memstream queryd"
        text = http.get("/metrics").text
    assert 'memstream_queryd_request_seconds_count{method="GET",route="/logs/{log}/search"' in text
    assert 'memstream_queryd_log_seq{log="memory-db"} 0.0' in text
    assert 'memstream_queryd_log_lag_records{log="memory-db"} 0.0' in text
    lines = [json.loads(line) for line in output.read_text().splitlines() if line.strip()]
    access = [entry for entry in lines if entry["logger"] == "memstream.queryd.access"]
    assert any(e["path"] == "/logs/memory-db/search" and e["status"] == 200 for e in access)
    assert all({"ts", "level", "message"} <= entry.keys() for entry in lines)


def test_serve_refuses_two_logs_with_one_name(tmp_path: Any) -> None:
    import subprocess

    from daemon_support import MEMSTREAM

    a, b = tmp_path / "x" / "memory-db", tmp_path / "y" / "memory-db"
    started = time.monotonic()
    done = subprocess.run(
        [str(MEMSTREAM), "queryd", "serve", "--log", str(a), "--log", str(b), "--port", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "memory-db" in done.stderr
    assert time.monotonic() - started < 60


def lifecycle_offsets(memory: Memory, until: int, timeout: float = 30) -> list[int]:
    """The lifecycle stream's offsets, once it holds `until` events (the projector publishes
    them on Kafka; the embedded log derives them)."""
    deadline = time.monotonic() + timeout
    while True:
        offsets = [rec.offset for rec in memory.lifecycle(0, timeout=0.5)]
        if len(offsets) >= until or time.monotonic() > deadline:
            return offsets
