"""The sealed form of a content field: envelope encryption, a data key per event.

A content field (a message's `content`, a document's `text`) of an encrypted log is
stored as the text ``msenc1:<key id>:<wrapped data key>:<sealed content>``:

- ``key id``: 32 hex digits naming the key that wraps the data key (a data subject's key,
  held by the key store; `producers.keys`), never the subject itself;
- ``wrapped data key``: base64url (no padding) of a 12-byte nonce and AES-256-GCM of the
  event's own 32-byte data key under the subject key;
- ``sealed content``: base64url of a 12-byte nonce and AES-256-GCM of the UTF-8 content
  under the data key.

Both are bound (associated data) to the event's id and the field's name, so a sealed value
moved to another event or field does not open. Destroying the subject key makes every data
key it wrapped, and so the content, unrecoverable, while the stored bytes (the Merkle
leaves) stay exactly as they were.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from typing import NamedTuple
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from schemas.errors import MemstreamError

__all__ = [
    "PREFIX",
    "KEY_BYTES",
    "SealedError",
    "Sealed",
    "new_key",
    "new_key_id",
    "is_sealed",
    "parse",
    "seal",
    "seal_convergent",
    "open_sealed",
]

PREFIX = "msenc1:"
KEY_BYTES = 32
_NONCE = 12
_TAG = 16
_KEY_ID_HEX = 32
_CONVERGENT = b"msenc1 convergent\x00"
_FIXED_NONCE = bytes(_NONCE)
# A sealed value is read only up to this size (a record is at most 16 MiB anyway).
_MAX_SEALED = 24 * 1024 * 1024


class SealedError(MemstreamError, ValueError):
    """A sealed value that is malformed, or that does not open with the key given."""


class Sealed(NamedTuple):
    key_id: str
    wrapped_key: bytes
    ciphertext: bytes


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_key_id() -> str:
    return secrets.token_hex(_KEY_ID_HEX // 2)


def is_sealed(value: str) -> bool:
    return value.startswith(PREFIX)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SealedError(f"sealed value: {what} is not base64url") from None


def _aad(event_id: UUID, field: str) -> bytes:
    return event_id.bytes + field.encode()


def seal(plaintext: str, *, event_id: UUID, field: str, key_id: str, key: bytes) -> str:
    """`plaintext` sealed under a fresh data key, itself wrapped by `key` (named `key_id`)."""
    if len(key) != KEY_BYTES:
        raise SealedError(f"subject key: expected {KEY_BYTES} bytes, got {len(key)}")
    aad = _aad(event_id, field)
    # One read of the OS's random source for the data key and both nonces.
    fresh = secrets.token_bytes(KEY_BYTES + 2 * _NONCE)
    data_key, wrap_nonce, nonce = fresh[:KEY_BYTES], fresh[KEY_BYTES:-_NONCE], fresh[-_NONCE:]
    wrapped = wrap_nonce + AESGCM(key).encrypt(wrap_nonce, data_key, aad)
    sealed = nonce + AESGCM(data_key).encrypt(nonce, plaintext.encode(), aad)
    return f"{PREFIX}{key_id}:{_b64(wrapped)}:{_b64(sealed)}"


def seal_convergent(plaintext: str, *, event_id: UUID, field: str, key_id: str, key: bytes) -> str:
    """`plaintext` sealed as `seal` seals it, in the same format (`open_sealed` opens it),
    but deterministically: the data key and the wrapping nonce are one HMAC-SHA512 of the
    binding and the plaintext under `key`, so the same plaintext of the same field of the
    same event under the same key always seals to the same text.

    Why: a fold that holds no key (the projector) compares sealed values where a reader
    compares plaintexts (a graph import skips items identical to existing ones); equal
    sealed values then mean equal plaintexts, and both decide alike. What it reveals: only
    whether two values of one field of one item, under one key, are equal. Nonces are
    never reused with different data (as in SIV): a data key seals one plaintext only, so
    its nonce is fixed; the wrapping nonce differs with the plaintext."""
    if len(key) != KEY_BYTES:
        raise SealedError(f"subject key: expected {KEY_BYTES} bytes, got {len(key)}")
    aad = _aad(event_id, field)
    data = plaintext.encode()
    derived = hmac.digest(key, _CONVERGENT + len(aad).to_bytes(4, "big") + aad + data, "sha512")
    data_key, wrap_nonce = derived[:KEY_BYTES], derived[KEY_BYTES : KEY_BYTES + _NONCE]
    wrapped = wrap_nonce + AESGCM(key).encrypt(wrap_nonce, data_key, aad)
    sealed = _FIXED_NONCE + AESGCM(data_key).encrypt(_FIXED_NONCE, data, aad)
    return f"{PREFIX}{key_id}:{_b64(wrapped)}:{_b64(sealed)}"


def parse(value: str) -> Sealed:
    """The parts of a sealed value; SealedError naming what is wrong."""
    if len(value) > _MAX_SEALED:
        raise SealedError(f"sealed value of {len(value)} characters; at most {_MAX_SEALED}")
    if not value.startswith(PREFIX):
        raise SealedError(f"not a sealed value (expected the prefix {PREFIX!r})")
    parts = value[len(PREFIX) :].split(":")
    if len(parts) != 3:
        raise SealedError(f"sealed value: expected 3 parts after {PREFIX!r}, got {len(parts)}")
    key_id, wrapped_text, sealed_text = parts
    if len(key_id) != _KEY_ID_HEX or any(c not in "0123456789abcdef" for c in key_id):
        raise SealedError(f"sealed value: key id {key_id[:40]!r} is not {_KEY_ID_HEX} hex digits")
    wrapped = _unb64(wrapped_text, "the wrapped data key")
    if len(wrapped) != _NONCE + KEY_BYTES + _TAG:
        raise SealedError(f"sealed value: wrapped data key of {len(wrapped)} bytes")
    ciphertext = _unb64(sealed_text, "the sealed content")
    if len(ciphertext) < _NONCE + _TAG:
        raise SealedError(f"sealed value: sealed content of {len(ciphertext)} bytes")
    return Sealed(key_id, wrapped, ciphertext)


def open_sealed(sealed: Sealed, *, event_id: UUID, field: str, key: bytes) -> str:
    """The plaintext, given the subject key `sealed.key_id` names; SealedError when it does
    not open (another key, another event or field, changed bytes)."""
    aad = _aad(event_id, field)
    try:
        data_key = AESGCM(key).decrypt(
            sealed.wrapped_key[:_NONCE], sealed.wrapped_key[_NONCE:], aad
        )
        plain = AESGCM(data_key).decrypt(
            sealed.ciphertext[:_NONCE], sealed.ciphertext[_NONCE:], aad
        )
        return plain.decode()
    except (InvalidTag, ValueError):
        raise SealedError(
            f"sealed {field} of event {event_id} does not open with key {sealed.key_id}"
        ) from None
