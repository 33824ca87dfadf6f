"""Edge queries, answered from the endpoint and kind indexes when the filter allows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from projector.graph.pmap import sset_iter
from projector.graph.state import GraphState, in_edge_order
from schemas.graph.coerce import coerce_opt
from schemas.graph.filters import EdgeFilter
from schemas.graph.items import Edge


def get_edges(
    state: GraphState, filter: EdgeFilter | Mapping[str, Any] | None = None
) -> list[Edge]:
    """Edges matching ``filter`` in insertion order; no filter: only active edges."""
    f = coerce_opt(EdgeFilter, filter) or EdgeFilter()
    edges: Any = state.edges
    idx = state.index
    active_only = f.active_only is not False  # None means the default, True
    if f.from_ is not None:
        source = [edges[e] for e in in_edge_order(state, sset_iter(idx.outgoing.get(f.from_)))]
    elif f.to is not None:
        source = [edges[e] for e in in_edge_order(state, sset_iter(idx.incoming.get(f.to)))]
    elif f.kind is not None and active_only:
        source = [edges[e] for e in in_edge_order(state, sset_iter(idx.active_by_kind.get(f.kind)))]
    else:
        source = list(edges.values_tuple())
    out = []
    for e in source:
        if active_only and not e.active:
            continue
        if f.from_ is not None and e.from_ != f.from_:
            continue
        if f.to is not None and e.to != f.to:
            continue
        if f.kind is not None and e.kind != f.kind:
            continue
        if f.min_weight is not None and (e.weight is None or e.weight < f.min_weight):
            continue  # an edge without a weight fails a weight threshold
        out.append(e)
    return out


def get_edge_by_id(state: GraphState, edge_id: str) -> Edge | None:
    return state.edges.get(edge_id)


__all__ = ["get_edge_by_id", "get_edges"]
