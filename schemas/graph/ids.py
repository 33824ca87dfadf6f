"""UUIDv7 (RFC 9562) minting and timestamp extraction."""

from __future__ import annotations

import os
import re
import time

from schemas.graph.errors import InvalidTimestampError

# Canonical textual form only, version nibble 7, RFC variant (10xx): anything else is not v7.
_V7_RE = re.compile(
    r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$", re.IGNORECASE
)
_MAX_MS = (1 << 48) - 1


def now_ms() -> int:
    """Wall clock in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def uuid7(ms: int | None = None) -> str:
    """A UUIDv7 string whose first 48 bits are ``ms`` (default: now), big-endian."""
    if ms is None:
        ms = now_ms()
    if not 0 <= ms <= _MAX_MS:
        raise ValueError(f"uuid7 timestamp out of range: {ms}")
    rand = int.from_bytes(os.urandom(10), "big")
    rand_a = rand >> 68  # 12 bits
    rand_b = rand & ((1 << 62) - 1)  # 62 bits
    value = (ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def extract_timestamp(uuid_id: str) -> int:
    """The ms timestamp of a UUIDv7; InvalidTimestampError for anything else."""
    if not isinstance(uuid_id, str) or _V7_RE.match(uuid_id) is None:
        raise InvalidTimestampError(uuid_id, "not a UUIDv7")
    return int(uuid_id[:8] + uuid_id[9:13], 16)


def safe_extract_timestamp(value: str) -> int | None:
    """Like extract_timestamp, but None for non-v7 input or a non-positive timestamp."""
    if not isinstance(value, str) or _V7_RE.match(value) is None:
        return None
    ts = int(value[:8] + value[9:13], 16)
    return ts if ts > 0 else None


__all__ = ["extract_timestamp", "now_ms", "safe_extract_timestamp", "uuid7"]
