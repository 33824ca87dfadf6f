"""Signed checkpoints: C2SP ``tlog-checkpoint`` bodies in C2SP ``signed-note``s (Ed25519).

A checkpoint's text is ``ORIGIN\\nSIZE\\nBASE64(ROOT)\\n``: the log's origin line (its name),
the tree size in decimal, and the root hash in standard base64. A signed note is that text,
a blank line, and one line per signature: ``— NAME BASE64(KEY_ID || SIGNATURE)``, where the
signature is Ed25519 over the text (final newline included) and ``KEY_ID`` is the first 4
bytes of ``SHA-256(NAME || 0x0A || 0x01 || PUBLIC_KEY)``. A verifier is given the log's
public key as a note verifier key, ``NAME+HEX(KEY_ID)+BASE64(0x01 || PUBLIC_KEY)``; that
string is all a third party needs (Go's ``golang.org/x/mod/sumdb/note`` reads it).

Pure: keys are passed in as objects or bytes; reading key files is the adapters' business.
Notes come from the network and from storage, so parsing is bounded and strict.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from schemas.errors import MemstreamError
from schemas.evidence.merkle import HASH_SIZE

__all__ = [
    "NoteError",
    "Checkpoint",
    "CheckpointSigner",
    "NoteSigner",
    "NoteVerifier",
    "key_id",
    "sign_note",
    "open_note",
    "MAX_NOTE_BYTES",
]

MAX_NOTE_BYTES = 64 * 1024
_MAX_SIGNATURES = 100
_ALG_ED25519 = b"\x01"
_SIG_PREFIX = "\u2014 "  # an em dash and a space
_PRIVATE_PREFIX = "PRIVATE+KEY+"


class NoteError(MemstreamError, ValueError):
    """A note or checkpoint that is malformed, or not signed by the expected key."""


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise NoteError(f"key name {name!r}: non-empty, no spaces and no '+'")


def _raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(name: str, public_key: bytes) -> bytes:
    """The 4-byte id of an Ed25519 key under `name`, as C2SP signed-note computes it."""
    return hashlib.sha256(name.encode() + b"\n" + _ALG_ED25519 + public_key).digest()[:4]


@dataclass(frozen=True)
class NoteVerifier:
    """A public key under a name: what a third party needs to check a log's notes."""

    name: str
    public_key: bytes  # 32 raw bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if len(self.public_key) != 32:
            raise NoteError(f"an Ed25519 public key is 32 bytes, got {len(self.public_key)}")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public_key)

    def text(self) -> str:
        """The verifier key: ``NAME+HEX(KEY_ID)+BASE64(0x01 || KEY)``."""
        encoded = base64.b64encode(_ALG_ED25519 + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> NoteVerifier:
        """A verifier from its text; `NoteError` naming what is wrong."""
        parts = text.strip().split("+", 2)  # base64 may hold "+"; a name and an id never do
        if len(parts) != 3:
            raise NoteError("a verifier key reads NAME+KEYID+BASE64KEY")
        name, hex_id, encoded = parts
        try:
            raw = base64.b64decode(encoded, validate=True)
            wanted = bytes.fromhex(hex_id)
        except (binascii.Error, ValueError):
            raise NoteError("a verifier key's id is hex and its key base64") from None
        if len(raw) != 33 or raw[:1] != _ALG_ED25519:
            raise NoteError("only Ed25519 verifier keys (type 0x01, 32 bytes) are supported")
        verifier = cls(name, raw[1:])
        if verifier.key_id != wanted:
            raise NoteError(f"verifier key {name}: the key id does not match the key")
        return verifier

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class NoteSigner:
    """A private key under a name; signs notes."""

    name: str
    private_key: Ed25519PrivateKey

    def __post_init__(self) -> None:
        _check_name(self.name)

    @classmethod
    def generate(cls, name: str) -> NoteSigner:
        return cls(name, Ed25519PrivateKey.generate())

    @property
    def verifier(self) -> NoteVerifier:
        return NoteVerifier(self.name, _raw_public(self.private_key.public_key()))

    def text(self) -> str:
        """The signer key as Go's ``golang.org/x/mod/sumdb/note`` writes one:
        ``PRIVATE+KEY+NAME+HEX(KEY_ID)+BASE64(0x01 || SEED)``. A secret: keep it so."""
        seed = self.private_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        encoded = base64.b64encode(_ALG_ED25519 + seed).decode()
        return f"{_PRIVATE_PREFIX}{self.name}+{self.verifier.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> NoteSigner:
        """A signer from its key text (`text`); `NoteError` naming what is wrong, never
        quoting the key."""
        text = text.strip()
        if not text.startswith(_PRIVATE_PREFIX):
            raise NoteError("a signer key reads PRIVATE+KEY+NAME+KEYID+BASE64KEY")
        parts = text[len(_PRIVATE_PREFIX) :].split("+", 2)
        if len(parts) != 3:
            raise NoteError("a signer key reads PRIVATE+KEY+NAME+KEYID+BASE64KEY")
        name, hex_id, encoded = parts
        try:
            raw = base64.b64decode(encoded, validate=True)
            wanted = bytes.fromhex(hex_id)
        except (binascii.Error, ValueError):
            raise NoteError("a signer key's id is hex and its key base64") from None
        if len(raw) != 33 or raw[:1] != _ALG_ED25519:
            raise NoteError("only Ed25519 signer keys (type 0x01, 32 bytes) are supported")
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
        if signer.verifier.key_id != wanted:
            raise NoteError(f"signer key {name}: the key id does not match the key")
        return signer

    def sign(self, message: bytes) -> bytes:
        return self.private_key.sign(message)


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("a note's text ends with a newline")
    if "\n\n" in text:
        raise NoteError("a note's text holds no blank line")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("a note's text holds no control characters")


def sign_note(text: str, signer: NoteSigner) -> str:
    """`text` as a signed note, signed by `signer`."""
    _check_text(text)
    signature = signer.sign(text.encode())
    line = base64.b64encode(signer.verifier.key_id + signature).decode()
    note = f"{text}\n{_SIG_PREFIX}{signer.name} {line}\n"
    if len(note.encode()) > MAX_NOTE_BYTES:
        raise NoteError(f"a note is at most {MAX_NOTE_BYTES} bytes")
    return note


def open_note(note: str | bytes, verifier: NoteVerifier) -> str:
    """The text of `note` once `verifier`'s signature on it checks; `NoteError` otherwise
    (malformed, unsigned by that key, or a bad signature)."""
    raw = note.encode() if isinstance(note, str) else bytes(note)
    if len(raw) > MAX_NOTE_BYTES:
        raise NoteError(f"a note is at most {MAX_NOTE_BYTES} bytes")
    try:
        whole = raw.decode()
    except UnicodeDecodeError:
        raise NoteError("a note is UTF-8 text") from None
    split = whole.rfind("\n\n")
    if split < 0:
        raise NoteError("a note is text, a blank line, then signature lines")
    text, signatures = whole[: split + 1], whole[split + 2 :]
    _check_text(text)
    if not signatures.endswith("\n"):
        raise NoteError("a note ends with a newline")
    lines = signatures[:-1].split("\n")
    if len(lines) > _MAX_SIGNATURES:
        raise NoteError(f"a note carries at most {_MAX_SIGNATURES} signatures")
    for line in lines:
        if not line.startswith(_SIG_PREFIX):
            raise NoteError(f"malformed signature line {line[:80]!r}")
        name, _, encoded = line[len(_SIG_PREFIX) :].partition(" ")
        try:
            blob = base64.b64decode(encoded, validate=True)
        except binascii.Error:
            raise NoteError(f"signature of {name!r}: not base64") from None
        if len(blob) < 5:
            raise NoteError(f"signature of {name!r}: too short")
        if name != verifier.name or blob[:4] != verifier.key_id:
            continue  # another signer's: not ours to judge
        if not verifier.verify(text.encode(), blob[4:]):
            raise NoteError(f"the signature of {name!r} does not verify")
        return text
    raise NoteError(f"the note is not signed by {verifier.name!r}")


class CheckpointSigner:
    """Signs checkpoints of one origin with one key, fast: what a log does at each commit.

    `sign(size, root)` gives exactly ``Checkpoint(origin, size, root).sign(signer)``
    (Ed25519 signatures are deterministic), with the checks and the key's id done once.
    """

    __slots__ = ("_origin", "_sign", "_line", "_key_id")

    def __init__(self, origin: str, signer: NoteSigner) -> None:
        Checkpoint(origin, 0, bytes(HASH_SIZE))  # checks the origin once
        self._origin = origin
        self._sign = signer.private_key.sign
        self._key_id = signer.verifier.key_id
        self._line = f"\n{_SIG_PREFIX}{signer.name} "

    def sign(self, size: int, root: bytes) -> str:
        if size < 0 or len(root) != HASH_SIZE:
            raise NoteError(f"checkpoint of size {size}: a size >= 0 and a {HASH_SIZE}-byte root")
        text = f"{self._origin}\n{size}\n{base64.b64encode(root).decode()}\n"
        signature = self._sign(text.encode())
        return f"{text}{self._line}{base64.b64encode(self._key_id + signature).decode()}\n"


@dataclass(frozen=True)
class Checkpoint:
    """A log's state as a checkpoint: origin (its name), tree size and root hash."""

    origin: str
    size: int
    root: bytes

    def __post_init__(self) -> None:
        if not self.origin or any(ord(c) < 0x20 for c in self.origin):
            raise NoteError(f"checkpoint origin {self.origin!r}: one line of text")
        if self.size < 0:
            raise NoteError(f"checkpoint size {self.size}: not negative")
        if len(self.root) != HASH_SIZE:
            raise NoteError(f"checkpoint root: {HASH_SIZE} bytes, got {len(self.root)}")

    def text(self) -> str:
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n"

    def sign(self, signer: NoteSigner) -> str:
        return sign_note(self.text(), signer)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """A checkpoint from its text (extension lines after the root are allowed)."""
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise NoteError("a checkpoint is origin, size and root hash lines")
        origin, size, root = lines[0], lines[1], lines[2]
        if not size.isdigit() or (size != "0" and size.startswith("0")):
            raise NoteError(f"checkpoint size {size[:40]!r}: a decimal number")
        try:
            digest = base64.b64decode(root, validate=True)
        except binascii.Error:
            raise NoteError("checkpoint root: not base64") from None
        return cls(origin, int(size), digest)

    @classmethod
    def open(
        cls, note: str | bytes, verifier: NoteVerifier, *, origin: str | None = None
    ) -> Checkpoint:
        """The checkpoint a signed note holds, once its signature checks. Its origin must
        be `origin` (the log it is about); without one, the key's name (the convention of
        a key per log)."""
        checkpoint = cls.parse(open_note(note, verifier))
        expected = verifier.name if origin is None else origin
        if checkpoint.origin != expected:
            raise NoteError(f"checkpoint of {checkpoint.origin!r}, expected one of {expected!r}")
        return checkpoint
