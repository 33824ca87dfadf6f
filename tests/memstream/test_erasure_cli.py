"""`memstream erase`, `memstream retention run` and `memstream reencrypt`, as a user runs them."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memstream.cli import main
from producers.logs.sqlite import LOG_FILE
from producers.memory import Memory
from schemas.audit import ERASED, Message

CARD = "card 4111111111111111"


def _count(path: Path) -> int:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


def _old_log(path: Path) -> list[Message]:
    with Memory(path) as memory:
        first = memory.add_message(
            Message(
                speaker="user",
                content=CARD,
                session_id="alice",
                retain_until=datetime(2027, 1, 1, tzinfo=UTC),
            )
        )
        second = memory.add_message(Message(speaker="user", content="bob here", session_id="bob"))
        memory.delete(second.id, "asked")
        memory.recall("card")
    return [first, second]  # type: ignore[list-item]


def test_an_old_log_is_reencrypted_then_erased(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    first, second = _old_log(old)
    assert main(["erase", str(old), "--subject", "alice", "--reason", "asked"]) == 1
    assert "written without encryption" in capsys.readouterr().err
    assert _count(old) == 4

    assert main(["reencrypt", str(old), str(new)]) == 0
    assert "copied 4 records" in capsys.readouterr().out
    assert CARD.encode() not in (new / LOG_FILE).read_bytes()
    with Memory(old, create=False) as a, Memory(new, create=False) as b:
        assert [e.model_dump() for e in a.events()] == [e.model_dump() for e in b.events()]
    # Again into the same target: refused, the target unchanged.
    assert main(["reencrypt", str(old), str(new)]) == 1
    assert "holds 4 records; it must be a new log" in capsys.readouterr().err
    assert _count(new) == 4

    assert (
        main(["erase", str(new), "--subject", "alice", "--reason", "GDPR", "--requested-by", "dpo"])
        == 0
    )
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["kind"] == "erasure" and receipt["erased"] == [str(first.id)]
    assert receipt["requested_by"] == "dpo" and CARD not in json.dumps(receipt)
    with Memory(new, create=False) as reader:
        assert reader.get(first.id).content == ERASED  # type: ignore[union-attr]
        assert reader.get(second.id).content == "bob here"  # type: ignore[union-attr]

    assert main(["erase", str(new), "--subject", "nobody", "--reason", "asked"]) == 1
    assert "no readable content of data subject 'nobody'" in capsys.readouterr().err
    assert _count(new) == 5


def test_retention_run_over_a_given_clock(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    first, _ = _old_log(old)
    assert main(["reencrypt", str(old), str(new)]) == 0
    capsys.readouterr()
    assert main(["retention", "run", str(new), "--now", "2026-12-31T23:59:59+00:00"]) == 0
    assert capsys.readouterr().out == "" and _count(new) == 4
    assert main(["retention", "run", str(new), "--now", "2027-01-01T00:00:00+00:00"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    receipt = json.loads(line)
    assert receipt["reason"] == "retention period elapsed"
    assert receipt["erased"] == [str(first.id)]
    assert main(["retention", "run", str(new), "--now", "2027-06-01T00:00:00+00:00"]) == 0
    assert capsys.readouterr().out == "" and _count(new) == 5  # idempotent
    assert main(["retention", "run", str(new), "--now", "2027-06-01T00:00:00"]) == 1
    assert "give a time zone" in capsys.readouterr().err
    assert main(["retention", "run", str(old)]) == 1
    assert "written without encryption" in capsys.readouterr().err


def test_reencrypt_of_a_missing_log_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reencrypt", str(tmp_path / "absent"), str(tmp_path / "new")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_erase_and_retention_on_a_signed_log_with_an_agent_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A signed, encrypted log: `erase` and `retention run` without an agent key are refused
    (nothing appended); with an enrolled agent's key file they erase, signed by it."""
    from producers.logs.signing_key import init_key
    from schemas.signing import split_signed

    path = tmp_path / "signed"
    admin = init_key(tmp_path / "admin.key", "admin:ops")
    alice = init_key(tmp_path / "alice.key", "agent:alice")
    with Memory(path, agent_key=admin, signed=True, encrypt=True) as memory:
        memory.enrol(alice.verifier)
    with Memory(path, agent_key=alice) as memory:
        card = memory.add_message(Message(speaker="ana", content=CARD, session_id="ana"))
        kept = memory.add_message(
            Message(
                speaker="bo",
                content="bo's note",
                session_id="bo",
                retain_until=datetime(2027, 1, 1, tzinfo=UTC),
            )
        )
    before = _count(path)
    assert main(["erase", str(path), "--subject", "ana", "--reason", "asked"]) == 1
    assert "give --agent-key FILE" in capsys.readouterr().err
    assert main(["retention", "run", str(path), "--now", "2027-06-01T00:00:00+00:00"]) == 1
    assert "give --agent-key FILE" in capsys.readouterr().err
    assert _count(path) == before

    key = str(tmp_path / "alice.key")
    erase = ["erase", str(path), "--subject", "ana", "--reason", "asked", "--agent-key", key]
    assert main(erase) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["actor"] == "agent:alice" and receipt["erased"] == [str(card.id)]
    sweep = ["retention", "run", str(path), "--now", "2027-06-01T00:00:00+00:00"]
    assert main([*sweep, "--agent-key", key]) == 0
    swept = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert swept["erased"] == [str(kept.id)] and swept["actor"] == "agent:alice"
    with Memory(path, create=False) as reader:
        assert not reader.log.state().rejections
        assert reader.get(card.id).content == ERASED  # type: ignore[union-attr]
        assert reader.get(kept.id).content == ERASED  # type: ignore[union-attr]
        signers = [split_signed(data).signer for _, data in reader.log.records(0, timeout=1)]
    assert signers[-2:] == ["agent:alice", "agent:alice"]
    assert _count(path) == before + 2


def test_the_projectors_retention_sweeper_erases_as_its_agent_on_a_signed_log(
    tmp_path: Path,
) -> None:
    """`projector run --retention-every S --agent-key FILE`: the sweeper opens the log as
    that agent; without the key its sweeps fail (and say why), with it they erase."""
    import time

    from producers.logs.signing_key import init_key
    from projector.retention import RetentionSweeper

    path = tmp_path / "signed"
    admin = init_key(tmp_path / "admin.key", "admin:ops")
    alice = init_key(tmp_path / "alice.key", "agent:alice")
    with Memory(path, agent_key=admin, signed=True, encrypt=True) as memory:
        memory.enrol(alice.verifier)
    with Memory(path, agent_key=alice) as memory:
        due = memory.add_message(
            Message(
                speaker="ana",
                content=CARD,
                session_id="ana",
                retain_until=datetime(2027, 1, 1, tzinfo=UTC),
            )
        )
    later = datetime(2027, 6, 1, tzinfo=UTC)
    for key, expect_erased in [(None, False), (str(tmp_path / "alice.key"), True)]:
        sweeper = RetentionSweeper(str(path), 0.05, clock=lambda: later, agent_key=key).start()
        try:
            deadline = time.monotonic() + 30
            while not (sweeper.erasures or sweeper.last_error):
                assert time.monotonic() < deadline
                time.sleep(0.02)
        finally:
            sweeper.stop()
        if expect_erased:
            assert [e.erased for e in sweeper.erasures] == [(due.id,)]
            assert sweeper.erasures[0].actor == "agent:alice"
        else:
            assert not sweeper.erasures and "not signed" in str(sweeper.last_error)
    with Memory(path, create=False) as reader:
        assert reader.get(due.id).content == ERASED  # type: ignore[union-attr]


def test_erase_of_a_subject_with_graph_content_only_prints_the_graph_receipt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from producers.memex_store import MemexStore
    from tests.producers.test_graph_erasure import _item

    path = tmp_path / "graph"
    Memory(path, encrypt=True).close()
    with MemexStore.open(str(path)) as store:
        item = _item(store, "carol", {"text": CARD})
    assert main(["erase", str(path), "--subject", "carol", "--reason", "asked"]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert receipt["subject"] == "carol" and receipt["items"] == [item.id]
    assert receipt["erasure_id"] is None and CARD not in json.dumps(receipt)
    with MemexStore.open(str(path)) as reader:
        assert reader.item(item.id).content == {"text": ERASED}  # type: ignore[union-attr]
