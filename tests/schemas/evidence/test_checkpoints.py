"""Signed checkpoints and proofs, checked by memstream and by a verifier written by others
(transparency-dev's Go modules and golang.org/x/mod/sumdb/note, built from the Go module
proxy)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from schemas.evidence.merkle import MerkleTree, leaf_hash
from schemas.evidence.note import Checkpoint, NoteError, NoteSigner, NoteVerifier, open_note

GO_VERIFIER = Path(__file__).with_name("goverify")


@pytest.fixture(scope="session")
def go_verifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("the go command is not installed")
    out = tmp_path_factory.mktemp("goverify") / "goverify"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_VERIFIER, check=True, timeout=300)
    return out


def run_go(binary: Path, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    def b64(value: Any) -> Any:
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, list):
            return [b64(v) for v in value]
        if isinstance(value, dict):
            return {k: b64(v) for k, v in value.items()}
        return value

    return subprocess.run(
        [str(binary)], input=json.dumps(b64(payload)), text=True, capture_output=True, timeout=60
    )


def test_checkpoints_and_proofs_verify_with_the_go_modules(go_verifier: Path) -> None:
    signer = NoteSigner.generate("memstream.test/log-a")
    records = [f"record {i}".encode() for i in range(1000)]
    tree = MerkleTree(leaf_hash(r) for r in records)
    note = Checkpoint(signer.name, tree.size, tree.root()).sign(signer)
    old_sizes = [1, 2, 3, 7, 8, 500, 999, 1000]
    payload = {
        "verifier_key": signer.verifier.text(),
        "origin": signer.name,
        "checkpoint": note,
        "inclusions": [
            {"index": i, "record": records[i], "proof": tree.inclusion_proof(i)}
            for i in (0, 1, 2, 511, 512, 998, 999)
        ],
        "consistency": [
            {
                "old_checkpoint": Checkpoint(signer.name, m, tree.root(m)).sign(signer),
                "proof": tree.consistency_proof(m),
            }
            for m in old_sizes
        ],
    }
    done = run_go(go_verifier, payload)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("inclusion ok") == 7
    assert done.stdout.count("consistency ok") == len(old_sizes)

    # The same verifier refuses a changed record, a forged root, another key's signature.
    changed = dict(payload, inclusions=[dict(payload["inclusions"][3], record=b"record 510")])
    done = run_go(go_verifier, changed)
    assert done.returncode == 1 and "inclusion of leaf 511" in done.stdout
    rewritten = MerkleTree(leaf_hash(r) for r in [b"forged", *records[1:]])
    forged = dict(
        payload,
        checkpoint=Checkpoint(signer.name, 1000, rewritten.root()).sign(signer),
        inclusions=[],
        consistency=[payload["consistency"][5]],
    )
    done = run_go(go_verifier, forged)
    assert done.returncode == 1 and "consistency 500 -> 1000" in done.stdout
    intruder = NoteSigner.generate(signer.name)  # the same name, another key
    stolen = dict(payload, checkpoint=Checkpoint(signer.name, 1000, tree.root()).sign(intruder))
    done = run_go(go_verifier, stolen)
    assert done.returncode == 1 and "checkpoint" in done.stdout


def test_notes_refuse_forgeries_and_malformed_text() -> None:
    signer = NoteSigner.generate("memstream.test/log-b")
    verifier = NoteVerifier.parse(signer.verifier.text())
    assert verifier == signer.verifier
    checkpoint = Checkpoint(signer.name, 5, bytes(range(32)))
    note = checkpoint.sign(signer)
    assert Checkpoint.open(note, verifier) == checkpoint
    tampered = note.replace("\n5\n", "\n6\n")
    with pytest.raises(NoteError, match="does not verify"):
        Checkpoint.open(tampered, verifier)
    other = NoteSigner.generate("memstream.test/other")
    with pytest.raises(NoteError, match="not signed by"):
        open_note(Checkpoint(other.name, 5, bytes(32)).sign(other), verifier)
    for bad in ("", "no signature\n", note.replace("\u2014", "--"), note + "x" * 70_000):
        with pytest.raises(NoteError):
            open_note(bad, verifier)
    with pytest.raises(NoteError, match="key id does not match"):
        NoteVerifier.parse(verifier.text().replace(verifier.key_id.hex(), "00000000"))
    with pytest.raises(NoteError, match="decimal"):
        Checkpoint.parse("origin\n-1\nAAAA\n")
    with pytest.raises(NoteError, match="origin"):
        Checkpoint("two\nlines", 1, bytes(32))


def test_a_verifier_key_whose_base64_holds_a_plus_sign_parses() -> None:
    for _ in range(1000):
        signer = NoteSigner.generate("memstream.test/plus")
        text = signer.verifier.text()
        if "+" in text.split("+", 2)[2]:
            assert NoteVerifier.parse(text) == signer.verifier
            return
    raise AssertionError("no key with '+' in its base64 in 1000 tries")
