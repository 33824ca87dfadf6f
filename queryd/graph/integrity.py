"""Integrity queries: contradictions, stale items, dependents, aliases (all index-backed)."""

from __future__ import annotations

from collections import deque

from projector.graph.pmap import sset_iter
from projector.graph.state import GraphState, active_edge_ids, child_ids, in_item_order, stale_ids
from schemas.graph.items import MemoryItem
from schemas.graph.results import Contradiction, StaleItem


def get_contradictions(state: GraphState) -> list[Contradiction]:
    """Active CONTRADICTS edges whose endpoints both exist, in edge insertion order."""
    items, edges = state.items, state.edges
    out = []
    for eid in active_edge_ids(state, "CONTRADICTS"):
        e = edges[eid]
        a, b = items.get(e.from_), items.get(e.to)
        if a is not None and b is not None:
            out.append(Contradiction(a=a, b=b, edge=e))
    return out


def get_stale_items(state: GraphState) -> list[StaleItem]:
    """Items naming parents that are not in the graph, in insertion order."""
    items = state.items
    out = []
    for iid in stale_ids(state):
        item = items[iid]
        missing = [p for p in dict.fromkeys(item.parents or ()) if p not in items]
        out.append(StaleItem(item=item, missing_parents=missing))
    return out


def dependent_ids(state: GraphState, item_id: str, transitive: bool = False) -> list[str]:
    """Children of the item, or (transitive) all descendants breadth-first, cycle-safe,
    never the item itself."""
    direct = child_ids(state, item_id)
    if not transitive:
        return [c for c in direct if c != item_id]
    seen = {item_id}
    out: list[str] = []
    queue = deque([item_id])
    while queue:
        for c in child_ids(state, queue.popleft()):
            if c not in seen:
                seen.add(c)
                out.append(c)
                queue.append(c)
    return out


def get_dependents(state: GraphState, item_id: str, transitive: bool = False) -> list[MemoryItem]:
    items = state.items
    return [items[i] for i in dependent_ids(state, item_id, transitive)]


def _alias_neighbours(state: GraphState, item_id: str) -> list[str]:
    # Identity is symmetric: an ALIAS edge in either direction makes the two ids aliases.
    idx, edges = state.index, state.edges
    out = []
    for eid in sset_iter(idx.outgoing.get(item_id)):
        e = edges[eid]
        if e.active and e.kind == "ALIAS":
            out.append(e.to)
    for eid in sset_iter(idx.incoming.get(item_id)):
        e = edges[eid]
        if e.active and e.kind == "ALIAS":
            out.append(e.from_)
    return out


def get_aliases(state: GraphState, item_id: str) -> list[MemoryItem]:
    """Existing items joined to ``item_id`` by an active ALIAS edge, in insertion order."""
    items = state.items
    ids = [i for i in _alias_neighbours(state, item_id) if i != item_id]
    return [items[i] for i in in_item_order(state, ids)]


def get_alias_group(state: GraphState, item_id: str) -> list[MemoryItem]:
    """The connected alias component, the item included, in insertion order ([] if absent)."""
    items = state.items
    if item_id not in items:
        return []
    seen = {item_id}
    queue = deque([item_id])
    while queue:
        for n in _alias_neighbours(state, queue.popleft()):
            if n not in seen and n in items:
                seen.add(n)
                queue.append(n)
    return [items[i] for i in in_item_order(state, seen)]


__all__ = [
    "dependent_ids",
    "get_alias_group",
    "get_aliases",
    "get_contradictions",
    "get_dependents",
    "get_stale_items",
]
