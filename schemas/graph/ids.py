"""UUIDv7 (RFC 9562) minting and timestamp extraction, as memex-python reads and writes them."""

from __future__ import annotations

import os
import re
import time
import uuid

from schemas.graph.errors import InvalidTimestampError

_MASK_48 = (1 << 48) - 1


def now_ms() -> int:
    """Wall clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def uuid7(ms: int | None = None) -> str:
    """A UUIDv7 string whose first 48 bits are ``ms`` (default: now), big-endian.

    As the seed does, ``ms`` is taken modulo 2**48 (its low 48 bits), not range-checked.
    """
    if ms is None:
        ms = now_ms()
    ms = ms & _MASK_48  # a non-int raises TypeError here, as in the seed
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)  # 62 bits
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# The canonical textual form, by far the most common: read without building a UUID.
_CANONICAL = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-7[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
)


def _v7_ms(value: object) -> int | None:
    """The timestamp of a UUIDv7 string, or None. Whatever ``uuid.UUID`` parses is read
    (braces, ``urn:uuid:``, no hyphens), with the RFC variant, version 7 and a positive
    timestamp: the ids the seed reads."""
    if not isinstance(value, str):
        return None
    if _CANONICAL.fullmatch(value) is not None:
        ms = int(value[:8] + value[9:13], 16)
        return ms if ms > 0 else None
    try:
        u = uuid.UUID(value)
    except (ValueError, TypeError):
        return None
    if u.version != 7:  # None unless the variant is RFC 4122's
        return None
    ms = u.int >> 80
    return ms if ms > 0 else None


def extract_timestamp(uuid_id: str) -> int:
    """The ms timestamp of a UUIDv7; InvalidTimestampError for anything else."""
    ms = _v7_ms(uuid_id)
    if ms is None:
        raise InvalidTimestampError(f'Cannot extract timestamp: "{uuid_id}" is not a valid UUIDv7')
    return ms


def safe_extract_timestamp(value: str) -> int | None:
    """Like extract_timestamp, but None for non-v7 input or a non-positive timestamp."""
    return _v7_ms(value)


__all__ = ["extract_timestamp", "now_ms", "safe_extract_timestamp", "uuid7"]
