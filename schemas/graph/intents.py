"""Intent graph wire models: the entity, its commands, filter and lifecycle events.

Tags, enum values and JSON keys are byte-identical to the TypeScript ``@ai2070/memex``
library so a Python and a TS service can share one log.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "Intent",
    "IntentStatus",
    "IntentLifecycleEventType",
    "IntentCreate",
    "IntentUpdate",
    "IntentComplete",
    "IntentCancel",
    "IntentPause",
    "IntentResume",
    "IntentCommand",
    "IntentCommandAdapter",
    "IntentFilter",
    "IntentLifecycleEvent",
]

IntentStatus = Literal["active", "paused", "completed", "cancelled"]

IntentLifecycleEventType = Literal[
    "intent.created",
    "intent.updated",
    "intent.completed",
    "intent.cancelled",
    "intent.paused",
    "intent.resumed",
]

_FROZEN = ConfigDict(frozen=True)
# Commands, filters and lifecycle events are mutable, as the seed's are; entities frozen.
_PLAIN = ConfigDict()


class Intent(BaseModel):
    """An active goal. Frozen: an edit is a new instance via ``model_copy``."""

    model_config = _FROZEN

    id: str
    parent_id: str | None = None
    label: str
    description: str | None = None
    priority: float = Field(ge=0.0, le=1.0)
    owner: str
    status: IntentStatus
    context: dict[str, Any] | None = None
    root_memory_ids: list[str] | None = None
    meta: dict[str, Any] | None = None


class IntentCreate(BaseModel):
    model_config = _PLAIN

    type: Literal["intent.create"] = "intent.create"
    intent: Intent


class IntentUpdate(BaseModel):
    """Merge ``partial`` into the intent; ``id`` and ``status`` keys are ignored."""

    model_config = _PLAIN

    type: Literal["intent.update"] = "intent.update"
    intent_id: str
    partial: dict[str, Any]
    author: str
    reason: str | None = None


class IntentComplete(BaseModel):
    model_config = _PLAIN

    type: Literal["intent.complete"] = "intent.complete"
    intent_id: str
    author: str
    reason: str | None = None


class IntentCancel(BaseModel):
    model_config = _PLAIN

    type: Literal["intent.cancel"] = "intent.cancel"
    intent_id: str
    author: str
    reason: str | None = None


class IntentPause(BaseModel):
    model_config = _PLAIN

    type: Literal["intent.pause"] = "intent.pause"
    intent_id: str
    author: str
    reason: str | None = None


class IntentResume(BaseModel):
    model_config = _PLAIN

    type: Literal["intent.resume"] = "intent.resume"
    intent_id: str
    author: str
    reason: str | None = None


IntentCommand = Annotated[
    IntentCreate | IntentUpdate | IntentComplete | IntentCancel | IntentPause | IntentResume,
    Field(discriminator="type"),
]

IntentCommandAdapter: TypeAdapter[IntentCommand] = TypeAdapter(IntentCommand)


class IntentFilter(BaseModel):
    """All present conditions are AND-combined; an empty filter matches every intent."""

    model_config = _PLAIN

    owner: str | None = None
    status: IntentStatus | None = None
    statuses: list[IntentStatus] | None = None
    min_priority: float | None = None
    # Matches intents whose root_memory_ids contain this memory id.
    has_memory_id: str | None = None
    parent_id: str | None = None
    # True: no parent_id; False: has a parent_id.
    is_root: bool | None = None


class IntentLifecycleEvent(BaseModel):
    model_config = _PLAIN

    namespace: Literal["intent"] = "intent"
    type: IntentLifecycleEventType
    intent: Intent
    cause_type: str
