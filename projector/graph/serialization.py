"""JSON persistence of a GraphState in the TypeScript library's on-disk shape.

``{"items": [[id, item], ...], "edges": [[id, edge], ...]}`` (a serialized JS Map), unset
optionals omitted, an edge's ``from_`` under its wire name ``"from"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from projector.graph.pmap import OrderedPMap
from projector.graph.state import GraphState
from schemas.graph.items import Edge, MemoryItem

SerializedGraphState = dict[str, list[list[Any]]]


def _dump(model: MemoryItem | Edge) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def to_json(state: GraphState) -> SerializedGraphState:
    return {
        "items": [[k, _dump(v)] for k, v in state.items.items()],
        "edges": [[k, _dump(v)] for k, v in state.edges.items()],
    }


def from_json(data: Mapping[str, Any]) -> GraphState:
    """A GraphState from ``to_json`` output (validated; missing keys mean empty). Each entry
    is kept under its key, as the seed keeps it, even if the key is not the entity's id."""
    items = [(key, MemoryItem.model_validate(raw)) for key, raw in data.get("items") or []]
    edges = [(key, Edge.model_validate(raw)) for key, raw in data.get("edges") or []]
    return GraphState(items=OrderedPMap(items), edges=OrderedPMap(edges))


def stringify(state: GraphState, pretty: bool = False) -> str:
    """JSON text: compact, or indented by 2 spaces; non-ASCII escaped, as the seed writes
    it (``json.dumps``' default)."""
    if pretty:
        return json.dumps(to_json(state), indent=2)
    return json.dumps(to_json(state), separators=(",", ":"))


def parse(json_str: str) -> GraphState:
    return from_json(json.loads(json_str))


__all__ = ["SerializedGraphState", "from_json", "parse", "stringify", "to_json"]
