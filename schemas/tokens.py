"""Bearer tokens of queryd: their form, scopes, hashing, and the checks of a presented token.

A token is ``mst_<id>_<secret>``: ``mst_`` (recognisable in a leaked file or a secret
scanner's rules), a 12-hex-digit id (public: `memstream tokens list` shows it, `revoke`
takes it, error messages may name it) and a 43-character URL-safe secret of 256 random
bits. Only the SHA-256 of the whole token is stored, never the token: a plain hash is
enough for a secret of 256 random bits (no dictionary to try), and it is compared with
`hmac.compare_digest`, in time independent of where the bytes differ.

A token grants one scope on one log to one agent: ``read`` < ``recall`` < ``admin``, each
allowing what the lower ones allow. It expires (always: `MAX_LIFETIME` at most) and can be
revoked. This module is pure (no files, no HTTP): the store of token records is an adapter
(`producers.keys.token_store`), the routes' requirements are queryd's
(`queryd.daemon.access`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from schemas.errors import MemstreamError

__all__ = [
    "DEFAULT_LIFETIME",
    "MAX_LIFETIME",
    "SCOPES",
    "TOKEN_PREFIX",
    "AccessError",
    "Grant",
    "Scope",
    "ScopeRefused",
    "TokenRecord",
    "TokenRefused",
    "authorize",
    "check_token",
    "check_name",
    "new_token",
    "parse_lifetime",
    "scope_allows",
    "token_hash",
    "token_id_of",
]

Scope = Literal["read", "recall", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "recall", "admin")  # in increasing order
_RANK: dict[str, int] = {scope: rank for rank, scope in enumerate(SCOPES)}

TOKEN_PREFIX = "mst_"
ID_HEX = 12
SECRET_CHARS = 43  # secrets.token_urlsafe(32)
HASH_BYTES = 32
_TOKEN = re.compile(rf"{TOKEN_PREFIX}([0-9a-f]{{{ID_HEX}}})_([A-Za-z0-9_-]{{{SECRET_CHARS}}})")
TOKEN_ID = re.compile(rf"[0-9a-f]{{{ID_HEX}}}")
MAX_TOKEN_CHARS = 200  # longer is malformed without looking further
MAX_NAME_CHARS = 255

DEFAULT_LIFETIME = timedelta(days=90)
MAX_LIFETIME = timedelta(days=3650)
_LIFETIME = re.compile(r"(\d{1,6})([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class AccessError(MemstreamError):
    """A request refused by access control; `what` names what is missing or wrong
    ("token", "scope", "log", "actor"). Messages never contain a token."""

    def __init__(self, message: str, what: str) -> None:
        super().__init__(message)
        self.what = what


class TokenRefused(AccessError):
    """No usable token: missing, malformed, unknown, expired or revoked (HTTP 401)."""


class ScopeRefused(AccessError):
    """A valid token that does not grant this (another log, a lower scope, another
    agent named as actor): HTTP 403."""


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """What the store keeps of a token: its id and hash, and what it grants until when."""

    id: str
    hash: bytes
    log: str
    scope: Scope
    agent: str
    created: datetime
    expires: datetime
    revoked: datetime | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    """What a checked token grants: `scope` on `log`, acting as `agent`."""

    token_id: str
    log: str
    scope: Scope
    agent: str
    expires: datetime


def scope_allows(granted: str, needed: str) -> bool:
    """Whether scope `granted` includes `needed` (read < recall < admin)."""
    return _RANK.get(granted, -1) >= _RANK[needed]


def token_hash(token: str) -> bytes:
    """The SHA-256 of a token, as stored."""
    return hashlib.sha256(token.encode()).digest()


def new_token() -> tuple[str, str]:
    """(a new random token, its id)."""
    token_id = secrets.token_hex(ID_HEX // 2)
    return f"{TOKEN_PREFIX}{token_id}_{secrets.token_urlsafe(32)}", token_id


def token_id_of(token: str) -> str | None:
    """The id of a token of the right form; None when it is not one."""
    if len(token) > MAX_TOKEN_CHARS:
        return None
    found = _TOKEN.fullmatch(token)
    return None if found is None else found.group(1)


def check_name(field: str, value: str) -> str:
    """A log or agent name as stored: 1 to 255 characters, no control characters (they
    are printed in listings and logs); a ValueError naming `field` otherwise."""
    if not value or len(value) > MAX_NAME_CHARS or _CONTROL.search(value):
        raise ValueError(
            f"{field}: expected 1 to {MAX_NAME_CHARS} characters without control "
            f"characters, got {len(value)} characters"
        )
    return value


def parse_lifetime(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w``, ``3600s`` as a duration, at most `MAX_LIFETIME`;
    a ValueError naming what was expected otherwise."""
    found = _LIFETIME.fullmatch(text.strip())
    if found is None:
        raise ValueError(
            f"expires: expected a number and a unit (s, m, h, d, w), such as 30d, got {text!r}"
        )
    lifetime = timedelta(seconds=int(found.group(1)) * _UNITS[found.group(2)])
    if lifetime <= timedelta(0) or lifetime > MAX_LIFETIME:
        raise ValueError(f"expires: expected more than 0 and at most 3650d, got {text!r}")
    return lifetime


# Compared against when the id is unknown, so that an unknown id costs what a known one does.
_NO_HASH = bytes(HASH_BYTES)


def check_token(presented: str | None, records: Mapping[str, TokenRecord], now: datetime) -> Grant:
    """The grant of `presented` among `records` (by id) at `now`; a `TokenRefused` naming
    why not (missing, malformed, unknown, revoked, expired). The hash is compared in
    constant time; the token itself is never part of a message."""
    if presented is None:
        raise TokenRefused("token: missing (send 'Authorization: Bearer <token>')", "token")
    token_id = token_id_of(presented)
    if token_id is None:
        raise TokenRefused(
            f"token: malformed (expected {TOKEN_PREFIX}<12 hex digits>_<43 characters>, as "
            "`memstream tokens create` prints)",
            "token",
        )
    record = records.get(token_id)
    stored = _NO_HASH if record is None else record.hash
    if not hmac.compare_digest(token_hash(presented), stored) or record is None:
        raise TokenRefused("token: unknown (no such token in this daemon's token store)", "token")
    if record.revoked is not None:
        raise TokenRefused(
            f"token: {record.id} was revoked at {record.revoked.isoformat()}", "token"
        )
    if now >= record.expires:
        raise TokenRefused(f"token: {record.id} expired at {record.expires.isoformat()}", "token")
    return Grant(record.id, record.log, record.scope, record.agent, record.expires)


def authorize(grant: Grant, log: str, needed: Scope) -> None:
    """Nothing when `grant` allows scope `needed` on `log`; a `ScopeRefused` naming what is
    missing otherwise."""
    if grant.log != log:
        raise ScopeRefused(
            f"log: token {grant.token_id} grants log {grant.log!r}, not {log!r}", "log"
        )
    if not scope_allows(grant.scope, needed):
        raise ScopeRefused(
            f"scope: this needs scope {needed!r} on log {log!r}; token {grant.token_id} "
            f"has {grant.scope!r}",
            "scope",
        )
