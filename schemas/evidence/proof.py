"""Inclusion and consistency proofs as JSON, and the errors of a log's evidence.

An inclusion proof names the signed checkpoint it is against (the note's whole text), the
leaf index (the record's seq), the leaf's bytes (the record exactly as the log stores it)
and the audit path (RFC 9162 2.1.3, leaf side first); a consistency proof names the newer
checkpoint, the older tree's size and root (and its signed checkpoint when the log holds
one at that size) and the proof (RFC 9162 2.1.4). Bytes are standard base64.

```
{"kind": "inclusion", "checkpoint": NOTE, "tree_size": N, "leaf_index": I,
 "leaf": B64, "leaf_hash": B64, "audit_path": [B64, ...]}
{"kind": "consistency", "checkpoint": NOTE, "tree_size": N, "old_size": M,
 "old_root": B64, "old_checkpoint": NOTE | null, "proof": [B64, ...]}
```

`tree_size` and `leaf_hash` are conveniences: a verifier takes the size from the signed
checkpoint and hashes the leaf itself. Pure; proofs come from the network, so parsing is
bounded and strict.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.errors import MemstreamError
from schemas.evidence.merkle import (
    HASH_SIZE,
    ProofError,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from schemas.evidence.note import MAX_NOTE_BYTES, Checkpoint, NoteVerifier
from schemas.limits import MAX_RECORD_BYTES

__all__ = [
    "EvidenceError",
    "NoCheckpointError",
    "ProofRangeError",
    "EvidenceMismatchError",
    "MalformedProofError",
    "InclusionProof",
    "ConsistencyProof",
    "MAX_PATH",
]

# A tree of 2**63 leaves has a path of 63 hashes; nothing longer is a proof.
MAX_PATH = 64


class EvidenceError(MemstreamError):
    """The root of the errors about a log's tree, checkpoints and proofs."""


class NoCheckpointError(EvidenceError):
    """A proof was asked of a log (or a size) that no signed checkpoint covers yet."""


class ProofRangeError(EvidenceError, ValueError):
    """A proof was asked for a seq or sizes outside the log: the message names them."""


class EvidenceMismatchError(EvidenceError):
    """The log's records and a signed checkpoint disagree: the log was altered."""


class MalformedProofError(EvidenceError, ValueError):
    """Proof JSON that is not a proof: the message names the field."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _field(data: Mapping[str, Any], name: str, kind: type) -> Any:
    value = data.get(name)
    if type(value) is not kind:
        raise MalformedProofError(f"proof field {name!r}: expected a {kind.__name__}")
    return value


def _size(data: Mapping[str, Any], name: str) -> int:
    value = _field(data, name, int)
    if value < 0:
        raise MalformedProofError(f"proof field {name!r}: not negative")
    return int(value)


def _bytes(data: Mapping[str, Any], name: str, limit: int) -> bytes:
    text = _field(data, name, str)
    if len(text) > (limit + 2) // 3 * 4:
        raise MalformedProofError(f"proof field {name!r}: over {limit} bytes")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise MalformedProofError(f"proof field {name!r}: not base64") from None


def _note(data: Mapping[str, Any], name: str) -> str:
    text = _field(data, name, str)
    if len(text) > MAX_NOTE_BYTES:
        raise MalformedProofError(f"proof field {name!r}: a note is at most {MAX_NOTE_BYTES}")
    return str(text)


def _path(data: Mapping[str, Any], name: str) -> tuple[bytes, ...]:
    items = _field(data, name, list)
    if len(items) > MAX_PATH:
        raise MalformedProofError(f"proof field {name!r}: at most {MAX_PATH} hashes")
    path = []
    for index, item in enumerate(items):
        if type(item) is not str:
            raise MalformedProofError(f"proof field {name!r}[{index}]: expected base64 text")
        digest = _bytes({"h": item}, "h", HASH_SIZE)
        if len(digest) != HASH_SIZE:
            raise MalformedProofError(f"proof field {name!r}[{index}]: not {HASH_SIZE} bytes")
        path.append(digest)
    return tuple(path)


def _kind(data: Any, kind: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise MalformedProofError("a proof is a JSON object")
    if data.get("kind") != kind:
        raise MalformedProofError(f"proof field 'kind': expected {kind!r}")
    return data


@dataclass(frozen=True)
class InclusionProof:
    """Record `leaf` is leaf `leaf_index` of the tree a signed checkpoint names."""

    checkpoint: str  # the signed note
    leaf_index: int
    leaf: bytes
    audit_path: tuple[bytes, ...]

    @property
    def tree_size(self) -> int:
        return Checkpoint.parse(self.checkpoint.split("\n\n", 1)[0] + "\n").size

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "inclusion",
            "checkpoint": self.checkpoint,
            "tree_size": self.tree_size,
            "leaf_index": self.leaf_index,
            "leaf": _b64(self.leaf),
            "leaf_hash": _b64(leaf_hash(self.leaf)),
            "audit_path": [_b64(h) for h in self.audit_path],
        }

    @classmethod
    def from_json(cls, data: Any) -> InclusionProof:
        data = _kind(data, "inclusion")
        return cls(
            _note(data, "checkpoint"),
            _size(data, "leaf_index"),
            _bytes(data, "leaf", MAX_RECORD_BYTES),
            _path(data, "audit_path"),
        )

    def verify(self, verifier: NoteVerifier, *, origin: str | None = None) -> Checkpoint:
        """The checkpoint, once its signature checks and the path leads from the leaf to
        its root; `NoteError` or `EvidenceMismatchError` otherwise."""
        checkpoint = Checkpoint.open(self.checkpoint, verifier, origin=origin)
        try:
            verify_inclusion(
                self.leaf_index,
                checkpoint.size,
                leaf_hash(self.leaf),
                self.audit_path,
                checkpoint.root,
            )
        except ProofError as exc:
            raise EvidenceMismatchError(
                f"inclusion proof of seq {self.leaf_index}: {exc}"
            ) from None
        return checkpoint


@dataclass(frozen=True)
class ConsistencyProof:
    """The tree of `old_size` leaves (root `old_root`) is a prefix of the checkpoint's."""

    checkpoint: str  # the signed note of the newer tree
    old_size: int
    old_root: bytes
    old_checkpoint: str | None  # the log's signed note at old_size, when it holds one
    proof: tuple[bytes, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "consistency",
            "checkpoint": self.checkpoint,
            "tree_size": Checkpoint.parse(self.checkpoint.split("\n\n", 1)[0] + "\n").size,
            "old_size": self.old_size,
            "old_root": _b64(self.old_root),
            "old_checkpoint": self.old_checkpoint,
            "proof": [_b64(h) for h in self.proof],
        }

    @classmethod
    def from_json(cls, data: Any) -> ConsistencyProof:
        data = _kind(data, "consistency")
        old_root = _bytes(data, "old_root", HASH_SIZE)
        if len(old_root) != HASH_SIZE:
            raise MalformedProofError(f"proof field 'old_root': not {HASH_SIZE} bytes")
        old_note = data.get("old_checkpoint")
        return cls(
            _note(data, "checkpoint"),
            _size(data, "old_size"),
            old_root,
            None if old_note is None else _note(data, "old_checkpoint"),
            _path(data, "proof"),
        )

    def verify(
        self,
        verifier: NoteVerifier,
        *,
        origin: str | None = None,
        old_root: bytes | None = None,
    ) -> Checkpoint:
        """The newer checkpoint, once its signature checks and the proof shows the old
        tree is its prefix. The old root checked is `old_root` when given (the one the
        caller holds), else the signed old checkpoint's when there is one, else the proof's."""
        checkpoint = Checkpoint.open(self.checkpoint, verifier, origin=origin)
        root = self.old_root
        if self.old_checkpoint is not None:
            old = Checkpoint.open(self.old_checkpoint, verifier, origin=origin)
            if old.size != self.old_size or old.root != self.old_root:
                raise EvidenceMismatchError(
                    f"consistency proof: the old checkpoint is of size {old.size}, "
                    f"not {self.old_size}, or of another root"
                )
        if old_root is not None:
            root = old_root
        try:
            verify_consistency(self.old_size, checkpoint.size, root, checkpoint.root, self.proof)
        except ProofError as exc:
            raise EvidenceMismatchError(
                f"consistency proof {self.old_size} -> {checkpoint.size}: {exc}"
            ) from None
        return checkpoint
