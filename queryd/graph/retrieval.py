"""Retrieval: provenance walks, contradiction policies, diversity and budget packing."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from projector.graph.state import GraphState, active_edge_ids
from queryd.graph.scoring import get_scored_items, scored_item
from schemas.graph._fast import construct
from schemas.graph.coerce import coerce
from schemas.graph.filters import DiversityOptions, MemoryFilter
from schemas.graph.items import MemoryItem
from schemas.graph.results import ScoredItem
from schemas.graph.scoring import ScoreWeights

CostFn = Callable[[MemoryItem], float]
ContradictionPolicy = Literal["filter", "surface"]


@dataclass
class SupportNode:
    """An item and the support trees of its (existing) parents."""

    item: MemoryItem
    parents: list[SupportNode] = field(default_factory=list)


def get_support_tree(state: GraphState, item_id: str) -> SupportNode | None:
    """The provenance tree of an item; each item appears once (cycles and shared ancestors
    are expanded at their first visit only). Iterative: no recursion limit on deep chains."""
    items = state.items
    item = items.get(item_id)
    if item is None:
        return None
    root = SupportNode(item)
    seen = {item_id}
    stack = [root]
    while stack:
        node = stack.pop()
        for p in dict.fromkeys(node.item.parents or ()):
            if p in seen or p not in items:
                continue
            seen.add(p)
            child = SupportNode(items[p])
            node.parents.append(child)
            stack.append(child)
    return root


def get_support_set(state: GraphState, item_id: str) -> list[MemoryItem]:
    """The support tree flattened in pre-order: the item itself first, then its ancestors."""
    root = get_support_tree(state, item_id)
    if root is None:
        return []
    out: list[MemoryItem] = []
    stack = [root]
    while stack:
        node = stack.pop()
        out.append(node.item)
        stack.extend(reversed(node.parents))
    return out


def _superseded(state: GraphState) -> set[str]:
    edges = state.edges
    return {edges[e].to for e in active_edge_ids(state, "SUPERSEDES")}


def _contradiction_edges(state: GraphState, present: Mapping[str, Any]) -> list[Any]:
    edges = state.edges
    out = []
    for eid in active_edge_ids(state, "CONTRADICTS"):
        e = edges[eid]
        if e.from_ != e.to and e.from_ in present and e.to in present:
            out.append(e)
    return out


def filter_contradictions(state: GraphState, scored: Sequence[ScoredItem]) -> list[ScoredItem]:
    """Drop superseded items, then the lower-scoring side of each unresolved contradiction.

    Pairs are settled from the highest-scoring down (then by edge_id); a pair one of whose
    sides is already dropped is settled. On equal scores the side ranked later is dropped.
    """
    gone = _superseded(state)
    kept = [s for s in scored if s.item.id not in gone]
    pos: dict[str, int] = {}
    for i, s in enumerate(kept):
        pos.setdefault(s.item.id, i)
    pairs = _contradiction_edges(state, pos)
    pairs.sort(key=lambda e: (-max(kept[pos[e.from_]].score, kept[pos[e.to]].score), e.edge_id))
    dropped: set[str] = set()
    for e in pairs:
        if e.from_ in dropped or e.to in dropped:
            continue
        a, b = kept[pos[e.from_]], kept[pos[e.to]]
        if a.score != b.score:
            dropped.add(b.item.id if a.score > b.score else a.item.id)
        else:
            dropped.add(e.to if pos[e.to] > pos[e.from_] else e.from_)
    return [s for s in kept if s.item.id not in dropped]


def surface_contradictions(state: GraphState, scored: Sequence[ScoredItem]) -> list[ScoredItem]:
    """Drop superseded items; keep both sides of each contradiction, annotating
    ``contradicted_by`` on the given ScoredItems in place. Self-edges are ignored."""
    gone = _superseded(state)
    kept = [s for s in scored if s.item.id not in gone]
    by_id: dict[str, list[ScoredItem]] = {}
    for s in kept:
        by_id.setdefault(s.item.id, []).append(s)
    items = state.items
    for e in _contradiction_edges(state, by_id):
        for here, there in ((e.from_, e.to), (e.to, e.from_)):
            other = items.get(there)
            if other is None:
                continue
            for s in by_id[here]:
                current = s.contradicted_by or []
                if all(o.id != there for o in current):
                    s.contradicted_by = [*current, other]
    return kept


def apply_diversity(
    scored: Sequence[ScoredItem], options: DiversityOptions | Mapping[str, Any]
) -> list[ScoredItem]:
    """Subtract a penalty per earlier item (in the given order) sharing the author, a parent
    or the source kind; clamp at 0; re-sort by score descending (stable). Returns new
    ScoredItems; the inputs are not modified."""
    o = coerce(DiversityOptions, options)
    ap, pp, sp = o.author_penalty or 0.0, o.parent_penalty or 0.0, o.source_penalty or 0.0
    authors: Counter[str] = Counter()
    parents: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    out: list[ScoredItem] = []
    for s in scored:
        it = s.item
        own_parents = set(it.parents or ())
        penalty = ap * authors[it.author] + sp * sources[it.source_kind]
        penalty += pp * sum(parents[p] for p in own_parents)
        authors[it.author] += 1
        sources[it.source_kind] += 1
        parents.update(own_parents)
        cb = None if s.contradicted_by is None else list(s.contradicted_by)
        out.append(
            construct(
                ScoredItem,
                {"item": it, "score": max(0.0, s.score - penalty), "contradicted_by": cb},
            )
        )
    out.sort(key=lambda s: s.score, reverse=True)
    return out


def _check_number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be finite and non-negative, got {value!r}")
    return float(value)


def pack(scored: Sequence[ScoredItem], budget: float, cost_fn: CostFn) -> list[ScoredItem]:
    """Greedy: take each item, in order, whose cost fits what is left of the budget."""
    remaining = _check_number(budget, "budget")
    out = []
    for s in scored:
        cost = _check_number(cost_fn(s.item), "cost_fn result")
        if cost <= remaining:
            out.append(s)
            remaining -= cost
    return out


def smart_retrieve(
    state: GraphState,
    *,
    budget: float,
    cost_fn: CostFn,
    weights: ScoreWeights | Mapping[str, Any],
    filter: MemoryFilter | Mapping[str, Any] | None = None,
    contradictions: ContradictionPolicy | None = None,
    diversity: DiversityOptions | Mapping[str, Any] | None = None,
) -> list[ScoredItem]:
    """Score -> contradiction policy -> diversity -> greedy budget pack."""
    if contradictions not in (None, "filter", "surface"):
        raise ValueError(f"unknown contradictions policy: {contradictions!r}")
    _check_number(budget, "budget")
    scored = get_scored_items(state, weights, {"pre": filter} if filter is not None else None)
    if contradictions == "filter":
        scored = filter_contradictions(state, scored)
    elif contradictions == "surface":
        scored = surface_contradictions(state, scored)
    if diversity is not None:
        scored = apply_diversity(scored, diversity)
    return pack(scored, budget, cost_fn)


def get_items_by_budget(
    state: GraphState,
    *,
    budget: float,
    cost_fn: CostFn,
    weights: ScoreWeights | Mapping[str, Any],
    filter: MemoryFilter | Mapping[str, Any] | None = None,
) -> list[ScoredItem]:
    """The budget-pack step alone: score, then greedily pack."""
    _check_number(budget, "budget")
    scored = get_scored_items(state, weights, {"pre": filter} if filter is not None else None)
    return pack(scored, budget, cost_fn)


__all__ = [
    "SupportNode",
    "apply_diversity",
    "filter_contradictions",
    "get_items_by_budget",
    "get_support_set",
    "get_support_tree",
    "pack",
    "scored_item",
    "smart_retrieve",
    "surface_contradictions",
]
