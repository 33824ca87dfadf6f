"""`memstream agents ...`, `memstream log create` and `memstream verify`'s authorship, as a
user runs them."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from memstream.cli import main
from producers.memory import Memory
from schemas.audit import Message


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MEMSTREAM_SIGNING_KEY", raising=False)
    monkeypatch.chdir(tmp_path)


def _verifier(out: str) -> str:
    return out.strip().splitlines()[-1].split(": ", 1)[1]


def test_create_enrol_list_revoke_verify(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["agents", "create", "admin:ops", "--key", "admin.key"]) == 0
    admin = _verifier(capsys.readouterr().out)
    assert main(["agents", "create", "agent:alice"]) == 0  # the default path
    out = capsys.readouterr().out
    alice_key = Path("home/.config/memstream/agents/agent_alice.key")
    assert str(alice_key) in out and stat.S_IMODE(os.stat(alice_key).st_mode) == 0o600
    assert main(["agents", "create", "agent:alice"]) == 2  # never overwritten
    assert "exists" in capsys.readouterr().err

    assert main(["log", "create", "db"]) == 2  # a signed log needs an admin key
    assert "--admin-key" in capsys.readouterr().err
    assert main(["log", "create", "db", "--admin-key", "admin.key"]) == 0
    assert "requires signatures" in capsys.readouterr().out
    assert main(["log", "create", "db", "--admin-key", "admin.key"]) == 2  # exists
    capsys.readouterr()
    # alice cannot enrol herself (she is no one on this log yet); the admin can.
    assert main(["agents", "enrol", "db", str(alice_key), "--admin-key", str(alice_key)]) == 2
    assert "'agent:alice' is not enrolled on this log" in capsys.readouterr().err
    assert main(["agents", "enrol", "db", str(alice_key), "--admin-key", "admin.key"]) == 0
    assert "enrolled agent:alice at seq 1" in capsys.readouterr().out
    with Memory("db", agent_key=alice_key, key=False) as memory:
        memory.add_message(Message(speaker="ana", content="hello"))
    assert main(["agents", "revoke", "db", "agent:alice", "--admin-key", "admin.key"]) == 0
    assert "revoked agent:alice at seq 3" in capsys.readouterr().out
    assert main(["agents", "list", "db"]) == 0
    out = capsys.readouterr().out
    assert "enrol   agent:alice" in out and "revoked at seq 3" in out

    assert main(["keys", "init", "--key", "ck.key", "--name", "ck"]) == 0
    capsys.readouterr()
    assert main(["checkpoint", "db", "--key", "ck.key"]) == 0
    capsys.readouterr()
    assert main(["verify", "db", "--key", "ck.key", "--admin", admin]) == 0
    out = capsys.readouterr().out
    assert "(the keys given)" in out
    assert "signatures checked: 4 of 4 records" in out
    assert main(["verify", "db", "--key", "ck.key", "--admin", str(alice_key), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)["authorship"]
    assert report["requires_signatures"] and report["admins_match"] is False
    assert [h[1] for h in report["history"]] == ["admin", "enrol", "revoke"]

    # The admin's key is replaced in the log; the auditor still holds the key as created.
    assert main(["agents", "create", "admin:ops", "--key", "admin2.key"]) == 0
    capsys.readouterr()
    assert main(["agents", "rotate-admin", "db", "admin2.key", "--admin-key", "admin.key"]) == 0
    assert "rotated admin:ops's key at seq 4" in capsys.readouterr().out
    assert main(["agents", "revoke", "db", "agent:bob", "--admin-key", "admin.key"]) == 2
    assert "replaced since" in capsys.readouterr().err  # the old key signs nothing more
    assert main(["agents", "list", "db"]) == 0
    assert "rotate  admin:ops" in capsys.readouterr().out
    assert main(["checkpoint", "db", "--key", "ck.key"]) == 0
    capsys.readouterr()
    assert main(["verify", "db", "--key", "ck.key", "--admin", admin, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["authorship"]
    assert report["admins_match"] is True
    assert [h[1] for h in report["history"]] == ["admin", "enrol", "revoke", "rotate"]


def test_an_unsigned_log_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "create", "plain", "--unsigned"]) == 0
    capsys.readouterr()
    with Memory("plain", key=False) as memory:
        memory.add_message(Message(speaker="a", content="b"))
    assert main(["agents", "list", "plain"]) == 0
    assert "does not require signatures" in capsys.readouterr().out
    assert main(["keys", "init", "--key", "ck.key", "--name", "ck"]) == 0
    assert main(["checkpoint", "plain", "--key", "ck.key"]) == 0
    capsys.readouterr()
    assert main(["verify", "plain", "--key", "ck.key"]) == 0
    assert "authorship: this log does not require signatures" in capsys.readouterr().out
