"""Bulk operations: many updates/retractions in one transaction (one new state)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from projector.graph.reducer import Tx
from projector.graph.selection import get_items
from projector.graph.state import CommandResult, GraphState
from schemas.gc_guard import cyclic_gc_paused, no_cyclic_gc
from schemas.graph.coerce import coerce
from schemas.graph.filters import MemoryFilter, QueryOptions, ScoreAdjustment
from schemas.graph.ids import now_ms
from schemas.graph.items import MemoryItem

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
    """For each matching item (``get_items(state, filter, options)``): the transform's
    None retracts it (and its edges), an empty result skips it, a partial dict updates it
    (unvalidated, as memory.update). As in the seed, any other result raises what
    ``len()`` or ``.items()`` raise on it. Nothing changed: ``state`` itself comes back."""
    tx = Tx(state)
    with no_cyclic_gc():
        for item in get_items(state, filter, options):
            partial = transform(item)
            if partial is None:
                tx.retract_item(item.id)
            elif len(partial):
                tx.update_item(item.id, partial)
    if not tx.events:
        return CommandResult(state, [])
    return tx.result()


def _clamp(x: float) -> float:
    # The seed's max(0, min(1, x)): NaN becomes 1.0, as min(1.0, nan) is 1.0.
    return max(0.0, min(1.0, x))


@cyclic_gc_paused
def bulk_adjust_scores(
    state: GraphState,
    criteria: MemoryFilter | Mapping[str, Any] | None,
    delta: ScoreAdjustment | Mapping[str, Any],
    author: str,
    reason: str | None = None,
) -> CommandResult:
    """Add the given deltas to matching items' scores, clamped to 0..1, as the seed does:
    an absent score counts as 0, and every matching item gets its update (and its
    ``memory.updated`` event) whenever a delta is given, changed or not. No delta or no
    matching item: ``state`` itself comes back."""
    d = coerce(ScoreAdjustment, delta)
    deltas = [(name, getattr(d, name)) for name in _SCORES if getattr(d, name) is not None]
    if not deltas:
        return CommandResult(state, [])
    tx = Tx(state)
    for item in get_items(state, criteria):
        partial = {name: _clamp((getattr(item, name) or 0) + dv) for name, dv in deltas}
        tx.update_item(item.id, partial)
    if not tx.events:
        return CommandResult(state, [])
    return tx.result()


@cyclic_gc_paused
def decay_importance(
    state: GraphState,
    older_than_ms: int,
    factor: float,
    author: str,
    reason: str | None = None,
) -> CommandResult:
    """Multiply importance by ``factor`` (result clamped to 0..1) for items created before
    now - older_than_ms, as the seed does: an ``apply_many`` over ``{"created": {"before":
    cutoff}}`` (so an item with no known time raises InvalidTimestampError), skipping
    items with zero or absent importance, updating every other one, changed or not."""
    cutoff = now_ms() - older_than_ms

    def transform(item: MemoryItem) -> dict[str, Any]:
        imp = item.importance
        if not imp:
            return {}
        return {"importance": _clamp(imp * factor)}

    return apply_many(state, {"created": {"before": cutoff}}, transform, author, reason)


__all__ = ["ItemTransform", "apply_many", "bulk_adjust_scores", "decay_importance"]
