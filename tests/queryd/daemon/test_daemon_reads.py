"""The daemon's reads over a seeded log, embedded and on Kafka: same answers as the pure
queries, and every answer names its seq."""

from __future__ import annotations

from typing import Any

from daemon_support import (
    ALIAS,
    CHILD,
    GRANDCHILD,
    OTHER,
    ROOT,
    STALE,
    Seeded,
    in_process,
    seed,
)
from fastapi.testclient import TestClient

from producers.memory import Memory
from queryd.daemon import SEQ_HEADER


def ok(response: Any, seq: int | None = None) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "seq" in body
    assert response.headers[SEQ_HEADER] == str(body["seq"])
    if seq is not None:
        assert body["seq"] == seq
    return body


def ids(items: list[dict[str, Any]]) -> list[str]:
    return [i["id"] for i in items]


def test_service_endpoints(client: TestClient, seeded: Seeded) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["ready"] is True
    logs = client.get("/logs").json()["logs"]
    assert [entry["name"] for entry in logs] == [seeded.name]
    assert logs[0]["seq"] == seeded.last_seq and logs[0]["lag"] == 0
    info = ok(client.get(f"/logs/{seeded.name}"), seeded.last_seq)
    assert info["audit_events"] == 7 and info["items"] == 6 and info["edges"] == 3
    assert info["intents"] == 1 and info["tasks"] == 1 and info["rejections"] == 0
    spec = client.get("/openapi.json").json()
    assert "/logs/{log}/graph/items/query" in spec["paths"]


def test_event_by_id_deleted_or_not(client: TestClient, seeded: Seeded) -> None:
    base = f"/logs/{seeded.name}"
    first = ok(client.get(f"{base}/events/{seeded.messages[0].id}"), seeded.last_seq)["event"]
    assert first["content"] == "the cat sat on the mat" and first["seq"] == 0
    gone = ok(client.get(f"{base}/events/{seeded.deleted_id}"))["event"]
    assert gone["content"] == "the cat is black"


def test_events_in_seq_order_filtered_and_paged(client: TestClient, seeded: Seeded) -> None:
    base = f"/logs/{seeded.name}/events"
    everything = ok(client.get(base))["events"]
    assert [e["seq"] for e in everything] == sorted(e["seq"] for e in everything)
    assert [e["kind"] for e in everything] == ["message"] * 4 + ["document", "deletion", "recall"]
    with Memory(seeded.location) as memory:
        expected = [e.seq for e in memory.events(kind="message", session_id="s0", after_seq=0)]
    got = ok(client.get(base, params={"kind": "message", "session_id": "s0", "after_seq": 0}))
    assert [e["seq"] for e in got["events"]] == expected
    assert ok(client.get(base, params={"up_to_seq": 1}))["events"][-1]["seq"] == 1
    # pages of two, continued with next_after_seq, give the whole log once
    seen: list[int] = []
    after: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if after is not None:
            params["after_seq"] = after
        page = ok(client.get(base, params=params))
        seen += [e["seq"] for e in page["events"]]
        after = page["next_after_seq"]
        if after is None:
            break
    assert seen == [e["seq"] for e in everything]


def test_state_at_head_and_as_of_a_seq(client: TestClient, seeded: Seeded) -> None:
    base = f"/logs/{seeded.name}/state"
    head = ok(client.get(base), seeded.last_seq)
    visible = [m["content"] for m in head["visible_messages"]]
    assert "the cat is black" not in visible and len(visible) == 3
    assert [d["name"] for d in head["visible_documents"]] == ["notes.txt"]
    assert head["deleted"][0]["id"] == str(seeded.deleted_id)
    assert head["deleted"][0]["tombstone"]["reason"] == "user asked"
    assert sum(s["num_recalled"] for s in head["recall_stats"]) == 2
    before = ok(client.get(base, params={"up_to_seq": seeded.deletion_seq - 1}))
    assert before["seq"] == seeded.deletion_seq - 1
    assert len(before["visible_messages"]) == 4 and before["deleted"] == []


def test_search_matches_the_pure_search(client: TestClient, seeded: Seeded) -> None:
    got = ok(client.get(f"/logs/{seeded.name}/search", params={"q": "the cat", "limit": 10}))
    with Memory(seeded.location) as memory:
        from queryd.audit import search

        expected = [str(e.id) for e in search(memory.replay(), "the cat", limit=10)]
    assert [i["id"] for i in got["items"]] == expected
    assert str(seeded.deleted_id) not in expected
    assert ok(client.get(f"/logs/{seeded.name}/search", params={"q": "!!!"}))["items"] == []


def test_recall_appends_what_it_returned(client: TestClient, seeded: Seeded) -> None:
    body = ok(
        client.post(
            f"/logs/{seeded.name}/recall", json={"query": "cat", "limit": 2, "actor": "agent:x"}
        )
    )
    recall = body["recall"]
    assert body["seq"] == recall["seq"] == seeded.last_seq + 1
    assert recall["recalled"] == [i["id"] for i in body["items"]] and len(body["items"]) == 2
    with Memory(seeded.location) as memory:
        stored = memory.get(recall["id"])
    assert stored is not None and [str(i) for i in stored.recalled] == recall["recalled"]
    # the daemon's own next read reflects the recall
    assert ok(client.get(f"/logs/{seeded.name}/events/{recall['id']}"))["seq"] >= recall["seq"]


def test_items_with_the_filter_algebra_sort_and_paging(client: TestClient, seeded: Seeded) -> None:
    url = f"/logs/{seeded.name}/graph/items/query"
    assert ids(ok(client.post(url, json={}))["items"]) == [
        ROOT,
        CHILD,
        GRANDCHILD,
        STALE,
        ALIAS,
        OTHER,
    ]
    query = {
        "filter": {
            "or": [{"scope": "user:other"}, {"range": {"authority": {"min": 0.75}}}],
            "not": {"author": "agent:b"},
        },
        "options": {"sort": [{"field": "authority", "order": "asc"}]},
    }
    got = ok(client.post(url, json=query))
    assert ids(got["items"]) == [STALE, OTHER, ROOT] and got["total"] == 3
    paged = ok(
        client.post(url, json={**query, "options": {**query["options"], "offset": 1, "limit": 1}})
    )
    assert ids(paged["items"]) == [OTHER] and paged["total"] == 3
    assert ids(
        ok(client.post(url, json={"filter": {"is_root": False, "meta_has": []}}))["items"]
    ) == [CHILD, GRANDCHILD, STALE]
    assert ok(client.get(f"/logs/{seeded.name}/graph/items/{ROOT}"))["item"]["id"] == ROOT


def test_scored_and_smart_retrieve(client: TestClient, seeded: Seeded) -> None:
    base = f"/logs/{seeded.name}/graph"
    scored = ok(
        client.post(f"{base}/scored", json={"weights": {"authority": 1.0}, "options": {"limit": 2}})
    )
    assert [s["item"]["id"] for s in scored["items"]] == [ROOT, OTHER]
    assert scored["items"][0]["score"] == 0.9
    unit = ok(
        client.post(
            f"{base}/smart_retrieve",
            json={"budget": 3, "cost": "unit", "weights": {"authority": 1}},
        )
    )
    assert [s["item"]["id"] for s in unit["items"]] == [ROOT, OTHER, CHILD]
    filtered = ok(
        client.post(
            f"{base}/smart_retrieve",
            json={
                "budget": 3,
                "cost": "unit",
                "weights": {"authority": 1},
                "contradictions": "filter",
            },
        )
    )
    assert OTHER not in [s["item"]["id"] for s in filtered["items"]]
    chars = ok(
        client.post(
            f"{base}/smart_retrieve",
            json={"budget": 100, "cost": "content_chars", "weights": {"authority": 1}},
        )
    )
    assert OTHER not in [s["item"]["id"] for s in chars["items"]]  # its content is 500+ chars
    bad = client.post(
        f"{base}/smart_retrieve", json={"budget": 1, "cost": "lambda x: 1", "weights": {}}
    )
    assert bad.status_code == 422 and "cost" in bad.json()["message"]


def test_provenance_integrity_and_aliases(client: TestClient, seeded: Seeded) -> None:
    base = f"/logs/{seeded.name}/graph"
    tree = ok(client.get(f"{base}/items/{GRANDCHILD}/support_tree"))
    assert tree["root"] == GRANDCHILD
    assert [(n["item"]["id"], n["parents"]) for n in tree["nodes"]] == [
        (GRANDCHILD, [CHILD]),
        (CHILD, [ROOT]),
        (ROOT, []),
    ]
    assert ids(ok(client.get(f"{base}/items/{GRANDCHILD}/support_set"))["items"]) == [
        GRANDCHILD,
        CHILD,
        ROOT,
    ]
    assert ids(ok(client.get(f"{base}/items/{ROOT}/dependents"))["items"]) == [CHILD]
    assert ids(
        ok(client.get(f"{base}/items/{ROOT}/dependents", params={"transitive": True}))["items"]
    ) == [CHILD, GRANDCHILD]
    assert ids(ok(client.get(f"{base}/items/{ROOT}/aliases"))["items"]) == [ALIAS]
    assert sorted(ids(ok(client.get(f"{base}/items/{ALIAS}/alias_group"))["items"])) == sorted(
        [ROOT, ALIAS]
    )
    assert ids(ok(client.get(f"{base}/items/{CHILD}/parents"))["items"]) == [ROOT]
    assert ids(ok(client.get(f"{base}/items/{CHILD}/children"))["items"]) == [GRANDCHILD]
    assert OTHER in ids(ok(client.get(f"{base}/items/{ROOT}/related"))["items"])
    contradictions = ok(client.get(f"{base}/contradictions"))["contradictions"]
    assert [(c["a"]["id"], c["b"]["id"]) for c in contradictions] == [(ROOT, OTHER)]
    stale = ok(client.get(f"{base}/stale"))["stale"]
    assert [(s["item"]["id"], s["missing_parents"]) for s in stale] == [(STALE, ["i-ghost"])]


def test_edges_intents_tasks_stats_export(client: TestClient, seeded: Seeded) -> None:
    base = f"/logs/{seeded.name}/graph"
    edges = ok(client.post(f"{base}/edges/query", json={"filter": {"kind": "ALIAS"}}))["edges"]
    assert [e["edge_id"] for e in edges] == ["e-alias1", "e-alias2"]
    assert edges[0]["from"] == ROOT
    assert ok(client.get(f"{base}/edges/e-contra"))["edge"]["to"] == OTHER
    assert len(ok(client.post(f"{base}/edges/query", json={}, params={"limit": 1}))["edges"]) == 1
    intents = ok(client.post(f"{base}/intents/query", json={"filter": {"statuses": ["active"]}}))[
        "intents"
    ]
    assert [i["id"] for i in intents] == ["n-1"]
    assert ok(client.get(f"{base}/intents/n-1"))["intent"]["label"] == "ship"
    tasks = ok(client.post(f"{base}/tasks/query", json={"filter": {"intent_id": "n-1"}}))
    assert [t["id"] for t in tasks["tasks"]] == ["t-1"]
    assert ok(client.get(f"{base}/tasks/t-1"))["task"]["action"] == "write"
    stats = ok(client.get(f"{base}/stats"))["stats"]
    assert stats["items"]["total"] == 6 and stats["edges"]["by_kind"]["ALIAS"] == 2
    exported = ok(
        client.post(
            f"{base}/export_slice",
            json={
                "memory_ids": [GRANDCHILD],
                "include_parents": True,
                "intent_ids": ["n-1"],
                "include_related_tasks": True,
            },
        )
    )["slice"]
    assert sorted(ids(exported["memories"])) == sorted([GRANDCHILD, CHILD, ROOT])
    assert [t["id"] for t in exported["tasks"]] == ["t-1"]


def test_several_logs_each_under_its_name(tmp_path: Any) -> None:
    first = seed(str(tmp_path / "alpha"))
    second = str(tmp_path / "beta")
    with Memory(second) as memory:
        from schemas.audit import Message

        memory.add_message(Message(speaker="u", content="only in beta"))
    with in_process([first.location, second]) as c:
        assert sorted(entry["name"] for entry in c.get("/logs").json()["logs"]) == ["alpha", "beta"]
        assert ok(c.get("/logs/beta/search", params={"q": "beta"}), 0)["items"]
        assert ok(c.get("/logs/alpha/search", params={"q": "beta"}))["items"] == []
