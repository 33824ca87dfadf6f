"""queryd over a signed log (issue 15): rejections are served; an HTTP recall is signed as
the token's agent with that agent's own key (`--agent-keys`), and refused, appending
nothing, when queryd cannot sign as that agent (no access control, no key, a key file of
another agent)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from daemon_support import FAST
from fastapi.testclient import TestClient

from producers.keys.agent_keys import agent_key_file
from producers.keys.token_store import TokenStore
from producers.logs.signing_key import init_key
from producers.memory import Memory
from queryd.daemon import DaemonSettings, LogRegistry, create_app
from schemas.audit import Message, Recall
from schemas.codec import encode_record
from schemas.evidence.note import NoteSigner


def test_a_signed_log_over_http(tmp_path: Path) -> None:
    location = str(tmp_path / "signed-db")
    admin = NoteSigner.generate("admin:root")
    alice = NoteSigner.generate("agent:alice")
    with Memory(location, agent_key=admin, signed=True, key=False) as memory:
        memory.enrol(alice.verifier)
    with Memory(location, agent_key=alice, key=False) as writer:
        writer.add_message(Message(speaker="ana", content="the invoice is paid"))
    # An unsigned record inserted by a writer that bypasses memstream.
    import sqlite3

    from producers.logs.sqlite import LOG_FILE, record_checksum

    forged = Message(speaker="agent:alice", content="forged", actor="agent:alice")
    data = encode_record(forged)
    conn = sqlite3.connect(Path(location) / LOG_FILE)
    conn.execute(
        "INSERT INTO events (seq, id, kind, record, crc) VALUES (3, ?, 'message', ?, ?)",
        (str(forged.id), data, record_checksum(3, data)),
    )
    conn.commit()
    conn.close()

    registry = LogRegistry.from_locations([location], poll_interval=0.01)
    app = create_app(registry, FAST)
    with TestClient(app, base_url="http://localhost") as c:
        assert registry.wait_ready(10)
        rejections = c.get("/logs/signed-db/rejections").json()["rejections"]
        assert [(r["seq"], r["error"]) for r in rejections] == [(3, "AuthorshipError")]
        assert "not signed, on a log that requires signatures" in rejections[0]["reason"]
        assert c.get("/logs/signed-db/search", params={"q": "forged"}).json()["items"] == []
        paid = c.get("/logs/signed-db/search", params={"q": "invoice"}).json()["items"]
        assert [(i["speaker"], i["actor"]) for i in paid] == [("ana", "agent:alice")]
        answer = c.post("/logs/signed-db/recall", json={"query": "invoice"})
        # no access control: any caller could name any actor, so queryd signs nothing
        assert answer.status_code == 403, answer.text
        assert answer.json()["detail"]["missing"] == "token"
        assert "requires signatures" in answer.json()["message"]
    with Memory(location, create=False) as reader:
        state = reader.log.state()
        assert state.last_seq == 3 and len(state.memory) == 1


@contextmanager
def _served(location: str, settings: DaemonSettings) -> Iterator[TestClient]:
    registry = LogRegistry.from_locations([location], poll_interval=0.01)
    with TestClient(create_app(registry, settings), base_url="http://localhost") as client:
        assert registry.wait_ready(10)
        yield client


def _recall(client: TestClient, token: str, **body: str) -> httpx.Response:
    """POST a recall of 'invoice' on the signed log with `token`."""
    return client.post(
        "/logs/signed-db/recall",
        json={"query": "invoice", **body},
        headers={"Authorization": f"Bearer {token}"},
    )


def _refused_for_its_agent_key(answer: httpx.Response, says: str) -> None:
    """A 403 naming the agent key as what is missing, its message saying `says`."""
    assert answer.status_code == 403, answer.text
    assert answer.json()["detail"]["missing"] == "agent_key"
    assert says in answer.json()["message"]


def test_an_http_recall_on_a_signed_log_is_signed_as_the_tokens_agent(tmp_path: Path) -> None:
    location = str(tmp_path / "signed-db")
    keys = tmp_path / "agent-keys"
    admin = NoteSigner.generate("admin:root")
    alice = init_key(agent_key_file(keys, "agent:alice"), "agent:alice")  # mode 0600
    bob = NoteSigner.generate("agent:bob")
    carol = NoteSigner.generate("agent:carol")
    with Memory(location, agent_key=admin, signed=True, key=False) as memory:
        for agent in (alice, bob, carol):
            memory.enrol(agent.verifier, may=["message", "recall"])
    with Memory(location, agent_key=bob, key=False) as writer:
        said = writer.add_message(Message(speaker="ana", content="the invoice is paid"))
    # carol's file in the keyring holds bob's key: never used as carol's
    with open(agent_key_file(keys, "agent:carol"), "w") as out:
        out.write(bob.text() + "\n")
    os.chmod(agent_key_file(keys, "agent:carol"), 0o600)

    later = datetime.now(UTC) + timedelta(days=1)
    with TokenStore.create(tmp_path / "tokens.db") as store:
        as_alice, _ = store.issue("signed-db", "recall", "agent:alice", later)
        as_bob, _ = store.issue("signed-db", "recall", "agent:bob", later)
        as_carol, _ = store.issue("signed-db", "recall", "agent:carol", later)
    tokens = str(tmp_path / "tokens.db")

    def head() -> int | None:
        with Memory(location, create=False) as reader:
            return reader.log.head()

    # tokens on, no keyring: refused, naming the agent key as what is missing
    bare = dataclasses.replace(FAST, tokens=tokens, tokens_refresh=0.1)
    with _served(location, bare) as c:
        before = head()
        _refused_for_its_agent_key(_recall(c, as_alice), "holds no agent keys")
        assert head() == before

    keyed = dataclasses.replace(bare, agent_keys=str(keys))
    with _served(location, keyed) as c:
        before = head()
        # bob has no key file: refused, nothing appended
        _refused_for_its_agent_key(_recall(c, as_bob), "holds no key of agent 'agent:bob'")
        # carol's file holds bob's key: refused (503, the file named only in queryd's log)
        answer = _recall(c, as_carol)
        assert answer.status_code == 503, answer.text
        assert "agent-keys" not in answer.text and str(keys) not in answer.text
        # naming another actor than the token's agent is still refused
        answer = _recall(c, as_alice, actor="agent:bob")
        assert answer.status_code == 403, answer.text
        assert head() == before

        answer = _recall(c, as_alice)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["recall"]["actor"] == "agent:alice"
        assert [i["id"] for i in body["items"]] == [str(said.id)]
        assert head() == before + 1  # type: ignore[operator]

    # An independent reader folds it as alice's: signed by her key, no rejection.
    with Memory(location, create=False) as reader:
        state = reader.log.state()
        # the fold binds a Recall's actor to its signer: no rejection, so alice signed it
        assert list(state.rejections) == []
        recall = reader.get(body["recall"]["id"])
        assert isinstance(recall, Recall) and recall.actor == "agent:alice"
        assert state.authorship is not None
