"""Integrity queries: contradictions, stale items, dependents, aliases (all index-backed)."""

from __future__ import annotations

from projector.graph.state import (
    GraphState,
    active_edge_ids,
    child_ids,
    outgoing_edge_ids,
    stale_ids,
)
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
    """Items naming parents that are not in the graph, in insertion order; each missing
    parent is listed as often as, and where, it appears in ``parents`` (as the seed does)."""
    items = state.items
    out = []
    for iid in stale_ids(state):
        item = items[iid]
        missing = [p for p in item.parents or () if p not in items]
        out.append(StaleItem(item=item, missing_parents=missing))
    return out


def dependent_ids(state: GraphState, item_id: str, transitive: bool = False) -> list[str]:
    """The seed's dependents: the items naming ``item_id`` as a parent, in insertion order
    (the item itself when it is its own parent); or, ``transitive``, every descendant in
    the seed's walk order (a stack of children, each pushed in insertion order and taken
    once, the latest first), the item itself included when a cycle leads back to it."""
    direct = child_ids(state, item_id)
    if not transitive:
        return direct
    seen: set[str] = set()
    out: list[str] = []
    stack = direct
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        out.append(node)
        stack.extend(child_ids(state, node))
    return out


def get_dependents(state: GraphState, item_id: str, transitive: bool = False) -> list[MemoryItem]:
    items = state.items
    return [items[i] for i in dependent_ids(state, item_id, transitive)]


def _alias_targets(state: GraphState, item_id: str) -> list[str]:
    """Targets of the active ALIAS edges leaving ``item_id``, in edge order (repeats kept):
    aliases are directional, as in the seed."""
    edges = state.edges
    out = []
    for eid in outgoing_edge_ids(state, item_id):
        e = edges[eid]
        if e.active and e.kind == "ALIAS":
            out.append(e.to)
    return out


def get_aliases(state: GraphState, item_id: str) -> list[MemoryItem]:
    """The existing targets of the active ALIAS edges leaving ``item_id``, in edge order,
    repeats and the item itself (a self-alias edge) included."""
    items = state.items
    return [items[i] for i in _alias_targets(state, item_id) if i in items]


def get_alias_group(state: GraphState, item_id: str) -> list[MemoryItem]:
    """Everything reachable from ``item_id`` along active ALIAS edges, in the seed's walk
    order (a stack, the latest target first). Ids that are not items are passed through
    but not listed; the item itself is listed first when it exists."""
    items = state.items
    seen: set[str] = set()
    out: list[MemoryItem] = []
    stack = [item_id]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        found = items.get(node)
        if found is not None:
            out.append(found)
        stack.extend(_alias_targets(state, node))
    return out


__all__ = [
    "dependent_ids",
    "get_alias_group",
    "get_aliases",
    "get_contradictions",
    "get_dependents",
    "get_stale_items",
]
