"""queryd over a signed log (issue 15): rejections are served, and an HTTP recall, which
holds no agent key, is refused with a clear error and appends nothing."""

from __future__ import annotations

from pathlib import Path

from daemon_support import FAST
from fastapi.testclient import TestClient

from producers.memory import Memory
from queryd.daemon import LogRegistry, create_app
from schemas.audit import Message
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
        assert answer.status_code == 422, answer.text
        assert "not signed, on a log that requires signatures" in answer.text
    with Memory(location, create=False) as reader:
        state = reader.log.state()
        assert state.last_seq == 3 and len(state.memory) == 1
