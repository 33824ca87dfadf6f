"""Filters and query options: MemoryFilter and its algebra, EdgeFilter, sort and paging."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.graph.aliases import SortField, SortOrder
from schemas.graph.scoring import DecayConfig

_FROZEN = ConfigDict(frozen=True, populate_by_name=True, serialize_by_alias=True)

NonNegInt = Annotated[int, Field(ge=0)]


class Range(BaseModel):
    """Inclusive bounds; an absent bound is open."""

    model_config = _FROZEN
    min: float | None = None
    max: float | None = None


class ScoreRanges(BaseModel):
    model_config = _FROZEN
    authority: Range | None = None
    conviction: Range | None = None
    importance: Range | None = None


class ParentsFilter(BaseModel):
    model_config = _FROZEN
    includes: str | None = None
    includes_any: list[str] | None = None
    includes_all: list[str] | None = None
    count: Range | None = None


class DecayFilter(BaseModel):
    model_config = _FROZEN
    config: DecayConfig
    min: Annotated[float, Field(ge=0.0, le=1.0)]


class CreatedFilter(BaseModel):
    """Timestamp window in ms: ``after <= ts < before``."""

    model_config = _FROZEN
    before: int | None = None
    after: int | None = None


class MemoryFilter(BaseModel):
    """All present conditions AND-combined; ``or_`` needs at least one sub-filter to match."""

    model_config = _FROZEN
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
    """One sort key; an unknown field is a ValueError (pydantic's ValidationError is one)."""

    model_config = _FROZEN
    field: SortField
    # The seed does not say; descending puts the most trusted/salient/recent first.
    order: SortOrder = "desc"


class QueryOptions(BaseModel):
    model_config = _FROZEN
    sort: SortOption | list[SortOption] | None = None
    limit: NonNegInt | None = None
    offset: NonNegInt | None = None


class ScoredQueryOptions(BaseModel):
    model_config = _FROZEN
    pre: MemoryFilter | None = None
    post: MemoryFilter | None = None
    min_score: float | None = None
    limit: NonNegInt | None = None
    offset: NonNegInt | None = None


class EdgeFilter(BaseModel):
    model_config = _FROZEN
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    kind: str | None = None
    min_weight: float | None = None
    active_only: bool | None = True


class DiversityOptions(BaseModel):
    model_config = _FROZEN
    author_penalty: float | None = None
    parent_penalty: float | None = None
    source_penalty: float | None = None


class ScoreAdjustment(BaseModel):
    """Deltas added to scores (results clamped to 0..1); absent deltas are not applied."""

    model_config = _FROZEN
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
