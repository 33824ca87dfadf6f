"""The sealed forms of content, each bound to where it belongs.

A content field (a message's `content`, a document's `text`) of an encrypted log is
stored as the text ``msenc2:<key id>:<sealed content>`` (`seal`):

- ``key id``: 32 hex digits naming the key it is sealed under (a data subject's key, held
  by the key store; `producers.keys`), never the subject itself;
- ``sealed content``: base64url (no padding) of a random 12-byte nonce and AES-256-GCM of
  the UTF-8 content under the subject key, bound (associated data) to the event's id and
  the field's name.

A graph item's content value is ``msenc3:<key id>:<sealed value>`` (`seal_convergent`):
base64url of AES-256-GCM-SIV (RFC 8452) of the value under the subject key, its
associated data the value's binding (its item and content key;
`schemas.crypto.graph_content.content_binding`), its nonce a hash of that binding: the
same value of the same item's field under the same key always seals to the same text.

Logs written before 7 December hold graph values, and logs written before 4 December
event content too, as ``msenc1:<key id>:<wrapped data key>:<sealed content>``
(`seal_wrapped`): the content under a data key of its own, derived from the content and
wrapped (nonce and AES-256-GCM) by the subject key, bound to an event id and a field.
All three forms open here (`parse`, then `open_sealed` or `open_convergent`).

The associated data of the forms differ (``msenc2`` and ``msenc3`` start with their
names), so a part of one form never opens as another. Destroying the subject key makes
the content unrecoverable, while the stored bytes (the Merkle leaves) stay exactly as
they were.

Why a direct seal for events: a data key per event made every encrypted append wrap a
key (a second AES-GCM, a second base64 part) for nothing a reader needs: erasure destroys
the subject key either way, and stored records are never re-wrapped. Random 96-bit nonces
keep AES-GCM safe for up to 2**32 seals under one key (NIST SP 800-38D), far more events
than one subject (a session, an event) holds.

Why GCM-SIV for graph values: a fold that holds no key (the projector) compares sealed
values where a reader compares plaintexts (a graph import skips items identical to
existing ones), so equal plaintexts of one item's field must seal alike. The wrapped form
did that with an HMAC, a data key and two AES-GCM operations per value; GCM-SIV is made
for it (a repeated nonce reveals only that the same plaintext and associated data were
sealed again) in one. Its nonce, a hash of the binding, repeats only for values of the
same field of the same item.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import time
from typing import NamedTuple
from uuid import UUID

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESGCMSIV

from schemas.errors import MemstreamError

__all__ = [
    "PREFIX",
    "CONVERGENT_PREFIX",
    "WRAPPED_PREFIX",
    "KEY_BYTES",
    "KEY_ID_HEX",
    "KEY_ID_RANDOM",
    "SealedError",
    "Sealed",
    "new_key",
    "new_key_id",
    "aead",
    "aead_siv",
    "is_sealed",
    "parse",
    "seal",
    "seal_convergent",
    "seal_wrapped",
    "open_sealed",
    "open_convergent",
]

PREFIX = "msenc2:"  # what `seal` writes
CONVERGENT_PREFIX = "msenc3:"  # what `seal_convergent` writes
WRAPPED_PREFIX = "msenc1:"  # what `seal_wrapped` writes (`seal_convergent` did before)
_PREFIXES = (PREFIX, CONVERGENT_PREFIX, WRAPPED_PREFIX)
_DIRECT_AAD = b"msenc2\x00"
_CONVERGENT_AAD = b"msenc3\x00"
KEY_BYTES = 32
_NONCE = 12
_TAG = 16
KEY_ID_HEX = 32  # the length of a key id
KEY_ID_RANDOM = 10  # the random bytes of a key id (its last 20 hex digits)
_CONVERGENT = b"msenc1 convergent\x00"
_FIXED_NONCE = bytes(_NONCE)
# A sealed value is read only up to this size (a record is at most 16 MiB anyway).
_MAX_SEALED = 24 * 1024 * 1024


class SealedError(MemstreamError, ValueError):
    """A sealed value that is malformed, or that does not open with the key given."""


class Sealed(NamedTuple):
    """A parsed sealed value: `form` is its prefix; `wrapped_key` is empty but in the
    wrapped form (``msenc1``)."""

    key_id: str
    wrapped_key: bytes
    ciphertext: bytes
    form: str = PREFIX


def new_key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


def new_key_id() -> str:
    """A key id: the time in milliseconds (12 hex digits), then 20 random hex digits. Ids
    made one after another sort together, so keys made in one batch land on neighbouring
    pages of the embedded key table (`producers.keys.held_keys`)."""
    return f"{time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF:012x}{secrets.token_hex(KEY_ID_RANDOM)}"


def aead(key: bytes) -> AESGCM:
    """The AES-256-GCM context of a subject key: a key store keeps one per key it holds,
    so an append seals without setting the key up again (`seal`'s `context`)."""
    if len(key) != KEY_BYTES:
        raise SealedError(f"subject key: expected {KEY_BYTES} bytes, got {len(key)}")
    return AESGCM(key)


def aead_siv(key: bytes) -> AESGCMSIV:
    """The AES-256-GCM-SIV context of a subject key (`seal_convergent`'s `context`)."""
    if len(key) != KEY_BYTES:
        raise SealedError(f"subject key: expected {KEY_BYTES} bytes, got {len(key)}")
    return AESGCMSIV(key)


def is_sealed(value: str) -> bool:
    return value.startswith(_PREFIXES)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def _b64(data: bytes) -> str:
    # base64.urlsafe_b64encode's steps without its two Python-level calls: this runs for
    # every sealed value an append writes.
    return binascii.b2a_base64(data, newline=False).translate(_URLSAFE).rstrip(b"=").decode()


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SealedError(f"sealed value: {what} is not base64url") from None


def _aad(event_id: UUID, field: str) -> bytes:
    return event_id.bytes + field.encode()


def seal(
    plaintext: str,
    *,
    event_id: UUID,
    field: str,
    key_id: str,
    key: bytes,
    context: AESGCM | None = None,
) -> str:
    """`plaintext` sealed under `key` (named `key_id`; `context`: its `aead`, when the
    caller holds one), in the direct form."""
    nonce = os.urandom(_NONCE)  # what secrets.token_bytes reads, without its wrapper
    sealer = aead(key) if context is None else context
    sealed = sealer.encrypt(nonce, plaintext.encode(), _DIRECT_AAD + _aad(event_id, field))
    return f"{PREFIX}{key_id}:{_b64(nonce + sealed)}"


def _convergent_aad_nonce(binding: bytes) -> tuple[bytes, bytes]:
    """The associated data and the nonce of a convergent seal of `binding` (one place for
    `seal_convergent` and `open_convergent`, which must agree)."""
    aad = _CONVERGENT_AAD + binding
    return aad, hashlib.blake2b(aad, digest_size=_NONCE).digest()


def seal_convergent(
    plaintext: str, *, binding: bytes, key_id: str, key: bytes, context: AESGCMSIV | None = None
) -> str:
    """`plaintext` sealed in the convergent form under `key` (named `key_id`; `context`:
    its `aead_siv`, when the caller holds one), bound to `binding`: the same plaintext,
    binding and key always give the same text (see the module's docstring)."""
    sealer = aead_siv(key) if context is None else context
    aad, nonce = _convergent_aad_nonce(binding)
    return f"{CONVERGENT_PREFIX}{key_id}:{_b64(sealer.encrypt(nonce, plaintext.encode(), aad))}"


def seal_wrapped(
    plaintext: str,
    *,
    event_id: UUID,
    field: str,
    key_id: str,
    key: bytes,
    context: AESGCM | None = None,
) -> str:
    """`plaintext` sealed in the wrapped form (`open_sealed` opens it), deterministically:
    the data key and the wrapping nonce are one HMAC-SHA512 of the binding and the
    plaintext under `key`, so the same plaintext of the same field of the same event under
    the same key always seals to the same text. Nonces are never reused with different
    data (as in SIV): a data key seals one plaintext only, so its nonce is fixed; the
    wrapping nonce differs with the plaintext.

    What graph values were sealed with before 7 December: still written for an item that
    holds values in this form, so that its equal plaintexts keep sealing alike
    (`producers.keys.cipher`)."""
    wrapper = aead(key) if context is None else context
    aad = _aad(event_id, field)
    data = plaintext.encode()
    derived = hmac.digest(key, _CONVERGENT + len(aad).to_bytes(4, "big") + aad + data, "sha512")
    data_key, wrap_nonce = derived[:KEY_BYTES], derived[KEY_BYTES : KEY_BYTES + _NONCE]
    wrapped = wrap_nonce + wrapper.encrypt(wrap_nonce, data_key, aad)
    sealed = _FIXED_NONCE + AESGCM(data_key).encrypt(_FIXED_NONCE, data, aad)
    return f"{WRAPPED_PREFIX}{key_id}:{_b64(wrapped)}:{_b64(sealed)}"


def parse(value: str) -> Sealed:
    """The parts of a sealed value (either form); SealedError naming what is wrong."""
    if len(value) > _MAX_SEALED:
        raise SealedError(f"sealed value of {len(value)} characters; at most {_MAX_SEALED}")
    prefix = next((p for p in _PREFIXES if value.startswith(p)), None)
    if prefix is None:
        raise SealedError(f"not a sealed value (expected the prefix {PREFIX!r})")
    parts = value[len(prefix) :].split(":")
    count = 3 if prefix == WRAPPED_PREFIX else 2
    if len(parts) != count:
        raise SealedError(
            f"sealed value: expected {count} parts after {prefix!r}, got {len(parts)}"
        )
    key_id, *rest = parts
    if len(key_id) != KEY_ID_HEX or any(c not in "0123456789abcdef" for c in key_id):
        raise SealedError(f"sealed value: key id {key_id[:40]!r} is not {KEY_ID_HEX} hex digits")
    wrapped = b""
    if prefix == WRAPPED_PREFIX:
        wrapped = _unb64(rest[0], "the wrapped data key")
        if len(wrapped) != _NONCE + KEY_BYTES + _TAG:
            raise SealedError(f"sealed value: wrapped data key of {len(wrapped)} bytes")
    ciphertext = _unb64(rest[-1], "the sealed content")
    if len(ciphertext) < (_TAG if prefix == CONVERGENT_PREFIX else _NONCE + _TAG):
        raise SealedError(f"sealed value: sealed content of {len(ciphertext)} bytes")
    return Sealed(key_id, wrapped, ciphertext, prefix)


def open_sealed(
    sealed: Sealed, *, event_id: UUID, field: str, key: bytes, context: AESGCM | None = None
) -> str:
    """The plaintext, given the subject key `sealed.key_id` names (`context`: its `aead`,
    when the caller holds one); SealedError when it does not open (another key, another
    event or field, changed bytes), or is a graph value's (`open_convergent`)."""
    if sealed.form == CONVERGENT_PREFIX:
        raise SealedError(
            f"sealed {field} of event {event_id}: a graph value's form ({CONVERGENT_PREFIX!r})"
        )
    aad = _aad(event_id, field)
    try:
        opener = aead(key) if context is None else context
        if not sealed.wrapped_key:  # the direct form
            plain = opener.decrypt(
                sealed.ciphertext[:_NONCE], sealed.ciphertext[_NONCE:], _DIRECT_AAD + aad
            )
            return plain.decode()
        data_key = opener.decrypt(sealed.wrapped_key[:_NONCE], sealed.wrapped_key[_NONCE:], aad)
        plain = AESGCM(data_key).decrypt(
            sealed.ciphertext[:_NONCE], sealed.ciphertext[_NONCE:], aad
        )
        return plain.decode()
    except (InvalidTag, ValueError):
        raise SealedError(
            f"sealed {field} of event {event_id} does not open with key {sealed.key_id}"
        ) from None


def open_convergent(
    sealed: Sealed, *, binding: bytes, key: bytes, context: AESGCMSIV | None = None
) -> str:
    """The plaintext of a value `seal_convergent` sealed, given the key `sealed.key_id`
    names (`context`: its `aead_siv`, when the caller holds one); SealedError when it is
    of another form or does not open (another key, another binding, changed bytes)."""
    if sealed.form != CONVERGENT_PREFIX:
        raise SealedError(f"sealed value of the form {sealed.form!r}, not {CONVERGENT_PREFIX!r}")
    aad, nonce = _convergent_aad_nonce(binding)
    try:
        opener = aead_siv(key) if context is None else context
        return opener.decrypt(nonce, sealed.ciphertext, aad).decode()
    except (InvalidTag, ValueError):
        raise SealedError(f"sealed value does not open with key {sealed.key_id}") from None
