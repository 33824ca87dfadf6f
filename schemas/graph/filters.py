"""Filters and query options: MemoryFilter and its algebra, EdgeFilter, sort and paging."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.graph.scoring import DecayConfig
from schemas.graph.vocabulary import SortOrder

# As the seed's models: mutable, serialized under the Python names (``from_``, ``not_``,
# ``or_``) unless ``by_alias=True`` is asked; the filters with a keyword field also accept
# it by its Python name.
_PLAIN = ConfigDict()
_BY_NAME = ConfigDict(populate_by_name=True)

NonNegInt = Annotated[int, Field(ge=0)]


class Range(BaseModel):
    """Inclusive bounds; an absent bound is open."""

    model_config = _PLAIN
    min: float | None = None
    max: float | None = None


class ScoreRanges(BaseModel):
    model_config = _PLAIN
    authority: Range | None = None
    conviction: Range | None = None
    importance: Range | None = None


class ParentsFilter(BaseModel):
    model_config = _PLAIN
    includes: str | None = None
    includes_any: list[str] | None = None
    includes_all: list[str] | None = None
    count: Range | None = None


class DecayFilter(BaseModel):
    model_config = _PLAIN
    config: DecayConfig
    min: Annotated[float, Field(ge=0.0, le=1.0)]


class CreatedFilter(BaseModel):
    """Timestamp window in ms: ``after <= ts < before``."""

    model_config = _PLAIN
    before: int | None = None
    after: int | None = None


class MemoryFilter(BaseModel):
    """All present conditions AND-combined; ``or_`` needs at least one sub-filter to match."""

    model_config = _BY_NAME
    ids: list[str] | None = None
    scope: str | None = None
    scope_prefix: str | None = None
    author: str | None = None
    kind: str | None = None
    source_kind: str | None = None
    range: ScoreRanges | None = None
    intent_id: str | None = None
    intent_ids: list[str] | None = None
    task_id: str | None = None
    task_ids: list[str] | None = None
    has_parent: str | None = None
    is_root: bool | None = None
    parents: ParentsFilter | None = None
    decay: DecayFilter | None = None
    created: CreatedFilter | None = None
    not_: MemoryFilter | None = Field(default=None, alias="not")
    meta: dict[str, Any] | None = None
    meta_has: list[str] | None = None
    or_: list[MemoryFilter] | None = Field(default=None, alias="or")


class SortOption(BaseModel):
    """One sort key. ``field`` is any string, as in the seed: an unknown one is a
    ValueError when a sort uses it (on one item or more), not at validation."""

    model_config = _PLAIN
    field: str
    order: SortOrder


class QueryOptions(BaseModel):
    model_config = _PLAIN
    sort: SortOption | list[SortOption] | None = None
    limit: NonNegInt | None = None
    offset: NonNegInt | None = None


class ScoredQueryOptions(BaseModel):
    model_config = _PLAIN
    pre: MemoryFilter | None = None
    post: MemoryFilter | None = None
    min_score: float | None = None
    limit: NonNegInt | None = None
    offset: NonNegInt | None = None


class EdgeFilter(BaseModel):
    model_config = _BY_NAME
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    kind: str | None = None
    min_weight: float | None = None
    active_only: bool | None = None  # None: True, as the seed reads it


class DiversityOptions(BaseModel):
    model_config = _PLAIN
    author_penalty: float | None = None
    parent_penalty: float | None = None
    source_penalty: float | None = None


class ScoreAdjustment(BaseModel):
    """Deltas added to scores (results clamped to 0..1); absent deltas are not applied."""

    model_config = _PLAIN
    authority: float | None = None
    conviction: float | None = None
    importance: float | None = None


__all__ = [
    "CreatedFilter",
    "DecayFilter",
    "DiversityOptions",
    "EdgeFilter",
    "MemoryFilter",
    "ParentsFilter",
    "QueryOptions",
    "Range",
    "ScoreAdjustment",
    "ScoreRanges",
    "ScoredQueryOptions",
    "SortOption",
]
