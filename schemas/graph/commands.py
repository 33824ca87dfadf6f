"""The six memory-graph commands (a discriminated union on ``type``) and lifecycle events."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.graph.items import Edge, MemoryItem
from schemas.graph.vocabulary import LifecycleEventType

# Mutable, as the seed's commands and events are.
_FROZEN = ConfigDict()


class MemoryCreate(BaseModel):
    model_config = _FROZEN
    type: Literal["memory.create"] = "memory.create"
    item: MemoryItem


class MemoryUpdate(BaseModel):
    model_config = _FROZEN
    type: Literal["memory.update"] = "memory.update"
    item_id: str
    partial: dict[str, Any]
    author: str
    reason: str | None = None
    basis: dict[str, Any] | None = None


class MemoryRetract(BaseModel):
    model_config = _FROZEN
    type: Literal["memory.retract"] = "memory.retract"
    item_id: str
    author: str
    reason: str | None = None


class EdgeCreate(BaseModel):
    model_config = _FROZEN
    type: Literal["edge.create"] = "edge.create"
    edge: Edge


class EdgeUpdate(BaseModel):
    model_config = _FROZEN
    type: Literal["edge.update"] = "edge.update"
    edge_id: str
    partial: dict[str, Any]
    author: str
    reason: str | None = None


class EdgeRetract(BaseModel):
    model_config = _FROZEN
    type: Literal["edge.retract"] = "edge.retract"
    edge_id: str
    author: str
    reason: str | None = None


MemoryCommand = Annotated[
    MemoryCreate | MemoryUpdate | MemoryRetract | EdgeCreate | EdgeUpdate | EdgeRetract,
    Field(discriminator="type"),
]
MemoryCommandAdapter: TypeAdapter[MemoryCommand] = TypeAdapter(MemoryCommand)

MEMORY_COMMAND_TYPES: tuple[type[BaseModel], ...] = (
    MemoryCreate,
    MemoryUpdate,
    MemoryRetract,
    EdgeCreate,
    EdgeUpdate,
    EdgeRetract,
)


class MemoryLifecycleEvent(BaseModel):
    """What a memory command did: one event per created/updated/retracted item or edge."""

    model_config = _FROZEN
    namespace: Literal["memory"] = "memory"
    type: LifecycleEventType
    item: MemoryItem | None = None
    edge: Edge | None = None
    cause_type: str | None = None


__all__ = [
    "EdgeCreate",
    "EdgeRetract",
    "EdgeUpdate",
    "MEMORY_COMMAND_TYPES",
    "MemoryCommand",
    "MemoryCommandAdapter",
    "MemoryCreate",
    "MemoryLifecycleEvent",
    "MemoryRetract",
    "MemoryUpdate",
]
