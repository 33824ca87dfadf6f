"""The read routes the web view needed, over both modes: events by actor and text and
paged backwards, diff, activity, a Recall's context (deleted items without their text),
and the lifecycle stream from after a seq. Bad parameters are 422s naming them."""

from __future__ import annotations

import json
from typing import Any

import httpx
from daemon_support import Seeded, projector_for, serve
from fastapi.testclient import TestClient
from test_daemon_live import sse_events

from producers.memory import Memory
from queryd.daemon import log_name
from schemas.audit import Message


def _recall_id(client: TestClient, name: str) -> str:
    found = client.get(f"/logs/{name}/events", params={"kind": "recall"}).json()["events"]
    assert len(found) == 1
    return str(found[0]["id"])


def test_events_by_text_never_match_deleted_text(client: TestClient, seeded: Seeded) -> None:
    name = seeded.name
    got = client.get(f"/logs/{name}/events", params={"text": "CAT"}).json()
    contents = [e.get("content") or e.get("text") or e.get("query") for e in got["events"]]
    # "the cat is black" was deleted: it does not match, though it says cat
    assert contents == ["the cat sat on the mat", "dogs chase cats", "a cat document", "cat"]
    # nor as of a seq before its deletion: deleted at the head is deleted for every view
    before = client.get(f"/logs/{name}/events", params={"text": "black", "up_to_seq": 4}).json()
    assert before["events"] == []
    assert client.get(f"/logs/{name}/events", params={"text": "black"}).json()["events"] == []
    sunny = client.get(f"/logs/{name}/events", params={"text": "sunny", "up_to_seq": 4}).json()
    assert [e["content"] for e in sunny["events"]] == ["weather is sunny today"]


def test_events_paged_backwards_mark_deleted_ones(client: TestClient, seeded: Seeded) -> None:
    name = seeded.name
    page = client.get(f"/logs/{name}/events", params={"before_seq": 5, "limit": 2}).json()
    assert [e["seq"] for e in page["events"]] == [3, 4]
    assert page["prev_before_seq"] == 3 and page["next_after_seq"] == 4
    assert page["deleted_at"] == {str(seeded.deleted_id): seeded.deletion_seq}
    # as of a seq before the deletion, the page still says it was deleted (later)
    early = client.get(f"/logs/{name}/events", params={"before_seq": 5, "up_to_seq": 4}).json()
    assert early["deleted_at"] == {str(seeded.deleted_id): seeded.deletion_seq}
    both = client.get(f"/logs/{name}/events", params={"before_seq": 5, "after_seq": 1})
    assert both.status_code == 422
    assert both.json()["message"].startswith("before_seq: give after_seq or before_seq")
    actor = client.get(f"/logs/{name}/events", params={"actor": "nobody"}).json()
    assert actor["events"] == []


def test_diff_between_two_seqs(client: TestClient, seeded: Seeded) -> None:
    name = seeded.name
    got = client.get(f"/logs/{name}/diff", params={"from_seq": 2, "to_seq": 6})
    assert got.status_code == 200, got.text
    body = got.json()
    assert [s["event"]["text"] for s in body["appeared"]] == ["a cat document"]
    # the deleted message comes without its text
    assert body["deleted"] == [
        {
            "id": str(seeded.deleted_id),
            "event": None,
            "deletion": body["deleted"][0]["deletion"],
            "erasure": None,
        }
    ]
    assert body["deleted"][0]["deletion"]["reason"] == "user asked"
    assert "the cat is black" not in got.text
    assert len(body["recalls"]) == 2 and not body["truncated"]
    # appeared by seq 4, deleted at 5: named, without its text
    early = client.get(f"/logs/{name}/diff", params={"from_seq": 2, "to_seq": 4})
    assert [s["deletion"] is not None for s in early.json()["appeared"]] == [True, False]
    assert "the cat is black" not in early.text
    past = client.get(f"/logs/{name}/diff", params={"from_seq": 0, "to_seq": 10_000})
    assert past.status_code == 422
    assert past.json()["message"] == f"to_seq: seq 10000 is past the log's head ({seeded.last_seq})"
    backwards = client.get(f"/logs/{name}/diff", params={"from_seq": 5, "to_seq": 2})
    assert backwards.status_code == 422
    assert backwards.json()["message"].startswith("to_seq: expected at least from_seq")
    garbage = client.get(f"/logs/{name}/diff", params={"from_seq": "x", "to_seq": 2})
    assert garbage.status_code == 422 and garbage.json()["message"].startswith("query.from_seq")


def test_activity_by_kind(client: TestClient, seeded: Seeded) -> None:
    body = client.get(f"/logs/{seeded.name}/activity").json()
    totals = {
        kind: sum(b["counts"][kind] for b in body["buckets"])
        for kind in body["buckets"][0]["counts"]
    }
    assert totals == {"message": 4, "document": 1, "recall": 1, "deletion": 1, "erasure": 0}
    assert body["bucket_seconds"] == 60
    bad = client.get(f"/logs/{seeded.name}/activity", params={"bucket_seconds": 0})
    assert bad.status_code == 422 and bad.json()["message"].startswith("query.bucket_seconds")


def test_recall_context_shows_deleted_items_without_their_text(
    client: TestClient, seeded: Seeded
) -> None:
    name = seeded.name
    recall_id = _recall_id(client, name)
    body = client.get(f"/logs/{name}/recalls/{recall_id}/context").json()
    assert body["recall"]["query"] == "cat"
    assert [i["event"]["seq"] for i in body["items"]] == [0, 4]  # a message, the document
    assert [m["event"]["content"] for m in body["before"]] == [
        "the cat sat on the mat",
        "weather is sunny today",
    ]
    # an item deleted after the Recall: named, its Deletion shown, its text gone
    with Memory(seeded.location) as memory:
        deletion = memory.delete(seeded.messages[0].id, "gdpr request", requested_by="dpo")
    later = client.get(
        f"/logs/{name}/recalls/{recall_id}/context", params={"min_seq": deletion.seq}
    )
    assert later.status_code == 200, later.text
    first = later.json()["items"][0]
    assert first["event"] is None and first["deletion"]["reason"] == "gdpr request"
    assert "the cat sat on the mat" not in later.text
    # nor as of a seq before that deletion
    early = client.get(f"/logs/{name}/recalls/{recall_id}/context", params={"up_to_seq": 6})
    assert early.json()["items"][0]["event"] is None
    assert "the cat sat on the mat" not in early.text
    not_recall = client.get(f"/logs/{name}/recalls/{seeded.messages[1].id}/context")
    assert not_recall.status_code == 404
    assert not_recall.json()["message"].startswith("recall_id: no Recall")
    garbage = client.get(f"/logs/{name}/recalls/not-a-uuid/context")
    assert garbage.status_code == 422 and "recall_id" in garbage.json()["message"]


def test_lifecycle_after_a_seq_sends_only_what_follows(location: str) -> None:
    name = log_name(location)
    with Memory(location) as memory:
        for i in range(5):
            memory.add_message(Message(speaker="u", content=f"old {i}"))
        with (
            projector_for(location),
            serve([location], "--sse-keepalive", "0.5") as base,
            httpx.Client(base_url=base, timeout=httpx.Timeout(30, read=20)) as http,
        ):
            received: list[dict[str, Any]] = []
            with http.stream("GET", f"/logs/{name}/lifecycle", params={"after_seq": 4}) as response:
                assert response.status_code == 200
                memory.add_message(Message(speaker="u", content="new one"))
                for event in sse_events(response):
                    received.append(event)
                    break
            bad = http.get(f"/logs/{name}/lifecycle", params={"after_seq": "soon"})
    data = json.loads(received[0]["data"])
    assert data["seq"] == 5 and data["envelope"]["payload"]["event"]["content"] == "new one"
    assert int(received[0]["id"]) >= 5  # the five old events were read, not sent
    assert bad.status_code == 422 and bad.json()["message"].startswith("query.after_seq")
