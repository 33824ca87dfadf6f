"""Issue 14, tamper evidence on the Kafka log: the projector's signed checkpoints on
LOG.checkpoints and in Redis, proofs from `Memory`, `verify`, and the attacks (a forged
checkpoint, another key, a log topic created again with other records, a checkpoint past
the head, a proof past the head), against the real broker and Redis."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from memstream.cli import main
from producers.logs.kafka_client import consumer_conf
from producers.logs.kafka_evidence import (
    checkpoints_topic,
    kafka_origin,
    verify_kafka_log,
)
from producers.logs.location import parse_kafka_location
from producers.logs.signing_key import init_key
from producers.memory import Memory
from projector.service import Projector
from schemas.audit import Message
from schemas.codec import encode_record
from schemas.evidence.merkle import MerkleTree, leaf_hash
from schemas.evidence.note import Checkpoint, NoteError, NoteSigner
from schemas.evidence.proof import (
    ConsistencyProof,
    EvidenceMismatchError,
    InclusionProof,
    NoCheckpointError,
    ProofRangeError,
)

pytestmark = pytest.mark.kafka

FIRST = 20


@pytest.fixture
def location(kafka_bootstrap: str, redis_url: str, unique_name: str) -> str:
    return f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys" / "projector.key"
    init_key(path, "memstream.kafka-test")
    return path


@pytest.fixture
def signer(key_file: Path) -> NoteSigner:
    from producers.logs.signing_key import load_signer

    return load_signer(key_file)


def _append(location: str, texts: list[str]) -> None:
    with Memory(location) as memory:
        for text in texts:
            memory.add_message(Message(speaker="a", content=text))


def _project(location: str, key: Any) -> Projector:
    projector = Projector(location, key=key, checkpoint_ms=0, every_ms=20, lease_ms=1000)
    projector.run(until_caught_up=True, max_seconds=60)
    return projector


def _values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(consumer_conf(bootstrap))
    tp = TopicPartition(topic, 0)
    _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < high and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            assert message.error() is None, message.error()
            out.append(message.value() or b"")
    consumer.close()
    assert len(out) == high
    return out


def _publish(bootstrap: str, topic: str, note: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, note.encode())
    assert producer.flush(30) == 0


@pytest.fixture
def projected(location: str, key_file: Path) -> str:
    """A log of FIRST records, folded by a projector with a key: checkpoints published."""
    _append(location, [f"message {i:02d}" for i in range(FIRST)])
    projector = _project(location, key_file)
    assert projector.stats.checkpoints >= 1 and projector.stats.evidence_halted is None
    return location


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out + out.err


# --- the untouched log ------------------------------------------------------------------


def test_checkpoints_cover_the_records_bytes_and_proofs_verify(
    projected: str, signer: NoteSigner, redis_url: str
) -> None:
    loc = parse_kafka_location(projected)
    values = _values(loc.bootstrap, loc.topic)
    with Memory(projected, create=False) as memory:
        note = memory.latest_checkpoint()
        checkpoint = Checkpoint.open(note, signer.verifier, origin=kafka_origin(loc))
        # A leaf is the record's value as stored, in seq order: the same tree as the bytes.
        assert checkpoint.size == FIRST
        assert checkpoint.root == MerkleTree(leaf_hash(v) for v in values).root()
        for seq in (0, 1, 7, FIRST - 1):
            proof = memory.prove(seq)
            assert proof.leaf == values[seq]
            # As JSON, and back, then checked with the public key alone.
            again = InclusionProof.from_json(json.loads(json.dumps(proof.to_json())))
            assert again.verify(signer.verifier, origin=kafka_origin(loc)).size == FIRST
        for old in (0, 1, 5, 16, FIRST):
            consistency = ConsistencyProof.from_json(memory.consistency(old).to_json())
            consistency.verify(signer.verifier, origin=kafka_origin(loc))
    # The same note is in Redis.
    client = redis.Redis.from_url(redis_url)
    assert client.get(f"{loc.key_prefix}evidence:checkpoint") == note.encode()
    report = verify_kafka_log(projected, signer.verifier)
    assert report.ok and report.size == FIRST and report.covered == FIRST, report.problem


def test_the_tree_survives_a_restart_and_a_redis_flush(
    projected: str, key_file: Path, signer: NoteSigner, redis_url: str
) -> None:
    loc = parse_kafka_location(projected)
    with Memory(projected, create=False) as memory:
        first = memory.latest_checkpoint()
    _append(projected, [f"second {i}" for i in range(5)])
    _project(projected, key_file)  # a restart: the tree from Redis, checked
    client = redis.Redis.from_url(redis_url)
    # Redis loses everything of this log (its keys only: Redis is shared by the suite).
    for key in client.scan_iter(f"{loc.key_prefix}*"):
        client.delete(key)
    _append(projected, [f"third {i}" for i in range(5)])
    projector = _project(projected, key_file)
    assert projector.stats.evidence_halted is None
    with Memory(projected, create=False) as memory:
        latest = Checkpoint.open(
            memory.latest_checkpoint(), signer.verifier, origin=kafka_origin(loc)
        )
        assert latest.size == FIRST + 10
        proof = memory.consistency(FIRST)
        assert proof.old_checkpoint == first  # the checkpoint of size 20, from the topic
        proof.verify(signer.verifier, origin=kafka_origin(loc))
        memory.prove(FIRST + 7).verify(signer.verifier, origin=kafka_origin(loc))
    assert verify_kafka_log(projected, signer.verifier, all_signatures=True).ok


def test_leaf_hashes_tampered_in_redis_are_not_trusted(
    projected: str, key_file: Path, signer: NoteSigner, redis_url: str
) -> None:
    loc = parse_kafka_location(projected)
    client = redis.Redis.from_url(redis_url)
    leaves = f"{loc.key_prefix}evidence:leaves"
    assert client.strlen(leaves) == FIRST * 32
    client.setrange(leaves, 3 * 32, b"\xff" * 32)  # leaf 3 replaced
    _append(projected, ["after the tampering"])
    projector = _project(projected, key_file)  # reads the log instead; signs the true tree
    assert projector.stats.evidence_halted is None
    client.setrange(leaves, 5 * 32, b"\xee" * 32)
    with Memory(projected, create=False) as memory:
        memory.prove(5).verify(signer.verifier, origin=kafka_origin(loc))
    assert verify_kafka_log(projected, signer.verifier, all_signatures=True).ok


# --- attacks ------------------------------------------------------------------------------


def test_a_forged_checkpoint_on_the_topic_is_refused(
    projected: str, key_file: Path, signer: NoteSigner, capsys: pytest.CaptureFixture[str]
) -> None:
    loc = parse_kafka_location(projected)
    with Memory(projected, create=False) as memory:
        genuine = memory.latest_checkpoint()
    # The genuine signature over another root: a forged checkpoint.
    body, signatures = genuine.split("\n\n")
    lines = body.split("\n")
    lines[2] = base64.b64encode(b"\x07" * 32).decode()
    forged = "\n".join(lines) + "\n\n" + signatures
    _publish(loc.bootstrap, checkpoints_topic(loc), forged)
    report = verify_kafka_log(projected, signer.verifier)
    assert not report.ok
    assert "does not verify: the checkpoint is forged or was altered" in (report.problem or "")
    status, out = _cli(capsys, "verify", projected, "--key", signer.verifier.text())
    assert status == 1 and "forged" in out
    # A proof against it is refused by whoever checks it with the key.
    with Memory(projected, create=False) as memory, pytest.raises(EvidenceMismatchError):
        memory.prove(2)  # the forged root: the log disagrees with it
    # A projector ignores it, says so, and goes on signing the true tree.
    _append(projected, ["after the forgery"])
    projector = _project(projected, key_file)
    assert projector.stats.evidence_halted is None and projector.stats.checkpoints >= 1
    with Memory(projected, create=False) as memory:
        memory.prove(FIRST).verify(signer.verifier, origin=kafka_origin(loc))


def test_a_checkpoint_signed_with_another_key_is_refused(
    projected: str, signer: NoteSigner
) -> None:
    loc = parse_kafka_location(projected)
    intruder = NoteSigner.generate(signer.name)  # the same name, another key
    values = _values(loc.bootstrap, loc.topic)
    tree = MerkleTree(leaf_hash(v) for v in values)
    note = Checkpoint(kafka_origin(loc), tree.size, tree.root()).sign(intruder)
    _publish(loc.bootstrap, checkpoints_topic(loc), note)
    report = verify_kafka_log(projected, signer.verifier)
    assert not report.ok and "a wrong key, or a checkpoint forged with another key" in (
        report.problem or ""
    )
    with Memory(projected, create=False) as memory:
        with pytest.raises(NoteError, match="not signed by"):
            memory.prove(1).verify(signer.verifier, origin=kafka_origin(loc))


def test_a_checkpoint_past_the_head_and_a_proof_past_the_head(
    projected: str,
    key_file: Path,
    signer: NoteSigner,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    loc = parse_kafka_location(projected)
    with Memory(projected, create=False) as memory:
        with pytest.raises(
            ProofRangeError, match=f"seq 99 is past the head \\(the last seq is {FIRST - 1}\\)"
        ):
            memory.prove(99)
        with pytest.raises(ProofRangeError, match="new_size 99"):
            memory.consistency(1, 99)
    status, out = _cli(capsys, "prove", projected, "99")
    assert status == 2 and "past the head" in out
    # A checkpoint (with the log's own key) of 5 records more than the log holds.
    note = Checkpoint(kafka_origin(loc), FIRST + 5, b"\x01" * 32).sign(signer)
    _publish(loc.bootstrap, checkpoints_topic(loc), note)
    with Memory(projected, create=False) as memory:
        with pytest.raises(EvidenceMismatchError, match=f"seq {FIRST} to {FIRST + 4} are missing"):
            memory.prove(1)
    report = verify_kafka_log(projected, signer.verifier)
    assert not report.ok and report.first_bad_seq == FIRST
    assert f"seq {FIRST} to {FIRST + 4} missing" in (report.problem or "")
    # A projector signs nothing below it, and says why.
    projector = _project(projected, key_file)
    assert projector.stats.checkpoints == 0
    assert f"the checkpoint of size {FIRST + 5} published on" in caplog.text
    assert f"is past the log's end ({FIRST} records)" in caplog.text


def _delete_topic(admin: AdminClient, topic: str) -> None:
    admin.delete_topics([topic], operation_timeout=30)[topic].result(60)
    deadline = time.monotonic() + 60
    while topic in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, f"{topic} was not deleted"
        time.sleep(0.2)


def _recreate(location: str, values: list[bytes]) -> None:
    """The log topic created again, holding `values` (produced as they are)."""
    loc = parse_kafka_location(location)
    deadline = time.monotonic() + 60
    while True:
        try:
            Memory(location).close()
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    producer = Producer({"bootstrap.servers": loc.bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(loc.topic, value)
    assert producer.flush(30) == 0


def test_a_log_topic_created_again_with_other_records_is_found_at_the_first_seq(
    projected: str,
    key_file: Path,
    signer: NoteSigner,
    tmp_path: Path,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    loc = parse_kafka_location(projected)
    _append(projected, [f"second {i}" for i in range(5)])
    _project(projected, key_file)  # checkpoints of sizes 20 and 25
    with Memory(projected, create=False) as memory:
        kept = memory.latest_checkpoint()  # an auditor keeps the latest checkpoint
    (tmp_path / "kept.note").write_text(kept)
    values = _values(loc.bootstrap, loc.topic)
    # The topic deleted and created again: seq 0 to 21 as they were, then other records.
    _delete_topic(AdminClient({"bootstrap.servers": loc.bootstrap}), loc.topic)
    others = [encode_record(Message(speaker="mallory", content=f"other {i}")) for i in range(3)]
    _recreate(projected, values[:22] + others)
    report = verify_kafka_log(projected, signer.verifier, [("kept.note", kept)])
    # Exact: the leaf hashes in Redis are the ones the checkpoint of size 25 signed.
    assert not report.ok and report.first_bad_seq == 22, report.problem
    assert "seq 22 is the first record that differs" in (report.problem or "")
    status, out = _cli(
        capsys,
        "verify",
        projected,
        "--key",
        signer.verifier.text(),
        "--checkpoint",
        str(tmp_path / "kept.note"),
    )
    assert status == 1 and "FAILED at seq 22" in out
    # The projector folds the new topic but signs none of it: it would be a fork.
    projector = _project(projected, key_file)
    assert projector.stats.evidence_halted is not None
    assert "disagree with the checkpoint of size 25" in projector.stats.evidence_halted
    with Memory(projected, create=False) as memory:
        assert memory.latest_checkpoint() == kept  # nothing newer was published
        with pytest.raises(EvidenceMismatchError, match="seq 22: .* the log was altered"):
            memory.prove(22)
    # Without those leaf hashes (Redis flushed), the checkpoints bound it: 20 agrees.
    redis.Redis.from_url(redis_url).delete(f"{loc.key_prefix}evidence:leaves")
    report = verify_kafka_log(projected, signer.verifier, [("kept.note", kept)])
    assert not report.ok and report.first_bad_seq == FIRST, report.problem
    assert (
        f"seq {FIRST} to 24: the log's records disagree with the signed checkpoint of size 25"
        in (report.problem or "")
    )


def test_a_log_without_checkpoints_says_so(location: str) -> None:
    _append(location, ["one"])
    with Memory(location, create=False) as memory:
        with pytest.raises(NoCheckpointError, match="checkpoints does not exist"):
            memory.prove(0)
        with pytest.raises(Exception, match="projector signs the checkpoints"):
            memory.checkpoint()


def test_prove_and_verify_on_the_command_line(
    projected: str, signer: NoteSigner, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = _cli(capsys, "prove", projected, "3")
    assert status == 0, out
    proof = InclusionProof.from_json(json.loads(out))
    assert proof.leaf_index == 3
    proof.verify(signer.verifier, origin=kafka_origin(parse_kafka_location(projected)))
    status, out = _cli(capsys, "prove", projected, "--consistency", "4")
    assert status == 0, out
    status, out = _cli(capsys, "checkpoint", projected, "--latest")
    assert status == 0 and out.startswith(kafka_origin(parse_kafka_location(projected)))
    status, out = _cli(capsys, "verify", projected, "--key", signer.verifier.text(), "--json")
    assert status == 0, out
    assert json.loads(out)["ok"] is True and json.loads(out)["size"] == FIRST


# --- interoperability: the Go verifier over a real Kafka log's proofs ---------------------


def test_proofs_of_a_kafka_log_verify_with_the_go_modules(
    projected: str, key_file: Path, signer: NoteSigner, go_verifier: Path
) -> None:
    # Checkpoints of sizes 20 (the fixture's), 21, 24 and 27: one each projector run.
    for n in (1, 3, 3):
        _append(projected, [f"more {i}" for i in range(n)])
        _project(projected, key_file)
    with Memory(projected, create=False) as memory:
        inclusions = [memory.prove(seq).to_json() for seq in (0, 1, 7, 19, 20, 26)]
        consistencies = [memory.consistency(m).to_json() for m in (20, 21, 24, 27)]
        assert all(c["old_checkpoint"] for c in consistencies)
    latest = inclusions[0]["checkpoint"]
    payload = {
        "verifier_key": signer.verifier.text(),
        "origin": latest.split("\n")[0],
        "checkpoint": latest,
        "inclusions": [
            {"index": p["leaf_index"], "record": p["leaf"], "proof": p["audit_path"]}
            for p in inclusions
        ],
        "consistency": [
            {"old_checkpoint": c["old_checkpoint"], "proof": c["proof"]} for c in consistencies
        ],
    }
    done = subprocess.run(
        [str(go_verifier)], input=json.dumps(payload), text=True, capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("inclusion ok") == 6 and done.stdout.count("consistency ok") == 4


def test_the_projector_command_signs_with_the_key_the_environment_names(
    location: str, key_file: Path, signer: NoteSigner
) -> None:
    _append(location, [f"message {i}" for i in range(3)])
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "MEMSTREAM_SIGNING_KEY": str(key_file),
    }
    done = subprocess.run(
        [sys.executable, "-m", "memstream", "projector", "run", "--log", location]
        + ["--until-caught-up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 signed checkpoints" in done.stdout
    with Memory(location, create=False) as memory:
        note = memory.latest_checkpoint()
    origin = kafka_origin(parse_kafka_location(location))
    checkpoint = Checkpoint.open(note, signer.verifier, origin=origin)
    assert checkpoint.size == 3
    # A key file that cannot be read: the projector says which, and signs nothing.
    env["MEMSTREAM_SIGNING_KEY"] = str(key_file.parent / "missing.key")
    done = subprocess.run(
        [sys.executable, "-m", "memstream", "projector", "run", "--log", location]
        + ["--until-caught-up"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "missing.key does not exist" in done.stderr


def test_leaf_hashes_deleted_under_a_running_projector_are_written_again(
    projected: str, key_file: Path, signer: NoteSigner, redis_url: str
) -> None:
    loc = parse_kafka_location(projected)
    client = redis.Redis.from_url(redis_url)
    leaves = f"{loc.key_prefix}evidence:leaves"
    stop = threading.Event()
    projector = Projector(projected, key=key_file, checkpoint_ms=0, every_ms=20, lease_ms=1000)
    runner = threading.Thread(target=projector.run, args=(stop,))
    runner.start()
    try:
        _append(projected, ["one more"])
        _wait(lambda: client.strlen(leaves) == (FIRST + 1) * 32, "the leaves of 21 records")
        client.delete(leaves)  # Redis loses the leaf hashes (not the snapshot)
        _append(projected, ["and another"])
        _wait(lambda: client.strlen(leaves) == (FIRST + 2) * 32, "the leaves of 22 records")
    finally:
        stop.set()
        runner.join(60)
    values = _values(loc.bootstrap, loc.topic)
    assert client.get(leaves) == b"".join(leaf_hash(v) for v in values)


def _wait(check: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        time.sleep(0.05)


def test_records_flooding_the_checkpoints_topic_do_not_hide_the_latest_checkpoint(
    projected: str, key_file: Path
) -> None:
    """Others' records after our latest checkpoint (more than a projector looks back at
    first) do not make it forget what it signed: a rewritten log is still not signed."""
    loc = parse_kafka_location(projected)
    producer = Producer({"bootstrap.servers": loc.bootstrap})
    for i in range(300):
        producer.produce(checkpoints_topic(loc), f"junk {i}".encode())
    assert producer.flush(30) == 0
    _delete_topic(AdminClient({"bootstrap.servers": loc.bootstrap}), loc.topic)
    others = [encode_record(Message(speaker="mallory", content=f"other {i}")) for i in range(21)]
    _recreate(projected, others)
    projector = _project(projected, key_file)
    assert projector.stats.checkpoints == 0
    assert projector.stats.evidence_halted is not None
    assert f"checkpoint of size {FIRST} published" in projector.stats.evidence_halted
