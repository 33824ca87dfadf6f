"""JSON persistence of a GraphState in the TypeScript library's on-disk shape.

``{"items": [[id, item], ...], "edges": [[id, edge], ...]}`` (a serialized JS Map), unset
optionals omitted, an edge's ``from_`` under its wire name ``"from"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from schemas.graph.items import Edge, MemoryItem

if TYPE_CHECKING:
    from projector.graph.state import GraphState

SerializedGraphState = dict[str, list[list[Any]]]


def _dump(model: MemoryItem | Edge) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def to_json(state: GraphState) -> SerializedGraphState:
    return {
        "items": [[k, _dump(v)] for k, v in state.items.items()],
        "edges": [[k, _dump(v)] for k, v in state.edges.items()],
    }


def from_json(data: Mapping[str, Any]) -> GraphState:
    """A GraphState from ``to_json`` output (validated; missing keys mean empty).

    ValueError when an entry's key differs from its item's id / edge's edge_id: the graph
    resolves parents and edges by those ids, so a mismatch would corrupt it.
    """
    # Imported here: projector depends on schemas, not the other way round at import time.
    from projector.graph.pmap import OrderedPMap
    from projector.graph.state import GraphState

    items = []
    for key, raw in data.get("items") or []:
        item = MemoryItem.model_validate(raw)
        if item.id != key:
            raise ValueError(f"item entry key {key!r} != item id {item.id!r}")
        items.append((key, item))
    edges = []
    for key, raw in data.get("edges") or []:
        edge = Edge.model_validate(raw)
        if edge.edge_id != key:
            raise ValueError(f"edge entry key {key!r} != edge_id {edge.edge_id!r}")
        edges.append((key, edge))
    return GraphState(items=OrderedPMap(items), edges=OrderedPMap(edges))


def stringify(state: GraphState, pretty: bool = False) -> str:
    """JSON text: compact as JSON.stringify(x), or indented by 2 spaces."""
    if pretty:
        return json.dumps(to_json(state), indent=2, ensure_ascii=False)
    return json.dumps(to_json(state), separators=(",", ":"), ensure_ascii=False)


def parse(json_str: str) -> GraphState:
    return from_json(json.loads(json_str))


__all__ = ["SerializedGraphState", "from_json", "parse", "stringify", "to_json"]
