"""Bulk operations: many updates/retractions in one transaction (one new state)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from projector.graph.reducer import Tx
from projector.graph.state import CommandResult, GraphState
from queryd.graph.items import filter_items, get_items
from schemas.gc_guard import cyclic_gc_paused, no_cyclic_gc
from schemas.graph.coerce import coerce
from schemas.graph.filters import MemoryFilter, QueryOptions, ScoreAdjustment
from schemas.graph.ids import now_ms
from schemas.graph.items import MemoryItem, item_timestamp

ItemTransform = Callable[[MemoryItem], dict[str, Any] | None]
_SCORES = ("authority", "conviction", "importance")


def apply_many(
    state: GraphState,
    filter: MemoryFilter | Mapping[str, Any] | None,
    transform: ItemTransform,
    author: str,
    reason: str | None = None,
    options: QueryOptions | Mapping[str, Any] | None = None,
) -> CommandResult:
    """For each matching item: transform -> None retracts it (and its edges), {} skips it,
    a partial dict updates it (unvalidated, as memory.update)."""
    tx = Tx(state)
    with no_cyclic_gc():
        for item in get_items(state, filter, options):
            partial = transform(item)
            if partial is None:
                tx.retract_item(item.id)
            elif not isinstance(partial, Mapping):
                raise TypeError(f"transform must return a dict or None, got {partial!r}")
            elif partial:
                tx.update_item(item.id, partial)
    return tx.result()


def _clamp(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


@cyclic_gc_paused
def bulk_adjust_scores(
    state: GraphState,
    criteria: MemoryFilter | Mapping[str, Any],
    delta: ScoreAdjustment | Mapping[str, Any],
    author: str,
    reason: str | None = None,
) -> CommandResult:
    """Add the given deltas to matching items' scores, clamped to 0..1.

    A score the item does not have (conviction/importance None) is left absent, and an
    item whose scores do not change gets no update event.
    """
    d = coerce(ScoreAdjustment, delta)
    deltas = [(name, getattr(d, name)) for name in _SCORES if getattr(d, name) is not None]
    tx = Tx(state)
    if not deltas:
        return tx.result()
    for item in filter_items(state, coerce(MemoryFilter, criteria)):
        partial = {}
        for name, dv in deltas:
            cur = getattr(item, name)
            if cur is None:
                continue
            new = _clamp(cur + dv)
            if new != cur:
                partial[name] = new
        if partial:
            tx.update_item(item.id, partial)
    return tx.result()


@cyclic_gc_paused
def decay_importance(
    state: GraphState,
    older_than_ms: int,
    factor: float,
    author: str,
    reason: str | None = None,
) -> CommandResult:
    """Multiply importance by ``factor`` for items created before now - older_than_ms.

    Items with zero or absent importance (or no known timestamp) are skipped. ``factor``
    must be finite and non-negative (ValueError); results are clamped to 1.
    """
    if isinstance(factor, bool) or not math.isfinite(factor) or factor < 0:
        raise ValueError(f"factor must be finite and non-negative, got {factor!r}")
    cutoff = now_ms() - older_than_ms
    tx = Tx(state)
    items: Any = state.items
    for item in items.values_tuple():
        imp = item.importance
        if not imp:
            continue
        ts = item_timestamp(item)
        if ts is None or ts >= cutoff:
            continue
        new = min(1.0, imp * factor)
        if new != imp:
            tx.update_item(item.id, {"importance": new})
    return tx.result()


__all__ = ["ItemTransform", "apply_many", "bulk_adjust_scores", "decay_importance"]
