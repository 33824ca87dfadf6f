"""Erased content (crypto-shredded) in queryd's answers and the web view's pages: each says
when, why and at whose request it was erased, and no answer or page holds the plaintext.
The state at the head lists an erased event as visible no more, as `Memory.replay` does."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from daemon_support import in_process
from fastapi.testclient import TestClient

from producers.memex_log_store import LogGraphs
from producers.memex_store import MemexStore
from producers.memory import Memory
from queryd.daemon import log_name
from schemas.audit import Message

CARD = "card 4111111111111111"
ADDRESS = "12 Rue Quelconque"


@dataclass(frozen=True)
class ErasedLog:
    name: str
    erased_id: str
    kept_id: str
    recall_id: str
    erasure_seq: int
    erased_item: str
    kept_item: str


@pytest.fixture(scope="module")
def erased_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ErasedLog]:
    location = str(Path(tmp_path_factory.mktemp("erased")) / "erased-db")
    with Memory(location, encrypt=True) as memory:
        erased = memory.add_message(Message(speaker="alice", content=CARD, session_id="s-alice"))
        kept = memory.add_message(
            Message(speaker="bob", content="tea and card games", session_id="s-bob")
        )
        recall, _ = memory.recall("card", actor="agent:support")
        graph = MemexStore(backend=LogGraphs(memory.log))
        items = [
            graph.create(
                scope=scope,
                kind="fact",
                content={"text": text},
                author="agent:support",
                source_kind="user_explicit",
                authority=0.5,
            )
            for scope, text in (("s-alice", ADDRESS), ("s-bob", "likes tea"))
        ]
        erasure = memory.erase("s-alice", "gdpr art. 17", requested_by="dpo")
        assert [m.id for m in memory.replay().visible_messages] == [kept.id]
    assert erasure.seq is not None
    return location, ErasedLog(
        log_name(location),
        str(erased.id),
        str(kept.id),
        str(recall.id),
        erasure.seq,
        items[0].id,
        items[1].id,
    )


@pytest.fixture(scope="module")
def client(erased_log: tuple[str, ErasedLog]) -> Iterator[TestClient]:
    with in_process([erased_log[0]]) as served:
        yield served


def test_answers_name_the_erasure_and_never_the_plaintext(
    client: TestClient, erased_log: tuple[str, ErasedLog]
) -> None:
    log = erased_log[1]
    base = f"/logs/{log.name}"
    answers = {}
    erasures = client.get(f"{base}/events", params={"kind": "erasure"})
    assert erasures.status_code == 200, erasures.text
    [receipt] = erasures.json()["events"]
    assert receipt["subject"] == "s-alice" and receipt["erased"] == [log.erased_id]
    assert receipt["reason"] == "gdpr art. 17" and receipt["requested_by"] == "dpo"
    answers["erasures"] = erasures.text

    page = client.get(f"{base}/events").json()
    assert page["erased_at"] == {log.erased_id: log.erasure_seq}
    assert page["deleted_at"] == {}
    answers["events"] = str(page)

    state = client.get(f"{base}/state").json()
    assert [m["id"] for m in state["visible_messages"]] == [log.kept_id]
    assert state["deleted"] == []
    answers["state"] = str(state)

    context = client.get(f"{base}/recalls/{log.recall_id}/context").json()
    named = {item["id"]: item for item in context["items"]}
    assert named[log.erased_id]["erasure"]["seq"] == log.erasure_seq
    assert named[log.kept_id]["erasure"] is None
    answers["context"] = str(context)

    diff = client.get(f"{base}/diff", params={"from_seq": -1, "to_seq": log.erasure_seq}).json()
    appeared = {item["id"]: item for item in diff["appeared"]}
    assert appeared[log.erased_id]["erasure"]["reason"] == "gdpr art. 17"
    answers["diff"] = str(diff)

    erased_item = client.get(f"{base}/graph/items/{log.erased_item}").json()["item"]
    assert erased_item["content"] == {"text": "[erased]"}
    assert erased_item["scope"] == "s-alice"
    kept_item = client.get(f"{base}/graph/items/{log.kept_item}").json()["item"]
    assert kept_item["content"] == {"text": "likes tea"}
    items = client.post(f"{base}/graph/items/query", json={}).json()
    assert len(items["items"]) == 2
    answers["items"] = str(items)
    ids = [log.erased_item, log.kept_item]
    export = client.post(f"{base}/graph/export_slice", json={"memory_ids": ids})
    assert export.status_code == 200, export.text
    exported = export.json()["slice"]["memories"]
    assert {m["id"] for m in exported} == {log.erased_item, log.kept_item}
    answers["export"] = export.text

    for what, text in answers.items():
        assert CARD not in text, f"{what} holds the erased plaintext"
        assert ADDRESS not in text, f"{what} holds the erased item's plaintext"


def test_pages_say_erased_and_never_the_plaintext(
    client: TestClient, erased_log: tuple[str, ErasedLog]
) -> None:
    log = erased_log[1]
    timeline = client.get(f"/ui/logs/{log.name}/timeline")
    assert timeline.status_code == 200
    assert f"erased at seq {log.erasure_seq}: gdpr art. 17 (content unreadable)" in timeline.text
    assert "tea and card games" in timeline.text
    # as of a seq before the erasure, the content is gone all the same: erased "later"
    early = client.get(f"/ui/logs/{log.name}/timeline", params={"seq": 1})
    assert f"erased at seq {log.erasure_seq} (later)" in early.text
    event = client.get(f"/ui/logs/{log.name}/events/{log.erased_id}")
    assert event.status_code == 200
    assert "Erased at seq" in event.text and "(subject s-alice)" in event.text
    assert "requested by dpo" in event.text
    receipt = client.get(f"/ui/logs/{log.name}/timeline", params={"kind": "erasure"})
    assert '<tr class="kind-erasure">' in receipt.text
    for page in (timeline, early, event, receipt):
        assert CARD not in page.text
