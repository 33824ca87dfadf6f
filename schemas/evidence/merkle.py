"""The log's Merkle tree, as RFC 9162 (Certificate Transparency 2.0) section 2.1 defines it.

Leaves are the stored records' bytes in seq order (leaf ``seq`` is leaf index ``seq``);
``leaf hash = SHA-256(0x00 || record bytes)``, ``node hash = SHA-256(0x01 || left ||
right)``, and the hash of the empty tree is SHA-256 of nothing. Inclusion proofs (RFC 9162
2.1.3) and consistency proofs (2.1.4) are lists of 32-byte hashes in the RFC's order, and
verify with any RFC 9162 verifier.

`MerkleTree` keeps the hash of every complete, aligned subtree (level ``k`` holds the hashes
of leaves ``[i * 2**k, (i + 1) * 2**k)``), 64 bytes per leaf in all, so a root of any prefix
and any proof costs O(log n) hashes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

__all__ = [
    "HASH_SIZE",
    "EMPTY_ROOT",
    "leaf_hash",
    "node_hash",
    "MerkleTree",
    "root_of",
    "ProofError",
    "verify_inclusion",
    "verify_consistency",
    "root_from_inclusion",
]

HASH_SIZE = 32
_sha256 = hashlib.sha256
EMPTY_ROOT = _sha256(b"").digest()


class ProofError(ValueError):
    """A proof that does not verify, or that is malformed for the sizes it claims."""


def leaf_hash(data: bytes) -> bytes:
    """The hash of the leaf holding `data` (a record's stored bytes)."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return _sha256(b"\x01" + left + right).digest()


def _largest_power_of_two_below(n: int) -> int:
    """The largest power of two strictly smaller than `n` (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """The tree of a log's records, grown one leaf at a time in seq order."""

    __slots__ = ("_levels",)

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[bytearray] = [bytearray()]
        self.extend(leaf_hashes)

    @property
    def size(self) -> int:
        return len(self._levels[0]) // HASH_SIZE

    def __len__(self) -> int:
        return self.size

    def append(self, leaf: bytes) -> None:
        """Add the next leaf, given its leaf hash (`leaf_hash` of the record's bytes)."""
        if len(leaf) != HASH_SIZE:
            raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, got {len(leaf)}")
        levels = self._levels
        level = 0
        levels[0] += leaf
        # Each completed pair at a level makes one node at the level above.
        while len(levels[level]) // HASH_SIZE % 2 == 0:
            row = levels[level]
            parent = _sha256(b"\x01" + row[-2 * HASH_SIZE :]).digest()
            level += 1
            if level == len(levels):
                levels.append(bytearray())
            levels[level] += parent

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        for leaf in leaf_hashes:
            self.append(leaf)

    def extend_packed(self, packed: bytes | bytearray) -> None:
        """Add many leaves at once, given their leaf hashes concatenated: the same tree as
        `append` one by one, a level at a time (several times faster for long runs)."""
        if len(packed) % HASH_SIZE:
            raise ValueError(f"packed leaf hashes are a multiple of {HASH_SIZE} bytes")
        levels = self._levels
        levels[0] += packed
        level = 0
        pair = 2 * HASH_SIZE
        while True:
            row = levels[level]
            if level + 1 == len(levels):
                levels.append(bytearray())
            above = levels[level + 1]
            # Pairs of this level not yet hashed into the level above.
            start = len(above) * 2
            end = len(row) - len(row) % pair
            if start >= end:
                break
            node = _sha256(b"\x01")
            parents = []
            with memoryview(row) as view:  # released before any later resize of `row`
                for i in range(start, end, pair):
                    h = node.copy()
                    h.update(view[i : i + pair])
                    parents.append(h.digest())
            above += b"".join(parents)
            level += 1
        while len(levels) > 1 and not levels[-1]:
            levels.pop()

    def truncate(self, size: int) -> None:
        """Drop the leaves from index `size` on (undoing appends whose commit failed)."""
        if not 0 <= size <= self.size:
            raise ValueError(f"tree size {size}: the tree has {self.size} leaves")
        for level, row in enumerate(self._levels):
            del row[(size >> level) * HASH_SIZE :]
        while len(self._levels) > 1 and not self._levels[-1]:
            self._levels.pop()

    def leaf(self, index: int) -> bytes:
        """The leaf hash at `index`."""
        if not 0 <= index < self.size:
            raise IndexError(f"leaf {index}: the tree has {self.size} leaves")
        return bytes(self._levels[0][index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def leaves(self, start: int = 0, end: int | None = None) -> bytes:
        """The leaf hashes of [start, end) concatenated (the form `extend_packed` takes)."""
        stop = self.size if end is None else end
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"leaves {start}..{stop}: the tree has {self.size} leaves")
        return bytes(self._levels[0][start * HASH_SIZE : stop * HASH_SIZE])

    def _node(self, level: int, index: int) -> bytes:
        row = self._levels[level]
        return bytes(row[index * HASH_SIZE : (index + 1) * HASH_SIZE])

    def _range(self, start: int, size: int) -> bytes:
        """MTH of leaves [start, start + size): an aligned complete subtree, or a prefix of
        one (the right edge of a tree), from the stored complete subtrees."""
        if size & (size - 1) == 0 and start % size == 0:
            return self._node(size.bit_length() - 1, start // size)
        k = _largest_power_of_two_below(size)
        return node_hash(self._range(start, k), self._range(start + k, size - k))

    def root(self, size: int | None = None) -> bytes:
        """The root hash of the first `size` leaves (all of them when None)."""
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ValueError(f"tree size {n}: the tree has {self.size} leaves")
        return EMPTY_ROOT if n == 0 else self._range(0, n)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[size]) of RFC 9162 2.1.3.1: the audit path of leaf `index` in the
        tree of the first `size` leaves, leaf side first."""
        n = self.size if size is None else size
        if not 0 <= n <= self.size:
            raise ValueError(f"tree size {n}: the tree has {self.size} leaves")
        if not 0 <= index < n:
            raise ValueError(f"leaf {index} is not in a tree of size {n}")
        path: list[bytes] = []
        start = 0
        m = index
        # Walk down from the root, collecting the sibling of each step, then reverse.
        while n > 1:
            k = _largest_power_of_two_below(n)
            if m < k:
                path.append(self._range(start + k, n - k))
                n = k
            else:
                path.append(self._range(start, k))
                start += k
                m -= k
                n -= k
        path.reverse()
        return path

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """PROOF(old_size, D[new_size]) of RFC 9162 2.1.4.1."""
        n = self.size if new_size is None else new_size
        if not 0 <= n <= self.size:
            raise ValueError(f"tree size {n}: the tree has {self.size} leaves")
        if not 0 <= old_size <= n:
            raise ValueError(f"old size {old_size} is not within 0..{n}")
        if old_size == 0 or old_size == n:
            return []
        proof: list[bytes] = []
        start, m, whole = 0, old_size, True
        while m != n:
            k = _largest_power_of_two_below(n)
            if m <= k:
                proof.append(self._range(start + k, n - k))
                n = k
            else:
                proof.append(self._range(start, k))
                start += k
                m -= k
                n -= k
                whole = False
        if not whole:
            proof.append(self._range(start, m))
        proof.reverse()
        return proof


def root_of(records: Iterable[bytes]) -> bytes:
    """The root hash of a tree over these records' bytes, in order."""
    return MerkleTree(leaf_hash(r) for r in records).root()


def _check_hashes(proof: Sequence[bytes]) -> None:
    for h in proof:
        if not isinstance(h, bytes | bytearray) or len(h) != HASH_SIZE:
            raise ProofError(f"a proof holds {HASH_SIZE}-byte hashes")


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that `proof` (an audit path of leaf `index` in a tree of `size`) leads to
    from the leaf hash `leaf` (RFC 9162 2.1.3.2)."""
    if not 0 <= index < size:
        raise ProofError(f"leaf {index} is not in a tree of size {size}")
    _check_hashes(proof)
    fn, sn = index, size - 1
    r = bytes(leaf)
    for p in proof:
        if sn == 0:
            raise ProofError("the inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(bytes(p), r)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, bytes(p))
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise `ProofError` unless `proof` shows leaf hash `leaf` at `index` in the tree of
    `size` leaves whose root is `root`."""
    if root_from_inclusion(index, size, leaf, proof) != root:
        raise ProofError(f"leaf {index} is not in the tree of size {size} with that root")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Raise `ProofError` unless `proof` shows the tree of `old_size` leaves (root
    `old_root`) is a prefix of the tree of `new_size` leaves (root `new_root`), as RFC 9162
    2.1.4.2 verifies it."""
    if not 0 <= old_size <= new_size:
        raise ProofError(f"old size {old_size} is not within 0..{new_size}")
    _check_hashes(proof)
    if old_size == new_size:
        if proof:
            raise ProofError("a proof between equal sizes is empty")
        if old_root != new_root:
            raise ProofError(f"two different roots for the tree of size {old_size}")
        return
    if old_size == 0:
        if proof:
            raise ProofError("a proof from the empty tree is empty")
        return
    if not proof:
        raise ProofError("an empty consistency proof between different sizes")
    path = [bytes(p) for p in proof]
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is the first node
        path.insert(0, bytes(old_root))
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("the consistency proof is longer than needed")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("the consistency proof is shorter than needed")
    if fr != old_root:
        raise ProofError(f"the proof does not lead to the root of the tree of size {old_size}")
    if sr != new_root:
        raise ProofError(f"the proof does not lead to the root of the tree of size {new_size}")
