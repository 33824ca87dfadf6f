"""Issue 14, tamper evidence on the embedded log: attacks on the SQLite file, each found by
`verify` naming the seq; proofs from a real log checked by memstream and by transparency-dev's
Go modules."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memstream.cli import main
from producers.logs.signing_key import SigningKeyError, init_key, load_signer
from producers.logs.sqlite import LOG_FILE, record_checksum
from producers.logs.sqlite_evidence import SqliteEvidence, VerifyReport, verify_sqlite_log
from producers.memory import Memory
from schemas.audit import Message
from schemas.codec import encode_record
from schemas.evidence.merkle import MerkleTree, leaf_hash, verify_consistency
from schemas.evidence.note import Checkpoint, NoteSigner, NoteVerifier
from schemas.evidence.proof import (
    ConsistencyProof,
    EvidenceMismatchError,
    InclusionProof,
    MalformedProofError,
    NoCheckpointError,
    ProofRangeError,
)

ONE_BY_ONE = 20  # seq 0..19 appended one by one (a checkpoint each), then 20..24 at once


@pytest.fixture
def signer(tmp_path: Path) -> NoteSigner:
    return init_key(tmp_path / "keys" / "log.key", "memstream.test")


@pytest.fixture
def log_path(tmp_path: Path, signer: NoteSigner) -> Path:
    path = tmp_path / "memory-db"
    with Memory(path, key=tmp_path / "keys" / "log.key") as memory:
        for i in range(ONE_BY_ONE):
            memory.add_message(Message(speaker="a", content=f"message {i:02d}"))
        memory.append_many([Message(speaker="b", content=f"batch {i:02d}") for i in range(5)])
    return path


def _sql(path: Path, statements: Callable[[sqlite3.Connection], None]) -> None:
    """What an intruder with write access to the file does: drop the append-only triggers
    and rewrite rows directly."""
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        for trigger in (
            "events_append_only_u",
            "events_append_only_d",
            "checkpoints_append_only_u",
            "checkpoints_append_only_d",
        ):
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        statements(conn)
        conn.commit()
    finally:
        conn.close()


def _record(path: Path, seq: int) -> bytes:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return bytes(conn.execute("SELECT record FROM events WHERE seq = ?", (seq,)).fetchone()[0])
    finally:
        conn.close()


def _rewrite(conn: sqlite3.Connection, seq: int, data: bytes) -> None:
    """Replace record `seq`'s bytes and its checksum, as a careful intruder would."""
    conn.execute(
        "UPDATE events SET record = ?, crc = ? WHERE seq = ?",
        (data, record_checksum(seq, data), seq),
    )


def _note(path: Path, size: int) -> str:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return str(
            conn.execute("SELECT note FROM checkpoints WHERE size = ?", (size,)).fetchone()[0]
        )
    finally:
        conn.close()


def _verify(path: Path, signer: NoteSigner, *external: str, **kw: Any) -> VerifyReport:
    return verify_sqlite_log(
        path, signer.verifier, [(f"kept {i}", n) for i, n in enumerate(external)], **kw
    )


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out + out.err


# The untouched log


def test_an_untouched_log_verifies_and_its_proofs_check(
    log_path: Path, signer: NoteSigner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _verify(log_path, signer, all_signatures=True)
    assert report.ok, report.problem
    assert report.size == 25 and report.stored_checkpoints == ONE_BY_ONE + 1
    assert report.origin is not None and report.origin.startswith("memstream/")
    status, out = _cli(capsys, "verify", str(log_path), "--key", signer.verifier.text())
    assert status == 0 and "OK" in out

    with Memory(log_path, create=False, key=False) as memory:
        for seq in (0, 7, 19, 20, 24):
            proof = memory.prove(seq)
            assert proof.leaf == _record(log_path, seq)  # the leaf is the stored bytes
            again = InclusionProof.from_json(proof.to_json())
            assert again.verify(signer.verifier, origin=report.origin).size == 25
        for old in (0, 1, 7, 20, 25):
            consistency = memory.consistency(old)
            checked = ConsistencyProof.from_json(consistency.to_json())
            assert checked.verify(signer.verifier, origin=report.origin).size == 25
            assert (consistency.old_checkpoint is not None) == (old in range(1, 21) or old == 25)
        older = memory.consistency(3, 12)
        old = Checkpoint.open(_note(log_path, 3), signer.verifier, origin=report.origin)
        new = Checkpoint.open(_note(log_path, 12), signer.verifier, origin=report.origin)
        verify_consistency(3, 12, old.root, new.root, older.proof)


# Attacks on the file: each found by verify, naming the seq


def test_an_edited_record_with_its_checksum_rewritten_is_found_at_its_seq(
    log_path: Path, signer: NoteSigner, capsys: pytest.CaptureFixture[str]
) -> None:
    original = _record(log_path, 7)
    forged = original.replace(b"message 07", b"massage 07")
    assert forged != original
    _sql(log_path, lambda conn: _rewrite(conn, 7, forged))
    # The checksum was rewritten: the log opens and serves the forged record...
    with Memory(log_path, create=False, key=False) as memory:
        assert memory.events()[7].content == "massage 07"
        # ...but it cannot prove anything any more.
        with pytest.raises(EvidenceMismatchError, match="disagree"):
            memory.prove(3)
    report = _verify(log_path, signer)
    assert not report.ok and report.first_bad_seq == 7, report.problem
    assert "seq 7:" in (report.problem or "")
    status, out = _cli(capsys, "verify", str(log_path), "--key", signer.verifier.text())
    assert status == 1 and "FAILED at seq 7" in out, out


def test_an_edited_record_alone_is_found_at_its_seq(log_path: Path, signer: NoteSigner) -> None:
    forged = _record(log_path, 12).replace(b"message 12", b"message 21")
    _sql(
        log_path,
        lambda conn: conn.execute("UPDATE events SET record = ? WHERE seq = 12", (forged,)),
    )
    report = _verify(log_path, signer)
    assert report.first_bad_seq == 12 and "seq 12:" in (report.problem or "")


def test_an_edit_inside_a_batch_commit_is_narrowed_to_that_commit(
    log_path: Path, signer: NoteSigner
) -> None:
    forged = _record(log_path, 22).replace(b"batch 02", b"batch 99")
    _sql(log_path, lambda conn: _rewrite(conn, 22, forged))
    report = _verify(log_path, signer)
    # seq 20..24 were one commit, one checkpoint: the evidence cannot tell which of them.
    assert report.first_bad_seq == 20 and "seq 20 to 24" in (report.problem or "")


def test_deleted_trailing_records_are_found(
    log_path: Path, signer: NoteSigner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = tmp_path / "checkpoint-25.txt"
    status, out = _cli(capsys, "checkpoint", "--latest", str(log_path))
    assert status == 0 and out == _note(log_path, 25)
    kept.write_text(out)  # what an auditor kept before the attack
    _sql(log_path, lambda conn: conn.execute("DELETE FROM events WHERE seq >= 18"))
    report = _verify(log_path, signer)
    assert report.first_bad_seq == 18, report.problem
    assert "seq 18 to 24 missing" in (report.problem or "") and "truncated" in report.problem

    # The intruder also deletes the checkpoints after the cut: the log is consistent with
    # what remains of itself, and only a checkpoint kept outside it shows the loss.
    _sql(log_path, lambda conn: conn.execute("DELETE FROM checkpoints WHERE size > 18"))
    assert _verify(log_path, signer).ok
    status, out = _cli(
        capsys,
        "verify",
        str(log_path),
        "--key",
        signer.verifier.text(),
        "--checkpoint",
        str(kept),
    )
    assert status == 1 and "FAILED at seq 18" in out and "truncated" in out, out


def test_a_deleted_record_in_the_middle_is_found(log_path: Path, signer: NoteSigner) -> None:
    _sql(log_path, lambda conn: conn.execute("DELETE FROM events WHERE seq = 11"))
    report = _verify(log_path, signer)
    assert report.first_bad_seq == 11 and "seq 11 is missing" in (report.problem or "")


def test_two_reordered_records_are_found_at_the_first(log_path: Path, signer: NoteSigner) -> None:
    a, b = _record(log_path, 4), _record(log_path, 9)

    def swap(conn: sqlite3.Connection) -> None:
        _rewrite(conn, 4, b)
        _rewrite(conn, 9, a)

    _sql(log_path, swap)
    report = _verify(log_path, signer)
    assert report.first_bad_seq == 4 and "seq 4:" in (report.problem or ""), report.problem


def test_a_forged_checkpoint_is_refused(log_path: Path, signer: NoteSigner) -> None:
    note = _note(log_path, 25)
    text, _, signature = note.partition("\n\n")
    origin, _, root = text.split("\n")
    forged_root = Checkpoint.parse(text + "\n").root[::-1]
    forged = f"{origin}\n25\n{base64.b64encode(forged_root).decode()}\n\n{signature}"
    _sql(
        log_path,
        lambda conn: conn.execute("UPDATE checkpoints SET note = ? WHERE size = 25", (forged,)),
    )
    report = _verify(log_path, signer)
    assert not report.ok and "does not verify" in (report.problem or "")
    assert "forged" in report.problem and "size 25" in report.problem


def test_an_intruder_who_re_signs_with_another_key_is_found(
    log_path: Path, signer: NoteSigner
) -> None:
    """Edit seq 5, then replace every later checkpoint with one over the forged log, signed
    by a key of the same name: the log's key does not verify them."""
    intruder = NoteSigner.generate(signer.name)
    forged = _record(log_path, 5).replace(b"message 05", b"message 55")
    origin = _verify(log_path, signer).origin
    assert origin is not None

    def attack(conn: sqlite3.Connection) -> None:
        _rewrite(conn, 5, forged)
        records = [bytes(r[0]) for r in conn.execute("SELECT record FROM events ORDER BY seq")]
        tree = MerkleTree(leaf_hash(r) for r in records)
        for (size,) in conn.execute("SELECT size FROM checkpoints WHERE size > 5").fetchall():
            note = Checkpoint(origin, size, tree.root(size)).sign(intruder)
            conn.execute("UPDATE checkpoints SET note = ? WHERE size = ?", (note, size))

    _sql(log_path, attack)
    report = _verify(log_path, signer)
    assert not report.ok and "not signed by" in (report.problem or ""), report.problem
    # Whoever trusts the intruder's key sees a consistent log: the key is the root of trust,
    # which is why a verifier is given the log's public key, never takes it from the log.
    assert verify_sqlite_log(log_path, intruder.verifier).ok


def test_verify_with_another_key_fails(
    log_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = init_key(tmp_path / "other.key", "someone.else")
    report = verify_sqlite_log(log_path, other.verifier)
    assert not report.ok and "not signed by 'someone.else'" in (report.problem or "")
    status, out = _cli(capsys, "verify", str(log_path), "--key", str(tmp_path / "other.key"))
    assert status == 1 and "wrong key" in out


def test_a_forged_checkpoint_in_the_middle_is_found_by_all_signatures(
    log_path: Path, signer: NoteSigner
) -> None:
    text, _, sig = _note(log_path, 10).partition("\n\n")
    _sql(
        log_path,
        lambda conn: conn.execute(
            "UPDATE checkpoints SET note = ? WHERE size = 10", (text[:-2] + "A\n\n" + sig,)
        ),
    )
    # Not relied on (the latest agrees with the log): only the thorough check reads it.
    assert _verify(log_path, signer).ok
    report = _verify(log_path, signer, all_signatures=True)
    assert not report.ok and "size 10" in (report.problem or "")


def test_a_checkpoint_of_another_log_is_refused(
    log_path: Path, signer: NoteSigner, tmp_path: Path
) -> None:
    with Memory(tmp_path / "other-db", key=signer) as other:
        other.add_message(Message(speaker="a", content="elsewhere"))
        note = other.prove(0).checkpoint
    report = _verify(log_path, signer, note)
    assert not report.ok and "expected one of" in (report.problem or "")


# Proofs: clear errors, nothing appended


def test_proof_errors_are_clear_and_append_nothing(log_path: Path, tmp_path: Path) -> None:
    with Memory(log_path, create=False, key=False) as memory:
        with pytest.raises(ProofRangeError, match="seq 25 is past the head .the last seq is 24"):
            memory.prove(25)
        with pytest.raises(ProofRangeError, match="old_size 26 is past"):
            memory.consistency(26)
        with pytest.raises(ProofRangeError, match="new_size 30"):
            memory.consistency(3, 30)
        with pytest.raises(NoCheckpointError, match="no signed checkpoint of size 22"):
            memory.consistency(3, 22)  # inside the batch: never signed
        memory.add_message(Message(speaker="c", content="unsigned"))  # key=False
        with pytest.raises(NoCheckpointError, match="seq 25 is not covered"):
            memory.prove(25)
        assert len(memory) == 26
    report = verify_sqlite_log(log_path, load_signer(tmp_path / "keys" / "log.key").verifier)
    assert report.ok and report.covered == 25 and report.size == 26  # seq 25: unsigned
    with Memory(tmp_path / "empty-db", key=False) as memory:
        with pytest.raises(ProofRangeError, match="the log is empty"):
            memory.prove(0)
        memory.add_message(Message(speaker="c", content="x"))
        with pytest.raises(NoCheckpointError, match="no signed checkpoint yet"):
            memory.prove(0)
        with pytest.raises(SigningKeyError, match="no signing key"):
            memory.checkpoint()
        assert len(memory) == 1
    for bad in (
        {},
        {"kind": "inclusion"},
        {"kind": "inclusion", "checkpoint": "x", "leaf_index": -1, "leaf": "", "audit_path": []},
        {"kind": "inclusion", "checkpoint": "x", "leaf_index": 0, "leaf": "!", "audit_path": []},
        {
            "kind": "inclusion",
            "checkpoint": "x",
            "leaf_index": 0,
            "leaf": "",
            "audit_path": ["AAAA"] * 65,
        },
    ):
        with pytest.raises(MalformedProofError):
            InclusionProof.from_json(bad)


def test_a_proof_of_an_altered_leaf_does_not_verify(log_path: Path, signer: NoteSigner) -> None:
    with Memory(log_path, create=False, key=False) as memory:
        proof = memory.prove(6)
    data = proof.to_json()
    data["leaf"] = data["leaf"][:-4] + "AAAA"
    origin = proof.checkpoint.split("\n")[0]
    with pytest.raises(EvidenceMismatchError, match="seq 6"):
        InclusionProof.from_json(data).verify(signer.verifier, origin=origin)


# Logs written before, and writers that come and go


def test_a_log_from_before_checkpoints_replays_and_can_be_checkpointed(
    tmp_path: Path, signer: NoteSigner, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file as memstream wrote it before evidence existed: events only, no tables of
    checkpoints, some rows without a checksum."""
    path = tmp_path / "old-db"
    path.mkdir()
    conn = sqlite3.connect(path / LOG_FILE)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE events (seq INTEGER PRIMARY KEY, id TEXT NOT NULL, kind TEXT NOT NULL, "
        "record BLOB NOT NULL)"
    )
    messages = [Message(speaker="old", content=f"old {i}") for i in range(8)]
    for seq, m in enumerate(messages):
        conn.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?)", (seq, str(m.id), m.kind, encode_record(m))
        )
    conn.commit()
    conn.close()
    key = tmp_path / "keys" / "log.key"

    status, out = _cli(capsys, "verify", str(path), "--key", str(key))
    assert status == 1 and "no signed checkpoint" in out, out
    status, out = _cli(capsys, "prove", str(path), "3")
    assert status == 2 and "no signed checkpoint" in out, out
    status, out = _cli(capsys, "checkpoint", str(path), "--key", str(key))
    assert status == 0 and out.split("\n")[1] == "8", out
    with Memory(path, create=False, key=key) as memory:
        assert [e.content for e in memory.events()] == [m.content for m in messages]
        proof = memory.prove(3)
        assert proof.leaf == encode_record(messages[3])
        memory.add_message(Message(speaker="new", content="after"))
    report = _verify(path, signer)
    assert report.ok and report.size == 9 and report.signatures_checked == [9]


def test_writers_taking_turns_keep_one_tree(tmp_path: Path, signer: NoteSigner) -> None:
    path = tmp_path / "memory-db"
    with Memory(path, key=signer) as a, Memory(path, key=signer) as b, Memory(path, key=False) as c:
        for i in range(12):
            (a, b, c)[i % 3].add_message(Message(speaker="w", content=f"turn {i}"))
        b.append_many([Message(speaker="w", content=f"b {i}") for i in range(3)])
        proof = a.prove(13)
        origin = _verify(path, signer).origin
        assert proof.verify(signer.verifier, origin=origin).size == 15
        for memory in (a, b, c):
            assert memory.consistency(4).verify(signer.verifier, origin=origin).size == 15
    report = _verify(path, signer, all_signatures=True)
    assert report.ok and report.stored_checkpoints == 9  # a's and b's commits, not c's


def test_a_commit_that_fails_leaves_the_tree_as_the_log(
    tmp_path: Path, signer: NoteSigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "memory-db"
    with Memory(path, key=signer) as memory:
        memory.add_message(Message(speaker="a", content="one"))
        real_cut = SqliteEvidence.cut
        calls = []

        def failing_cut(self: SqliteEvidence, cursor: sqlite3.Cursor) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise sqlite3.OperationalError("disk I/O error")
            real_cut(self, cursor)

        monkeypatch.setattr(SqliteEvidence, "cut", failing_cut)
        with pytest.raises(Exception, match="I/O"):
            memory.add_message(Message(speaker="a", content="refused"))
        assert len(memory) == 1
        memory.add_message(Message(speaker="a", content="two"))
        proof = memory.prove(1)
        assert proof.leaf == _record(path, 1)
    assert _verify(path, signer, all_signatures=True).ok


# Keys


def test_key_files_are_private_and_never_overwritten(tmp_path: Path) -> None:
    key = tmp_path / "k" / "signing.key"
    signer = init_key(key, "memstream.test")
    assert key.stat().st_mode & 0o777 == 0o600
    assert key.read_text().startswith("PRIVATE+KEY+memstream.test+")
    assert load_signer(key).verifier == signer.verifier
    with pytest.raises(SigningKeyError, match="exists: not overwritten"):
        init_key(key, "again")
    assert load_signer(key).verifier == signer.verifier
    key.chmod(0o644)
    with pytest.raises(SigningKeyError, match="readable by others"):
        load_signer(key)
    with pytest.raises(SigningKeyError, match="does not exist"):
        Memory(tmp_path / "db", key=tmp_path / "missing.key")


def test_keys_cli_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = tmp_path / "env.key"
    monkeypatch.setenv("MEMSTREAM_SIGNING_KEY", str(key))
    status, out = _cli(capsys, "keys", "init", "--name", "team.example/log")
    assert status == 0 and key.is_file()
    status, shown = _cli(capsys, "keys", "show")
    verifier = NoteVerifier.parse(shown.strip())
    assert status == 0 and verifier.name == "team.example/log" and verifier.text() in out
    status, out = _cli(capsys, "keys", "init")
    assert status == 2 and "not overwritten" in out
    # A Memory with no key= signs with the environment's key.
    with Memory(tmp_path / "db") as memory:
        memory.add_message(Message(speaker="a", content="signed"))
        proof = memory.prove(0)
        origin = proof.checkpoint.split("\n")[0]
        assert proof.verify(verifier, origin=origin).size == 1
    status, out = _cli(capsys, "verify", str(tmp_path / "db"))
    assert status == 0 and "OK" in out


# Interoperability: the Go verifier built from transparency-dev's modules


def test_proofs_of_a_real_log_verify_with_the_go_modules(
    log_path: Path, signer: NoteSigner, go_verifier: Path
) -> None:
    with Memory(log_path, create=False, key=False) as memory:
        inclusions = [memory.prove(seq).to_json() for seq in (0, 1, 7, 19, 20, 24)]
        consistencies = [memory.consistency(m).to_json() for m in (1, 2, 7, 16, 20, 25)]
    latest = inclusions[0]["checkpoint"]
    origin = latest.split("\n")[0]
    payload = {
        "verifier_key": signer.verifier.text(),
        "origin": origin,
        "checkpoint": latest,
        "inclusions": [
            {"index": p["leaf_index"], "record": p["leaf"], "proof": p["audit_path"]}
            for p in inclusions
        ],
        "consistency": [
            {"old_checkpoint": c["old_checkpoint"], "proof": c["proof"]} for c in consistencies
        ],
    }

    def run(data: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(go_verifier)], input=json.dumps(data), text=True, capture_output=True, timeout=60
        )

    done = run(payload)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("inclusion ok") == 6 and done.stdout.count("consistency ok") == 6
    # The same proofs against the file after an intruder's edit: the Go verifier refuses.
    tampered = dict(payload, inclusions=[dict(payload["inclusions"][2], record="AAAA")])
    done = run(tampered)
    assert done.returncode == 1 and "inclusion of leaf 7" in done.stdout
