"""Named cost functions for budget packing (`smart_retrieve`).

A callable cannot travel over HTTP, so the query daemon names one of these instead.
Each is pure and total: any item gets a finite, non-negative cost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Literal, get_args

from schemas.graph.items import MemoryItem

__all__ = ["CostName", "COST_NAMES", "COST_FUNCTIONS", "cost_function", "content_chars"]

CostFn = Callable[[MemoryItem], float]
CostName = Literal["unit", "content_chars", "content_tokens"]
COST_NAMES: tuple[str, ...] = get_args(CostName)


def content_chars(item: MemoryItem) -> float:
    """The length of the item's content as compact JSON (keys sorted)."""
    text = json.dumps(
        item.content, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return float(len(text))


def _unit(item: MemoryItem) -> float:
    return 1.0


def _content_tokens(item: MemoryItem) -> float:
    """A rough token count: one token per four characters of content JSON."""
    return float(math.ceil(content_chars(item) / 4))


COST_FUNCTIONS: dict[str, CostFn] = {
    "unit": _unit,
    "content_chars": content_chars,
    "content_tokens": _content_tokens,
}


def cost_function(name: str) -> CostFn:
    """The cost function of this name; ValueError naming the known ones otherwise."""
    try:
        return COST_FUNCTIONS[name]
    except KeyError:
        raise ValueError(f"cost: expected one of {', '.join(COST_NAMES)}, got {name!r}") from None
