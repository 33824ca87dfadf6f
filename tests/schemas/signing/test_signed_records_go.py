"""Signed records checked by a verifier written by others: golang.org/x/mod/sumdb/note,
built from the Go module proxy (as the checkpoints' verifier is), over a real signed log."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from producers.memory import Memory
from schemas.audit import Message
from schemas.evidence.note import NoteSigner
from schemas.signing import sign_record, split_signed

GO_SIGNED = Path(__file__).with_name("gosigned")


@pytest.fixture(scope="session")
def go_signed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("the go command is not installed")
    out = tmp_path_factory.mktemp("gosigned") / "gosigned"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_SIGNED, check=True, timeout=300)
    return out


def _run(binary: Path, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary)], input=json.dumps(payload), text=True, capture_output=True, timeout=60
    )


def _b64(records: list[bytes]) -> list[str]:
    return [base64.b64encode(r).decode() for r in records]


def test_every_record_of_a_signed_log_verifies_with_sumdb_note(
    go_signed: Path, tmp_path: Path
) -> None:
    admin = NoteSigner.generate("admin:root")
    alice = NoteSigner.generate("agent:alice")
    bob = NoteSigner.generate("agent:bob")
    location = str(tmp_path / "db")
    with Memory(location, agent_key=admin, signed=True, key=False) as memory:
        memory.enrol(alice.verifier)
        memory.enrol(bob.verifier)
    for signer in (alice, bob, alice):
        with Memory(location, agent_key=signer, key=False) as agent:
            agent.add_message(Message(speaker="ana", content=f"said to {signer.name}"))
    with Memory(location, create=False) as reader:
        stored = [data for _, data in reader.log.records(0, timeout=1)]
        auth = reader.authorship
    assert auth is not None and len(stored) == 6
    # The auditor's keys: the admin key held, and the agents' keys as the log enrolled them.
    keys = [
        admin.verifier.text(),
        *(key for _, action, _, key in auth.history if action == "enrol"),
    ]
    payload = {"log_id": auth.log_id, "verifier_keys": keys, "records": _b64(stored)}
    done = _run(go_signed, payload)
    assert done.returncode == 0, done.stdout + done.stderr
    signers = [line.split()[-1] for line in done.stdout.splitlines()]
    assert signers == ["admin:root"] * 3 + ["agent:alice", "agent:bob", "agent:alice"]
    assert signers == [split_signed(r).signer for r in stored]

    # The same verifier refuses an altered record, one signed for another log, one signed
    # by a key it was not given, as memstream's fold does.
    altered = stored[3].replace(b"said to", b"said 2 ")
    other_log = sign_record(alice, "another-log", split_signed(stored[3]).inner)
    mallory = NoteSigner.generate("agent:alice")  # the name, not the key
    impostor = sign_record(mallory, auth.log_id, split_signed(stored[3]).inner)
    bad = dict(payload, records=_b64([altered, other_log, impostor, stored[4]]))
    done = _run(go_signed, bad)
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert [line.split()[2] for line in lines] == ["bad:", "bad:", "bad:", "ok"], done.stdout
