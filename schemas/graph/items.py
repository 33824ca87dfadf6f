"""MemoryItem and Edge, the nodes and typed links of the memory graph, and their factories."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from schemas.graph.errors import InvalidTimestampError
from schemas.graph.ids import now_ms, safe_extract_timestamp, uuid7

Score = Annotated[float, Field(ge=0.0, le=1.0)]


class MemoryItem(BaseModel):
    """A scored, provenance-tracked memory node (frozen; edits go through model_copy)."""

    model_config = ConfigDict(frozen=True)

    id: str
    scope: str
    kind: str
    content: dict[str, Any]
    author: str
    source_kind: str
    parents: list[str] | None = None
    authority: Score
    conviction: Score | None = None
    importance: Score | None = None
    created_at: int | None = None
    intent_id: str | None = None
    task_id: str | None = None
    meta: dict[str, Any] | None = None


class Edge(BaseModel):
    """A typed, scored link between two items; ``from_`` is ``"from"`` on the wire (dump
    with ``by_alias=True``; a plain ``model_dump()`` says ``from_``, as the seed's does)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    edge_id: str
    from_: str = Field(alias="from")
    to: str
    kind: str
    weight: Score | None = None
    author: str
    source_kind: str
    authority: Score
    active: bool
    meta: dict[str, Any] | None = None


def item_timestamp(item: MemoryItem) -> int | None:
    """created_at when set, else the id's UUIDv7 timestamp, else None."""
    ts = item.created_at
    if ts is not None:
        return ts
    return safe_extract_timestamp(item.id)


def no_timestamp(item: MemoryItem) -> InvalidTimestampError:
    """The error of a query that needs the time of an item that has none (the seed's)."""
    return InvalidTimestampError(
        f'Cannot determine timestamp for item "{item.id}": set created_at or use a UUIDv7 id'
    )


def require_timestamp(item: MemoryItem) -> int:
    """``item_timestamp``, or InvalidTimestampError when the item has no known time."""
    ts = item.created_at
    if ts is not None:
        return ts
    ts = safe_extract_timestamp(item.id)
    if ts is None:
        raise no_timestamp(item)
    return ts


def create_memory_item(
    *,
    scope: str,
    kind: str,
    content: dict[str, Any],
    author: str,
    source_kind: str,
    authority: float,
    id: str | None = None,
    parents: list[str] | None = None,
    conviction: float | None = None,
    importance: float | None = None,
    created_at: int | None = None,
    intent_id: str | None = None,
    task_id: str | None = None,
    meta: dict[str, Any] | None = None,
) -> MemoryItem:
    """A validated MemoryItem; mints a UUIDv7 id (now) when omitted, and fills created_at
    when omitted from the id's UUIDv7 timestamp, else the clock."""
    if id is None:
        id = uuid7()  # the seed mints from the clock, whatever created_at says
    if created_at is None:
        ts = safe_extract_timestamp(id)
        created_at = ts if ts is not None else now_ms()
    return MemoryItem(
        id=id,
        scope=scope,
        kind=kind,
        content=content,
        author=author,
        source_kind=source_kind,
        parents=parents,
        authority=authority,
        conviction=conviction,
        importance=importance,
        created_at=created_at,
        intent_id=intent_id,
        task_id=task_id,
        meta=meta,
    )


def create_edge(
    *,
    from_: str,
    to: str,
    kind: str,
    author: str,
    source_kind: str,
    authority: float,
    edge_id: str | None = None,
    active: bool | None = None,
    weight: float | None = None,
    meta: dict[str, Any] | None = None,
) -> Edge:
    """A validated Edge; active defaults to True and edge_id to a fresh UUIDv7."""
    # Edge takes its field names too (populate_by_name); typing knows only the alias "from".
    return Edge(  # type: ignore[call-arg]
        edge_id=uuid7() if edge_id is None else edge_id,
        from_=from_,
        to=to,
        kind=kind,
        weight=weight,
        author=author,
        source_kind=source_kind,
        authority=authority,
        active=True if active is None else active,
        meta=meta,
    )


__all__ = [
    "Edge",
    "MemoryItem",
    "create_edge",
    "create_memory_item",
    "item_timestamp",
    "no_timestamp",
    "require_timestamp",
]
