"""The pure parts added for the logs: packed extension and truncation of the tree, signer
key text, origin-pinned checkpoints, and proof JSON (bounded, checked)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.evidence.merkle import MerkleTree, leaf_hash
from schemas.evidence.note import Checkpoint, CheckpointSigner, NoteError, NoteSigner
from schemas.evidence.proof import (
    ConsistencyProof,
    EvidenceMismatchError,
    InclusionProof,
    MalformedProofError,
)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 300), st.lists(st.integers(0, 300), max_size=4))
def test_packed_extension_and_truncation_give_the_tree_of_appends(n: int, cuts: list[int]) -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    reference = MerkleTree(leaves)
    tree = MerkleTree()
    done = 0
    for cut in sorted(c for c in cuts if c <= n):
        tree.extend_packed(b"".join(leaves[done:cut]))
        done = cut
    tree.extend_packed(b"".join(leaves[done:]))
    assert tree.size == n and tree.root() == reference.root()
    for size in {0, n // 3, n}:
        shrunk = MerkleTree(leaves)
        shrunk.truncate(size)
        assert shrunk.root() == MerkleTree(leaves[:size]).root()
        shrunk.extend(leaves[size:])  # grows again to the same tree
        assert shrunk.root() == reference.root()
        if n:
            assert shrunk.inclusion_proof(n - 1) == reference.inclusion_proof(n - 1)
    with pytest.raises(ValueError):
        tree.extend_packed(b"x" * 31)
    with pytest.raises(ValueError):
        tree.truncate(n + 1)


def test_signer_keys_round_trip_and_refuse_damage() -> None:
    signer = NoteSigner.generate("example.com/log")
    text = signer.text()
    assert text.startswith("PRIVATE+KEY+example.com/log+")
    again = NoteSigner.parse(text)
    assert again.verifier == signer.verifier
    wrong_id = text.replace(f"+{signer.verifier.key_id.hex()}+", "+00000000+")
    for bad in ("", "example.com/log+00+AAAA", wrong_id, text[:-4]):
        with pytest.raises(NoteError) as caught:
            NoteSigner.parse(bad)
        # never quotes the key; base64 may itself hold '+', so split at the fourth only
        key = text.split("+", 4)[4]
        assert key[:12] not in str(caught.value)


def test_checkpoints_are_pinned_to_their_origin() -> None:
    signer = NoteSigner.generate("example.com/key")
    note = Checkpoint("memstream/log-a", 3, bytes(32)).sign(signer)
    assert Checkpoint.open(note, signer.verifier, origin="memstream/log-a").size == 3
    with pytest.raises(NoteError, match="expected one of 'memstream/log-b'"):
        Checkpoint.open(note, signer.verifier, origin="memstream/log-b")
    with pytest.raises(NoteError, match="expected one of 'example.com/key'"):
        Checkpoint.open(note, signer.verifier)  # by default, the key's own name


def test_proof_json_round_trips_and_verifies() -> None:
    signer = NoteSigner.generate("example.com/key")
    records = [f"r{i}".encode() for i in range(37)]
    tree = MerkleTree(leaf_hash(r) for r in records)
    origin = "memstream/x"
    note = Checkpoint(origin, 37, tree.root()).sign(signer)
    proof = InclusionProof(note, 20, records[20], tuple(tree.inclusion_proof(20)))
    data = proof.to_json()
    assert data["tree_size"] == 37 and base64.b64decode(data["leaf"]) == b"r20"
    assert InclusionProof.from_json(data) == proof
    assert InclusionProof.from_json(data).verify(signer.verifier, origin=origin).size == 37
    moved = dict(data, leaf_index=21)
    with pytest.raises(EvidenceMismatchError, match="seq 21"):
        InclusionProof.from_json(moved).verify(signer.verifier, origin=origin)

    old_note = Checkpoint(origin, 9, tree.root(9)).sign(signer)
    consistency = ConsistencyProof(
        note, 9, tree.root(9), old_note, tuple(tree.consistency_proof(9))
    )
    cdata = consistency.to_json()
    assert ConsistencyProof.from_json(cdata).verify(signer.verifier, origin=origin).size == 37
    lying = dict(cdata, old_root=base64.b64encode(bytes(32)).decode())
    with pytest.raises(EvidenceMismatchError, match="old checkpoint"):
        ConsistencyProof.from_json(lying).verify(signer.verifier, origin=origin)
    unsigned = dict(lying, old_checkpoint=None)
    with pytest.raises(EvidenceMismatchError, match="9 -> 37"):
        ConsistencyProof.from_json(unsigned).verify(signer.verifier, origin=origin)
    for bad in (
        [],
        dict(cdata, kind="inclusion"),
        dict(cdata, old_size="9"),
        dict(cdata, proof=["AAAA"]),
        dict(cdata, checkpoint="x" * 70_000),
        dict(cdata, old_root="!!"),
    ):
        with pytest.raises(MalformedProofError):
            ConsistencyProof.from_json(bad)


def test_the_fast_checkpoint_signer_signs_exactly_as_a_checkpoint_does() -> None:
    signer = NoteSigner.generate("example.com/key")
    fast = CheckpointSigner("memstream/log", signer)
    for size in (0, 1, 1000, 2**40):
        root = leaf_hash(size.to_bytes(8, "big"))
        assert fast.sign(size, root) == Checkpoint("memstream/log", size, root).sign(signer)
    with pytest.raises(NoteError):
        CheckpointSigner("two\nlines", signer)
    with pytest.raises(NoteError):
        fast.sign(1, b"short")
