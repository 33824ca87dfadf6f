"""Bad input: 4xx naming the field, 404 for unknown logs and ids, 504 on a min_seq timeout,
nothing a client sends changes the log except a recall; schemathesis finds no 5xx."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from daemon_support import CHILD, FAST, ROOT, Seeded, in_process, seed
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, settings

from producers.memory import Memory
from queryd.daemon import SEQ_HEADER, DaemonSettings, LogRegistry, create_app
from schemas.audit import Message


def message_of(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body["message"], str) and body["message"]
    return str(body["message"])


def test_unknown_log_and_ids_are_404(client: TestClient, seeded: Seeded) -> None:
    assert "'nope'" in message_of(client.get("/logs/nope/state"), 404)
    assert seeded.name in message_of(client.post("/logs/nope/graph/items/query", json={}), 404)
    base = f"/logs/{seeded.name}"
    missing = "00000000-0000-4000-8000-000000000000"
    assert "event_id" in message_of(client.get(f"{base}/events/{missing}"), 404)
    for path in [
        "graph/items/zzz",
        "graph/items/zzz/support_tree",
        "graph/items/zzz/support_set",
        "graph/items/zzz/dependents",
        "graph/items/zzz/aliases",
        "graph/items/zzz/alias_group",
        "graph/items/zzz/parents",
        "graph/items/zzz/related",
    ]:
        assert "item_id" in message_of(client.get(f"{base}/{path}"), 404), path
    assert "edge_id" in message_of(client.get(f"{base}/graph/edges/zzz"), 404)
    assert "intent_id" in message_of(client.get(f"{base}/graph/intents/zzz"), 404)
    assert "task_id" in message_of(client.get(f"{base}/graph/tasks/zzz"), 404)
    assert "no such endpoint" in message_of(client.get("/nowhere"), 404)
    assert "not allowed" in message_of(client.delete(f"{base}/state"), 405)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Seeded]]:
    """One embedded daemon for the many malformed-input cases (validation happens before
    any log is read, so the mode does not matter there)."""
    seeded_ = seed(str(tmp_path_factory.mktemp("malformed") / "memory-db"))
    with in_process([seeded_.location]) as c:
        yield c, seeded_


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "field"),
    [
        ("get", "events/not-a-uuid", {}, "path.event_id"),
        ("get", "events", {"params": {"limit": -1}}, "query.limit"),
        ("get", "events", {"params": {"limit": "ten"}}, "query.limit"),
        ("get", "events", {"params": {"kind": "memo"}}, "query.kind"),
        ("get", "events", {"params": {"after_seq": "x"}}, "query.after_seq"),
        ("get", "state", {"params": {"up_to_seq": "1.5"}}, "query.up_to_seq"),
        ("get", "state", {"params": {"min_seq": -3}}, "query.min_seq"),
        ("get", "search", {}, "query.q"),
        ("post", "recall", {"json": {"query": ""}}, "body.query"),
        ("post", "recall", {"json": {"query": "x", "limt": 3}}, "body.limt"),
        (
            "post",
            "recall",
            {"content": b"{not json", "headers": {"content-type": "application/json"}},
            "body",
        ),
        (
            "post",
            "graph/items/query",
            {"json": {"filter": {"or": [{"scop": "x"}]}}},
            "body.filter.or.0.scop",
        ),
        (
            "post",
            "graph/items/query",
            {"json": {"options": {"sort": [{"field": "size"}]}}},
            "body.options.sort",
        ),
        ("post", "graph/items/query", {"json": {"options": {"limit": -1}}}, "body.options.limit"),
        ("post", "graph/items/query", {"json": []}, "body"),
        (
            "post",
            "graph/scored",
            {
                "content": b'{"weights": {"authority": Infinity}}',
                "headers": {"content-type": "application/json"},
            },
            "body.weights.authority",
        ),
        (
            "post",
            "graph/scored",
            {"json": {"weights": {"decay": {"rate": 2, "interval": "day", "type": "linear"}}}},
            "body.weights.decay.rate",
        ),
        ("post", "graph/smart_retrieve", {"json": {"budget": -1, "weights": {}}}, "body.budget"),
        (
            "post",
            "graph/smart_retrieve",
            {"json": {"budget": 1, "weights": {}, "contradictions": "ignore"}},
            "body.contradictions",
        ),
        (
            "post",
            "graph/intents/query",
            {"json": {"filter": {"status": "done"}}},
            "body.filter.status",
        ),
        (
            "post",
            "graph/tasks/query",
            {"json": {"filter": {"statuses": "running"}}},
            "body.filter.statuses",
        ),
        ("post", "graph/export_slice", {"json": {"memory_ids": "abc"}}, "body.memory_ids"),
        ("get", "graph/items/x/related", {"params": {"direction": "up"}}, "query.direction"),
        ("get", "graph/contradictions", {"params": {"offset": -1}}, "query.offset"),
        ("get", "lifecycle", {"headers": {"Last-Event-ID": "abc"}}, "Last-Event-ID"),
        ("get", "lifecycle", {"params": {"from_offset": -1}}, "query.from_offset"),
    ],
)
def test_malformed_input_is_422_naming_the_field(
    shared: tuple[TestClient, Seeded],
    method: str,
    path: str,
    kwargs: dict[str, Any],
    field: str,
) -> None:
    client, seeded = shared
    response = getattr(client, method)(f"/logs/{seeded.name}/{path}", **kwargs)
    assert field in message_of(response, 422)


def test_min_seq_waits_then_times_out_naming_the_seq_reached(
    client: TestClient, seeded: Seeded
) -> None:
    base = f"/logs/{seeded.name}"
    fine = client.get(f"{base}/state", params={"min_seq": seeded.last_seq})
    assert fine.status_code == 200 and fine.json()["seq"] == seeded.last_seq
    started = time.monotonic()
    late = client.get(f"{base}/graph/stats", params={"min_seq": seeded.last_seq + 5})
    waited = time.monotonic() - started
    message = message_of(late, 504)
    assert "timed out" in message and f"seq {seeded.last_seq}" in message
    assert late.json()["seq"] == seeded.last_seq
    assert late.headers[SEQ_HEADER] == str(seeded.last_seq)
    assert FAST.min_seq_timeout <= waited < FAST.min_seq_timeout + 2


def test_a_read_waiting_for_min_seq_sees_a_write_that_arrives_meanwhile(
    embedded_location: str,
) -> None:
    import threading

    with Memory(embedded_location) as memory:
        memory.add_message(Message(speaker="u", content="first"))
        settings_ = DaemonSettings(min_seq_timeout=5.0, poll_interval=0.01)
        with in_process([embedded_location], settings_) as c:
            timer = threading.Timer(
                0.3, lambda: memory.add_message(Message(speaker="u", content="second late"))
            )
            timer.start()
            got = c.get("/logs/memory-db/search", params={"q": "late", "min_seq": 1})
            timer.join()
    assert got.status_code == 200 and got.json()["seq"] == 1
    assert [i["content"] for i in got.json()["items"]] == ["second late"]


def _audit_head(location: str) -> tuple[int | None, int]:
    """(last seq, records that are not recalls): what reads must leave alone."""
    with Memory(location) as memory:
        state = memory.log.state()
        recalls = len(memory.events(kind="recall"))
    return state.last_seq, (state.next_seq - recalls)


def test_only_a_recall_changes_the_log(client: TestClient, seeded: Seeded) -> None:
    before = _audit_head(seeded.location)
    base = f"/logs/{seeded.name}"
    for path in [
        "state",
        "events",
        "search?q=cat",
        "graph/stats",
        "graph/contradictions",
        f"graph/items/{ROOT}/dependents?transitive=true",
        "rejections",
    ]:
        assert client.get(f"{base}/{path}").status_code == 200
    client.post(f"{base}/graph/items/query", json={"filter": {"not": {"x": 1}}})
    client.post(f"{base}/graph/export_slice", json={"memory_ids": [CHILD]})
    assert _audit_head(seeded.location) == before
    assert client.post(f"{base}/recall", json={"query": "cat"}).status_code == 200
    after = _audit_head(seeded.location)
    assert after == (before[0] + 1, before[1])  # type: ignore[operator]


def test_not_ready_while_hydrating_is_503(embedded_location: str) -> None:
    gate_open = __import__("threading").Event()

    def slow_open(location: str) -> Memory:
        gate_open.wait(10)
        return Memory(location)

    from queryd.daemon import LogHandle

    registry = LogRegistry([LogHandle(embedded_location, opener=slow_open)])
    app = create_app(registry, FAST)
    with TestClient(app, base_url="http://localhost") as c:
        assert c.get("/healthz").status_code == 200
        assert c.get("/readyz").status_code == 503
        assert "not ready" in message_of(c.get("/logs/memory-db/state"), 503)
        gate_open.set()
        assert registry.wait_ready(10)
        assert c.get("/readyz").status_code == 200


# --- schemathesis: nothing in the OpenAPI document's space gives a 5xx ---------------------------


# The schema must exist when the module is collected; the log it serves is seeded (and the
# registry started) by the module fixture below, in a directory made now and removed then.
_FUZZ_DIR = Path(tempfile.mkdtemp(prefix="memstream-queryd-fuzz-"))
_FUZZ_REGISTRY = LogRegistry.from_locations([str(_FUZZ_DIR / "memory-db")], poll_interval=0.01)
_FUZZ_APP = create_app(
    _FUZZ_REGISTRY,
    DaemonSettings(
        min_seq_timeout=0.05, poll_interval=0.01, sse_keepalive=0.2, allowed_hosts=("testserver",)
    ),  # schemathesis' ASGI client's Host
)
# SSE streams do not end on their own; they are tested with a real client instead.
schema = schemathesis.openapi.from_asgi("/openapi.json", _FUZZ_APP).exclude(
    path="/logs/{log}/lifecycle"
)
_BUDGET_S = 45.0


@pytest.fixture(scope="module")
def fuzzed() -> Iterator[dict[str, Any]]:
    seeded_ = seed(str(_FUZZ_DIR / "memory-db"))
    _FUZZ_REGISTRY.acquire(None)  # held across schemathesis' calls (each runs a lifespan)
    assert _FUZZ_REGISTRY.wait_ready(30)
    try:
        yield {"seeded": seeded_, "started": time.monotonic()}
    finally:
        _FUZZ_REGISTRY.release()
        shutil.rmtree(_FUZZ_DIR, ignore_errors=True)


@schema.parametrize()
@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_no_5xx_anywhere_in_the_openapi_document(case: Any, fuzzed: dict[str, Any]) -> None:
    if time.monotonic() - fuzzed["started"] > _BUDGET_S:
        return  # a time cap: the examples already run cover the budget
    seeded_: Seeded = fuzzed["seeded"]
    params = case.path_parameters or {}
    if "log" in params and len(str(params["log"])) % 4 != 3:
        params["log"] = seeded_.name  # mostly the real log, so reads go past the 404
    if "item_id" in params and len(str(params["item_id"])) % 2 == 0:
        params["item_id"] = ROOT
    response = case.call()
    if response.status_code == 504 and "min_seq" in params_of(case):
        # the designed answer to a min_seq the log has not reached: say so, name the seq
        assert "timed out" in response.json()["message"]
        return
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} {case.query} {case.body!r} -> "
        f"{response.status_code}: {response.text[:500]}"
    )
    if response.status_code >= 400:
        assert response.json()["message"], response.text


def params_of(case: Any) -> dict[str, Any]:
    return dict(case.query or {})
