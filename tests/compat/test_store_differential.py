"""The same random graph scripts through memex-python's ``MemexStore`` (in memory) and
memstream's ``MemexStore.open(location)`` on a real log (embedded, and Kafka with Redis):
every mutation's outcome and the final states must be the same, and queryd's graph routes
over that log must answer as memex's store does.

Fewer scripts than the pure tests: each opens a log (and, on Kafka, creates a topic).
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from types import ModuleType
from typing import Any

import memex
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memstream
from queryd.daemon import DaemonSettings, create_app
from tests.compat import graph_scripts as g

EXAMPLES = int(os.environ.get("MEMSTREAM_COMPAT_STORE_EXAMPLES", "25"))
STORE_OPS = {
    "command",
    "mark_contradiction",
    "mark_alias",
    "resolve_contradiction",
    "cascade_retract",
    "apply_many",
    "bulk_adjust_scores",
    "decay_importance",
    "intent",
    "task",
    "import_slice",
    "get_items",
    "get_scored_items",
    "integrity",
}


def _clock_free(op: tuple[str, dict[str, Any]]) -> bool:
    """Stored logs run on the real clock (their waits need it to move): no decay, which
    both libraries would compute at slightly different instants."""
    return (
        op[0] in STORE_OPS
        and "decay" not in repr(op[1].get("weights", ""))
        and ("'decay'" not in repr(op[1].get("filter")) and "'decay'" not in repr(op[1]))
    )


store_scripts = st.lists(g.operations().filter(_clock_free), min_size=1, max_size=15)


def run(store: Any, L: ModuleType, name: str, a: dict[str, Any]) -> Any:
    if name == "command":
        return store.apply(a["cmd"])
    if name in ("mark_contradiction", "mark_alias"):
        extra = {"meta": a["meta"]} if a.get("meta") is not None else {}
        return getattr(store, name)(a["a"], a["b"], "judge", **extra)
    if name == "resolve_contradiction":
        return store.resolve_contradiction(a["w"], a["l"], "judge", reason=a["reason"])
    if name == "cascade_retract":
        return store.cascade_retract(a["id"], "x")
    if name == "apply_many":
        return store.apply_many(a["filter"], g.transform(a["transform"]), "x", options=a["options"])
    if name == "bulk_adjust_scores":
        return store.bulk_adjust_scores(a["criteria"], a["delta"], "x")
    if name == "decay_importance":
        return store.decay_importance(a["older"], a["factor"], "x")
    if name == "intent":
        return store.apply_intent(a["cmd"])
    if name == "task":
        return store.apply_task(a["cmd"])
    if name == "import_slice":
        return store.import_slice(a["slice"], **a["kw"])
    if name == "get_items":
        return store.items(a["filter"], a["options"])
    if name == "get_scored_items":
        return store.scored(a["weights"], a["options"])
    return (store.stats(), store.contradictions(), store.stale_items(), store.dumps())


def state(store: Any, L: ModuleType) -> Any:
    return (L.stringify(store.mem), store.mem, store.intents, store.tasks)


def compare_on(location: str, script: list[Any]) -> None:
    seed = memex.MemexStore()
    na, nb = g.Normalizer(with_ms=False), g.Normalizer(with_ms=False)
    with memstream.MemexStore.open(location) as ours:
        for step, (name, args) in enumerate(script):
            got_a = g.outcome(lambda n=name, x=args: run(seed, memex, n, x), na)
            got_b = g.outcome(lambda n=name, x=args: run(ours, memstream, n, x), nb)
            assert got_b == got_a, g._diff(f"step {step}: {name} {args!r}", got_a, got_b)
        assert nb(state(ours, memstream)) == na(state(seed, memex))
        head = ours.state().last_seq
    if head is not None:  # a log nothing was appended to does not exist for a reader
        _queryd_answers_as_memex(location, head, seed, nb, na)


def _queryd_answers_as_memex(location: str, head: int, seed: Any, nb: Any, na: Any) -> None:
    """queryd's graph routes over the same log, at its head: items, stats, contradictions,
    stale items."""
    app = create_app([location], DaemonSettings(min_seq_timeout=30.0))
    with TestClient(app, base_url="http://localhost") as client:
        name = client.get("/logs").json()["logs"][0]["name"]
        base = f"/logs/{name}/graph"
        q = f"?min_seq={head}"
        deadline = time.monotonic() + 60
        answer = client.post(f"{base}/items/query{q}", json={})
        while answer.status_code == 503 and time.monotonic() < deadline:  # hydrating
            time.sleep(0.1)
            answer = client.post(f"{base}/items/query{q}", json={})
        assert answer.status_code == 200, answer.text
        items = answer.json()["items"]
        want = [it.model_dump(mode="json", by_alias=True, exclude_none=True) for it in seed.items()]
        got = [{k: v for k, v in it.items() if v is not None} for it in items]
        assert nb(got) == na(want), (items, want)
        stats = client.get(f"{base}/stats{q}").json()["stats"]
        s = seed.stats()
        assert stats == {"items": s.items._asdict(), "edges": s.edges._asdict()}
        got = client.get(f"{base}/contradictions{q}").json()["contradictions"]
        assert nb([(c["a"]["id"], c["b"]["id"], c["edge"]["edge_id"]) for c in got]) == na(
            [(c.a.id, c.b.id, c.edge.edge_id) for c in seed.contradictions()]
        )
        got = client.get(f"{base}/stale{q}").json()["stale"]
        assert [(s["item"]["id"], s["missing_parents"]) for s in got] == [
            (s.item.id, s.missing_parents) for s in seed.stale_items()
        ]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(script=store_scripts)
def test_embedded_store_behaves_as_memex_store(script: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        compare_on(os.path.join(tmp, "memory-db"), script)


@pytest.mark.kafka
def test_kafka_store_behaves_as_memex_store(kafka_bootstrap: str, redis_url: str) -> None:
    @settings(
        max_examples=max(EXAMPLES // 3, 5),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(script=store_scripts)
    def check(script: list[Any]) -> None:
        topic = f"t-compat-store-{uuid.uuid4().hex[:8]}"
        compare_on(f"kafka://{kafka_bootstrap}/{topic}?redis={redis_url}", script)

    check()
