"""Provenance and edge navigation: parents, children, related items."""

from __future__ import annotations

from typing import Literal

from projector.graph.pmap import sset_iter
from projector.graph.state import GraphState, child_ids, in_item_order
from schemas.graph.items import MemoryItem

Direction = Literal["from", "to", "both"]


def get_parents(state: GraphState, item_id: str) -> list[MemoryItem]:
    """The item's parents that exist, as the item lists them (repeats kept, as the seed)."""
    item = state.items.get(item_id)
    if item is None or not item.parents:
        return []
    items = state.items
    return [items[p] for p in item.parents if p in items]


def get_children(state: GraphState, item_id: str) -> list[MemoryItem]:
    """Items listing ``item_id`` among their parents, in insertion order."""
    items = state.items
    return [items[c] for c in child_ids(state, item_id)]


def get_related_items(
    state: GraphState, item_id: str, direction: Direction = "both"
) -> list[MemoryItem]:
    """Items joined to ``item_id`` by active edges.

    ``"from"``: edges leaving the item (it is their ``from``); ``"to"``: edges arriving at
    it; ``"both"``: either. Deduplicated, insertion-ordered, without the item itself.
    """
    # Another direction follows no edge (the seed returns [] for it, raising nothing).
    idx = state.index
    edges = state.edges
    related: list[str] = []
    if direction in ("from", "both"):
        for eid in sset_iter(idx.outgoing.get(item_id)):
            e = edges[eid]
            if e.active:
                related.append(e.to)
    if direction in ("to", "both"):
        for eid in sset_iter(idx.incoming.get(item_id)):
            e = edges[eid]
            if e.active:
                related.append(e.from_)
    items = state.items
    return [items[i] for i in in_item_order(state, related) if i != item_id]


__all__ = ["Direction", "get_children", "get_parents", "get_related_items"]
