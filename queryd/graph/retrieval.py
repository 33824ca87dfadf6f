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
    """The provenance tree of an item, as the seed builds it: depth first, parents in the
    order the item lists them (repeats kept, absent ones left out); an item already
    expanded anywhere in the tree reappears as a leaf (``m1[m2[m1[]]]``) instead of being
    expanded again. Iterative: no recursion limit on deep chains."""
    items = state.items
    item = items.get(item_id)
    if item is None:
        return None
    root = SupportNode(item)
    expanded = {item_id}
    stack = [(root, iter(item.parents or ()))]
    while stack:
        node, parents = stack[-1]
        for p in parents:
            parent = items.get(p)
            if parent is None:
                continue
            child = SupportNode(parent)
            node.parents.append(child)
            if p not in expanded:
                expanded.add(p)
                stack.append((child, iter(parent.parents or ())))
                break
        else:
            stack.pop()
    return root


def get_support_set(state: GraphState, item_id: str) -> list[MemoryItem]:
    """The support tree flattened in pre-order, each item once: the item itself first,
    then its ancestors."""
    root = get_support_tree(state, item_id)
    if root is None:
        return []
    out: list[MemoryItem] = []
    seen: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node.item.id not in seen:
            seen.add(node.item.id)
            out.append(node.item)
        stack.extend(reversed(node.parents))
    return out


def _superseded(state: GraphState) -> set[str]:
    edges = state.edges
    return {edges[e].to for e in active_edge_ids(state, "SUPERSEDES")}


def _contradiction_edges(state: GraphState, present: Mapping[str, Any]) -> list[Any]:
    """Active CONTRADICTS edges (in edge order) whose both ends are in ``present``."""
    edges = state.edges
    out = []
    for eid in active_edge_ids(state, "CONTRADICTS"):
        e = edges[eid]
        if e.from_ in present and e.to in present:
            out.append(e)
    return out


def filter_contradictions(state: GraphState, scored: Sequence[ScoredItem]) -> list[ScoredItem]:
    """Drop superseded items, then the lower-scoring side of each unresolved contradiction.

    As the seed settles them: an id's score is that of its last occurrence; pairs are
    settled from the highest-scoring down (then by edge_id), a pair one of whose sides is
    already dropped being settled; on equal scores the side whose id sorts later is
    dropped, so a self-contradiction drops its item. Every occurrence of a dropped id goes.
    """
    gone = _superseded(state)
    kept = [s for s in scored if s.item.id not in gone]
    score = {s.item.id: s.score for s in kept}
    pairs = _contradiction_edges(state, score)
    pairs.sort(key=lambda e: (-max(score[e.from_], score[e.to]), e.edge_id))
    dropped: set[str] = set()
    for e in pairs:
        a, b = e.from_, e.to
        if a in dropped or b in dropped:
            continue
        sa, sb = score[a], score[b]
        if sa > sb:
            dropped.add(b)
        elif sb > sa:
            dropped.add(a)
        else:
            dropped.add(max(a, b))
    return [s for s in kept if s.item.id not in dropped]


def surface_contradictions(state: GraphState, scored: Sequence[ScoredItem]) -> list[ScoredItem]:
    """Drop superseded items; keep both sides of each contradiction. Returns new
    ScoredItems (the input is left untouched), each side's ``contradicted_by`` naming the
    other, once, in edge order. As in the seed, an id listed twice is annotated on its
    last occurrence only, and self-edges are ignored."""
    gone = _superseded(state)
    out = [
        scored_item_with(s.item, s.score, s.contradicted_by)
        for s in scored
        if s.item.id not in gone
    ]
    by_id = {s.item.id: s for s in out}
    for e in _contradiction_edges(state, by_id):
        if e.from_ == e.to:
            continue
        for here, there in ((e.from_, e.to), (e.to, e.from_)):
            s = by_id[here]
            other = by_id[there].item
            current = s.contradicted_by or []
            if all(o.id != there for o in current):
                s.contradicted_by = [*current, other]
    return out


def scored_item_with(item: MemoryItem, score: float, contradicted_by: Any) -> ScoredItem:
    return construct(
        ScoredItem,
        {
            "item": item,
            "score": score,
            "contradicted_by": None if contradicted_by is None else list(contradicted_by),
        },
    )


def apply_diversity(
    scored: Sequence[ScoredItem], options: DiversityOptions | Mapping[str, Any]
) -> list[ScoredItem]:
    """Subtract, item by item in the given order, a penalty per earlier occurrence of the
    author, of the source kind and of each parent id (every occurrence counts, repeats
    inside one item's ``parents`` included, as in the seed); clamp at 0; re-sort by score
    descending (stable). Returns new ScoredItems; the inputs are not modified."""
    o = coerce(DiversityOptions, options)
    ap, pp, sp = o.author_penalty or 0.0, o.parent_penalty or 0.0, o.source_penalty or 0.0
    authors: Counter[str] = Counter()
    parents: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    out: list[ScoredItem] = []
    for s in scored:
        it = s.item
        penalty = ap * authors[it.author] + sp * sources[it.source_kind]
        for p in it.parents or ():
            penalty += pp * parents[p]
            parents[p] += 1
        authors[it.author] += 1
        sources[it.source_kind] += 1
        out.append(scored_item_with(it, max(0.0, s.score - penalty), s.contradicted_by))
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
