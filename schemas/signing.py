"""Signed records: the bytes an agent's signature wraps around a record (provable authorship).

On a log that requires signatures every record is stored as

    ``C3 02`` | name length (1 byte) | signer name (UTF-8) | key id (4 bytes) |
    Ed25519 signature (64 bytes) | the record's own bytes (Avro or a JSON envelope)

``C3 02`` tells it from the Avro single-object marker ``C3 01`` and from JSON (``{``).
The signature is a C2SP signed-note signature (the format of the log's checkpoint keys,
`schemas.evidence.note`, and of Go's ``golang.org/x/mod/sumdb/note``) over the text

    memstream/record/v1
    <log id>
    <base64 of SHA-256 of the record's own bytes>

so the signed note ``TEXT + "\\n" + "— NAME " + base64(key id || signature) + "\\n"``
opens with any signed-note verifier holding the signer's verifier key. The log id (the id
of the log's first record, which made it signed) binds a signature to one log: a record
copied into another log does not verify there. What is signed is every byte of the record
(its id, kind, actor and content alike); the Merkle tree of the log covers the whole
stored bytes, signature included.

Pure: bytes in, bytes out; the policy (who may sign what, at which seq) is the fold's
(`projector.authorship`).
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

from schemas.errors import DecodeError
from schemas.evidence.note import NoteSigner

__all__ = [
    "SIGNED_MAGIC",
    "RECORD_CONTEXT",
    "SignedRecord",
    "is_signed",
    "signed_text",
    "sign_record",
    "split_signed",
]

SIGNED_MAGIC = b"\xc3\x02"
RECORD_CONTEXT = "memstream/record/v1"
_KEY_ID = 4
_SIGNATURE = 64


@dataclass(frozen=True, slots=True)
class SignedRecord:
    """A signed record taken apart: who says they signed it, with which key, and what."""

    signer: str
    key_id: bytes
    signature: bytes
    inner: bytes


def is_signed(data: bytes) -> bool:
    return data[:2] == SIGNED_MAGIC


def signed_text(log_id: str, inner: bytes) -> bytes:
    """The note text a record's signature covers (UTF-8)."""
    digest = base64.b64encode(hashlib.sha256(inner).digest()).decode()
    return f"{RECORD_CONTEXT}\n{log_id}\n{digest}\n".encode()


def sign_record(signer: NoteSigner, log_id: str, inner: bytes) -> bytes:
    """`inner` (a record's bytes) signed by `signer` for the log `log_id`."""
    name = signer.name.encode()
    if len(name) > 255:
        raise ValueError(f"signer name {signer.name[:40]!r}...: at most 255 bytes")
    signature = signer.sign(signed_text(log_id, inner))
    return b"".join(
        (SIGNED_MAGIC, bytes((len(name),)), name, signer.verifier.key_id, signature, inner)
    )


def split_signed(data: bytes) -> SignedRecord:
    """The parts of a signed record; `DecodeError` naming what is malformed."""
    if not is_signed(data):
        raise DecodeError("not a signed record (no C3 02 marker)")
    if len(data) < 3:
        raise DecodeError("a signed record truncated before its signer's name")
    n = data[2]
    end = 3 + n
    if len(data) < end + _KEY_ID + _SIGNATURE + 1:
        raise DecodeError("a signed record truncated within its signature")
    try:
        signer = data[3:end].decode()
    except UnicodeDecodeError:
        raise DecodeError("a signed record's signer name is not UTF-8") from None
    if not signer or any(c.isspace() or c == "+" for c in signer):
        raise DecodeError(f"a signed record's signer name {signer[:80]!r} is not a key name")
    key_id = bytes(data[end : end + _KEY_ID])
    signature = bytes(data[end + _KEY_ID : end + _KEY_ID + _SIGNATURE])
    return SignedRecord(signer, key_id, signature, bytes(data[end + _KEY_ID + _SIGNATURE :]))
