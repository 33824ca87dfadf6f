"""The Merkle tree against RFC 9162's recursive definitions, written out literally here."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.evidence.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    ProofError,
    leaf_hash,
    root_of,
    verify_consistency,
    verify_inclusion,
)


def _h(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(d: list[bytes]) -> bytes:
    """MTH(D[n]), RFC 9162 2.1.1, literally."""
    if not d:
        return _h(b"")
    if len(d) == 1:
        return _h(b"\x00" + d[0])
    k = _k(len(d))
    return _h(b"\x01" + mth(d[:k]) + mth(d[k:]))


def path(m: int, d: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]), RFC 9162 2.1.3.1, literally."""
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return path(m, d[:k]) + [mth(d[k:])]
    return path(m - k, d[k:]) + [mth(d[:k])]


def subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b), RFC 9162 2.1.4.1, literally."""
    if m == len(d):
        return [] if b else [mth(d)]
    k = _k(len(d))
    if m <= k:
        return subproof(m, d[:k], b) + [mth(d[k:])]
    return subproof(m - k, d[k:], False) + [mth(d[:k])]


def records(n: int) -> list[bytes]:
    return [f"record {i}".encode() * (i % 3 + 1) for i in range(n)]


def test_roots_and_proofs_equal_the_rfcs_definitions_for_every_small_size() -> None:
    data = records(70)
    tree = MerkleTree(leaf_hash(r) for r in data)
    assert tree.root(0) == EMPTY_ROOT == mth([])
    for n in range(1, len(data) + 1):
        root = tree.root(n)
        assert root == mth(data[:n]), n
        for m in range(n):
            proof = tree.inclusion_proof(m, n)
            assert proof == path(m, data[:n]), (m, n)
            verify_inclusion(m, n, leaf_hash(data[m]), proof, root)
        for m in range(1, n):
            proof = tree.consistency_proof(m, n)
            assert proof == subproof(m, data[:n], True), (m, n)
            verify_consistency(m, n, tree.root(m), root, proof)


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 3000), st.data())
def test_a_changed_byte_a_wrong_index_or_a_tampered_proof_never_verifies(
    n: int, data: st.DataObject
) -> None:
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    tree = MerkleTree(leaves)
    root = tree.root()
    m = data.draw(st.integers(0, n - 1))
    proof = tree.inclusion_proof(m)
    verify_inclusion(m, n, leaves[m], proof, root)
    with pytest.raises(ProofError):
        verify_inclusion(m, n, leaf_hash(b"forged"), proof, root)
    other = data.draw(st.integers(0, n - 1).filter(lambda x: x != m))
    with pytest.raises(ProofError):
        verify_inclusion(other, n, leaves[m], proof, root)
    if proof:
        i = data.draw(st.integers(0, len(proof) - 1))
        bad = list(proof)
        bad[i] = bytes(32)
        with pytest.raises(ProofError):
            verify_inclusion(m, n, leaves[m], bad, root)
        with pytest.raises(ProofError):
            verify_inclusion(m, n, leaves[m], proof[:-1], root)
    old = data.draw(st.integers(1, n - 1))
    cproof = tree.consistency_proof(old)
    verify_consistency(old, n, tree.root(old), root, cproof)
    with pytest.raises(ProofError):
        verify_consistency(old, n, leaf_hash(b"x"), root, cproof)
    # a log that rewrote one record before `old` cannot prove consistency with its past
    rewritten = list(leaves)
    rewritten[data.draw(st.integers(0, old - 1))] = leaf_hash(b"rewritten")
    forged = MerkleTree(rewritten)
    with pytest.raises(ProofError):
        verify_consistency(old, n, tree.root(old), forged.root(), forged.consistency_proof(old))


def test_bad_arguments_are_refused_with_what_is_wrong() -> None:
    tree = MerkleTree([leaf_hash(b"a"), leaf_hash(b"b")])
    with pytest.raises(ValueError, match="leaf 2 is not in a tree of size 2"):
        tree.inclusion_proof(2)
    with pytest.raises(ValueError, match="tree size 3"):
        tree.root(3)
    with pytest.raises(ValueError, match="32 bytes"):
        tree.append(b"short")
    with pytest.raises(ProofError, match="32-byte"):
        verify_inclusion(0, 2, leaf_hash(b"a"), [b"x"], tree.root())
    assert root_of([b"a", b"b"]) == tree.root()
