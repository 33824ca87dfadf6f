"""Time decay of scores."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from schemas.graph.coerce import coerce
from schemas.graph.ids import now_ms
from schemas.graph.items import MemoryItem, require_timestamp
from schemas.graph.scoring import DecayConfig

INTERVAL_MS: dict[str, int] = {"hour": 3_600_000, "day": 86_400_000, "week": 604_800_000}
DECAY_TYPES = ("exponential", "linear", "step")


def check_decay(decay: DecayConfig) -> tuple[float, int, str]:
    """(rate, interval_ms, type); the seed's ValueError on an unknown interval or type."""
    interval_ms = INTERVAL_MS.get(decay.interval)
    if interval_ms is None:
        raise ValueError(
            f'Unknown decay interval: "{decay.interval}". Expected "hour", "day", or "week".'
        )
    if decay.type not in DECAY_TYPES:
        raise ValueError(
            f'Unknown decay type: "{decay.type}". Expected "exponential", "linear", or "step".'
        )
    return decay.rate, interval_ms, decay.type


def decay_at(ts: int, now: int, rate: float, interval_ms: int, kind: str) -> float:
    age = now - ts
    if age <= 0:
        return 1.0  # future-dated (clock skew)
    intervals = age / interval_ms
    if kind == "exponential":
        return float((1.0 - rate) ** intervals)
    if kind == "linear":
        return max(0.0, 1.0 - rate * intervals)
    return float((1.0 - rate) ** math.floor(intervals))


def compute_decay_multiplier(
    item: MemoryItem, decay: DecayConfig | Mapping[str, Any], *, now: int | None = None
) -> float:
    """The multiplier for an item's age; ``now`` (ms) defaults to the wall clock.

    InvalidTimestampError when the item has no known time (no created_at, no UUIDv7 id);
    ValueError on an unknown interval or type.
    """
    rate, interval_ms, kind = check_decay(coerce(DecayConfig, decay))
    ts = require_timestamp(item)
    return decay_at(ts, now_ms() if now is None else now, rate, interval_ms, kind)


__all__ = ["compute_decay_multiplier", "check_decay", "decay_at"]
