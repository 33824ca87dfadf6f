"""Result models of the memory-graph queries: scored items, contradictions, stale items, stats."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel

from schemas.graph.items import Edge, MemoryItem


class ScoredItem(BaseModel):
    """An item and its score. Not frozen: surface_contradictions annotates it in place."""

    item: MemoryItem
    score: float
    contradicted_by: list[MemoryItem] | None = None


# The seed's result records are NamedTuples: they unpack, index and compare as tuples.


class Contradiction(NamedTuple):
    a: MemoryItem
    b: MemoryItem
    edge: Edge | None = None


class StaleItem(NamedTuple):
    """An item naming parents that are not in the graph (any more)."""

    item: MemoryItem
    missing_parents: list[str]


class ItemStats(NamedTuple):
    total: int
    by_kind: dict[str, int]
    by_source_kind: dict[str, int]
    by_author: dict[str, int]
    by_scope: dict[str, int]
    with_parents: int
    root: int


class EdgeStats(NamedTuple):
    total: int
    active: int
    by_kind: dict[str, int]


class GraphStats(NamedTuple):
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
