"""Result models of the memory-graph queries: scored items, contradictions, stale items, stats."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from schemas.graph.items import Edge, MemoryItem


class ScoredItem(BaseModel):
    """An item and its score. Not frozen: surface_contradictions annotates it in place."""

    item: MemoryItem
    score: float
    contradicted_by: list[MemoryItem] | None = None


class Contradiction(BaseModel):
    model_config = ConfigDict(frozen=True)
    a: MemoryItem
    b: MemoryItem
    edge: Edge | None = None


class StaleItem(BaseModel):
    """An item naming parents that are not in the graph (any more)."""

    model_config = ConfigDict(frozen=True)
    item: MemoryItem
    missing_parents: list[str]


class ItemStats(BaseModel):
    model_config = ConfigDict(frozen=True)
    total: int
    by_kind: dict[str, int]
    by_source_kind: dict[str, int]
    by_author: dict[str, int]
    by_scope: dict[str, int]
    with_parents: int
    root: int


class EdgeStats(BaseModel):
    model_config = ConfigDict(frozen=True)
    total: int
    active: int
    by_kind: dict[str, int]


class GraphStats(BaseModel):
    model_config = ConfigDict(frozen=True)
    items: ItemStats
    edges: EdgeStats


__all__ = [
    "Contradiction",
    "EdgeStats",
    "GraphStats",
    "ItemStats",
    "ScoredItem",
    "StaleItem",
]
