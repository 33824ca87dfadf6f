"""queryd's evidence routes (issue 14), over both logs: the latest signed checkpoint, an
inclusion and a consistency proof, each checked with the public key alone; a seq past the
head and a malformed one answered with the cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from daemon_support import in_process

from producers.logs.signing_key import init_key
from producers.memory import Memory
from projector.service import Projector
from queryd.daemon.handles import log_name
from schemas.audit import Message
from schemas.evidence.note import Checkpoint, NoteSigner
from schemas.evidence.proof import ConsistencyProof, InclusionProof

N = 6


def _embedded(request: pytest.FixtureRequest, tmp_path: Path, key: Path) -> str:
    location = str(tmp_path / "memory-db")
    with Memory(location, key=key) as memory:
        for i in range(N):
            memory.add_message(Message(speaker="a", content=f"message {i}"))
    return location


def _kafka(request: pytest.FixtureRequest, tmp_path: Path, key: Path) -> str:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    redis_url = request.getfixturevalue("redis_url")
    location = f"kafka://{bootstrap}/{request.getfixturevalue('unique_name')}?redis={redis_url}"
    with Memory(location) as memory:
        for i in range(N):
            memory.add_message(Message(speaker="a", content=f"message {i}"))
    Projector(location, key=key, checkpoint_ms=0, every_ms=20, lease_ms=1000).run(
        until_caught_up=True, max_seconds=60
    )
    return location


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def signed_log(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, NoteSigner]:
    key = tmp_path / "log.key"
    signer = init_key(key, "memstream.queryd-test")
    make = _embedded if request.param == "embedded" else _kafka
    return make(request, tmp_path, key), signer


def test_checkpoint_and_proofs_served_and_checked_with_the_key(
    signed_log: tuple[str, NoteSigner],
) -> None:
    location, signer = signed_log
    name = log_name(location)
    with in_process([location]) as client:
        answer = client.get(f"/logs/{name}/checkpoint")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        checkpoint = Checkpoint.open(body["checkpoint"], signer.verifier, origin=body["origin"])
        assert checkpoint.size == body["tree_size"] == N
        answer = client.get(f"/logs/{name}/proofs/inclusion", params={"seq": 3})
        assert answer.status_code == 200, answer.text
        proof = InclusionProof.from_json(answer.json())
        assert proof.verify(signer.verifier, origin=checkpoint.origin) == checkpoint
        answer = client.get(f"/logs/{name}/proofs/consistency", params={"old_size": 2})
        assert answer.status_code == 200, answer.text
        ConsistencyProof.from_json(answer.json()).verify(signer.verifier, origin=checkpoint.origin)
        # A seq past the head: 404 naming it; a negative one: 422.
        answer = client.get(f"/logs/{name}/proofs/inclusion", params={"seq": N + 10})
        assert answer.status_code == 404
        assert (
            f"seq {N + 10} is past the head (the last seq is {N - 1})" in answer.json()["message"]
        )
        answer = client.get(f"/logs/{name}/proofs/inclusion", params={"seq": -1})
        assert answer.status_code == 422
        answer = client.get(
            f"/logs/{name}/proofs/consistency", params={"old_size": 1, "new_size": N + 1}
        )
        assert answer.status_code == 404 and f"new_size {N + 1}" in answer.json()["message"]
