"""Issue 11, item 16: /state is paged like /events, and built off the event loop.

Before, /state answered the whole state in one body (48.6 MB at 200k messages) and
serialized it on the event loop, so every other request waited. Now a page holds at most
`limit` content events (default 1000, at most 10000), `next_after_seq` continues it, the
pages of one state concatenate to exactly that state, and the page is built and
serialized in a worker thread: /healthz keeps answering while big pages are made.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import httpx
from daemon_support import in_process, serve
from fastapi.testclient import TestClient

from producers.memory import Memory
from projector.audit.state import MemoryState
from schemas.audit import Document, Message


def whole(memory: MemoryState) -> dict[str, Any]:
    """The state's lists as the daemon answers them, straight from the fold."""
    return {
        "visible_messages": sorted(str(message.id) for message in memory.visible_messages),
        "visible_documents": sorted(str(d.id) for d in memory.visible_documents),
        "deleted": sorted(str(k) for k in memory.deleted),
        "recall_stats": sorted((str(k), v.num_recalled) for k, v in memory.recall_stats.items()),
    }


def walk(client: TestClient, name: str, **params: Any) -> tuple[dict[str, Any], int]:
    """Every page of /state, concatenated; and how many pages there were."""
    got: dict[str, list[Any]] = {
        k: [] for k in ("visible_messages", "visible_documents", "deleted", "recall_stats")
    }
    pages, after = 0, None
    while True:
        query = {**params, **({"after_seq": after} if after is not None else {})}
        page = client.get(f"/logs/{name}/state", params=query)
        assert page.status_code == 200, page.text
        body = page.json()
        pages += 1
        content = (
            len(body["visible_messages"]) + len(body["visible_documents"]) + len(body["deleted"])
        )
        assert content <= params.get("limit", 1000)
        got["visible_messages"] += [m["id"] for m in body["visible_messages"]]
        got["visible_documents"] += [d["id"] for d in body["visible_documents"]]
        got["deleted"] += [d["id"] for d in body["deleted"]]
        got["recall_stats"] += [(s["id"], s["num_recalled"]) for s in body["recall_stats"]]
        params.setdefault("up_to_seq", body["up_to_seq"])  # every page: the same state
        after = body["next_after_seq"]
        if after is None:
            return {k: sorted(v) for k, v in got.items()}, pages


def test_pages_concatenate_to_exactly_the_state(embedded_location: str) -> None:
    with Memory(embedded_location) as writer:
        messages = writer.append_many(
            Message(speaker="u", content=f"note {i}", session_id=f"s{i % 3}") for i in range(2_300)
        )
        writer.append_many(Document(name=f"d{i}.txt", text=f"doc {i}") for i in range(200))
        for i in range(0, 600, 12):
            writer.delete(messages[i].id, "asked")
        for _ in range(3):
            writer.recall("note", limit=40)
        with in_process([embedded_location]) as client:
            first = client.get("/logs/memory-db/state")
            body = first.json()
            assert first.status_code == 200 and body["next_after_seq"] is not None
            assert len(body["visible_messages"]) + len(body["deleted"]) == 1000
            expected = whole(writer.replay())
            got, pages = walk(client, "memory-db")
            assert got == expected and pages == 3
            got, pages = walk(client, "memory-db", limit=700)
            assert got == expected and pages == 4
            # appended while paging: not in the pages of the state paged (up_to_seq)
            up_to = body["up_to_seq"]
            writer.add_message(Message(speaker="u", content="late"))
            got, _ = walk(client, "memory-db", up_to_seq=up_to, limit=900)
            assert got == expected
            # a state that fits in one page comes whole, as before paging
            small = client.get("/logs/memory-db/state", params={"up_to_seq": 99}).json()
            assert small["next_after_seq"] is None and len(small["visible_messages"]) == 100
            assert client.get("/logs/memory-db/state", params={"limit": 10_001}).status_code == 422
            assert client.get("/logs/memory-db/state", params={"limit": 0}).status_code == 422


def test_big_pages_are_built_off_the_event_loop(embedded_location: str) -> None:
    with Memory(embedded_location) as writer:
        for start in range(0, 60_000, 5_000):
            writer.append_many(
                Message(speaker="agent", content=f"message {i} " + "y" * 80)
                for i in range(start, start + 5_000)
            )
    with serve([embedded_location]) as base, httpx.Client(base_url=base, timeout=60) as http:
        default = http.get("/logs/memory-db/state")
        assert default.status_code == 200
        assert len(default.json()["visible_messages"]) == 1000  # bounded, not 60k
        assert default.json()["next_after_seq"] == 999
        # the heavy clients run in processes of their own: their parsing of megabytes of
        # JSON must not slow this process's /healthz probes
        script = (
            "import sys, time, httpx\n"
            "end = time.monotonic() + float(sys.argv[2])\n"
            "sizes = []\n"
            "with httpx.Client(base_url=sys.argv[1], timeout=60) as c:\n"
            "    while time.monotonic() < end:\n"
            "        r = c.get('/logs/memory-db/state',\n"
            "                  params={'limit': 10000, 'after_seq': 20000})\n"
            "        sizes.append(len(r.content) if r.status_code == 200 else -r.status_code)\n"
            "print(min(sizes), len(sizes))\n"
        )
        heavy = [
            subprocess.Popen([sys.executable, "-c", script, base, "9"], stdout=subprocess.PIPE)
            for _ in range(3)
        ]
        latencies = []
        try:
            time.sleep(1.0)
            deadline = time.monotonic() + 7
            while time.monotonic() < deadline:
                started = time.monotonic()
                assert http.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.05)
        finally:
            outputs = [p.communicate(timeout=120)[0].split() for p in heavy]
    smallest = min(int(out[0]) for out in outputs)
    pages = sum(int(out[1]) for out in outputs)
    assert smallest > 1_000_000, smallest  # every heavy answer was a 10k page
    latencies.sort()
    # before: each request serialized the whole state on the loop (18.7 MB here), and
    # /healthz waited behind it (p50 347 ms, max 1.14 s)
    assert latencies[len(latencies) // 2] < 0.15 and latencies[-1] < 1.0, latencies[-5:]
    print(
        f"healthz during {pages} pages of 10k: p50 {latencies[len(latencies) // 2] * 1000:.0f}"
        f" ms, max {latencies[-1] * 1000:.0f} ms"
    )


def test_chunked_serialization_writes_the_models_own_json(embedded_location: str) -> None:
    import json

    from queryd.audit.state_page import select_state
    from queryd.daemon import models
    from queryd.daemon.jsonbody import dump_chunked

    with Memory(embedded_location) as writer:
        stored = writer.append_many(Message(speaker="u", content=f"n{i}") for i in range(900))
        writer.append_many(Document(name=f"x{i}.txt", text="t") for i in range(30))
        writer.delete(stored[3].id, "asked")
        writer.recall("n1", limit=20)
        state = writer.replay()
    page = select_state(state, limit=1000)
    answer = models.StateAnswer.model_construct(
        seq=state.last_seq,
        up_to_seq=state.last_seq,
        visible_messages=page.visible_messages,
        visible_documents=page.visible_documents,
        deleted=[models.DeletedItem.model_construct(id=k, tombstone=v) for k, v in page.deleted],
        recall_stats=[
            models.RecallStat.model_construct(
                id=k, num_recalled=v.num_recalled, last_recalled_at=v.last_recalled_at
            )
            for k, v in page.recall_stats
        ],
        next_after_seq=None,
    )
    events = models.EventsAnswer.model_construct(seq=1, events=state.events, next_after_seq=None)
    for model in (answer, events):
        own = type(model).__pydantic_serializer__.to_json(model, by_alias=True)
        chunked = dump_chunked(model, chunk=64)
        assert json.loads(chunked) == json.loads(own) and len(chunked) == len(own)
