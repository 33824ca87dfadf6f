"""Aggregate counts over a GraphState."""

from __future__ import annotations

from collections import Counter
from typing import Any

from projector.graph.state import GraphState
from schemas.graph.results import EdgeStats, GraphStats, ItemStats


def get_stats(state: GraphState) -> GraphStats:
    """Item counts by kind/source/author/scope and edge counts (all edges, and active)."""
    items: Any = state.items
    edges: Any = state.edges
    values = items.values_tuple()
    with_parents = sum(1 for it in values if it.parents)
    item_stats = ItemStats(
        total=len(values),
        by_kind=dict(Counter(it.kind for it in values)),
        by_source_kind=dict(Counter(it.source_kind for it in values)),
        by_author=dict(Counter(it.author for it in values)),
        by_scope=dict(Counter(it.scope for it in values)),
        with_parents=with_parents,
        root=len(values) - with_parents,
    )
    evalues = edges.values_tuple()
    edge_stats = EdgeStats(
        total=len(evalues),
        active=sum(1 for e in evalues if e.active),
        by_kind=dict(Counter(e.kind for e in evalues)),
    )
    return GraphStats(items=item_stats, edges=edge_stats)


__all__ = ["get_stats"]
