"""Task graph wire models: the entity, its commands, filter and lifecycle events.

Tags, enum values and JSON keys are byte-identical to the TypeScript ``@ai2070/memex``
library so a Python and a TS service can share one log.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "Task",
    "TaskStatus",
    "TaskLifecycleEventType",
    "TaskCreate",
    "TaskUpdate",
    "TaskStart",
    "TaskComplete",
    "TaskFail",
    "TaskCancel",
    "TaskCommand",
    "TaskCommandAdapter",
    "TaskFilter",
    "TaskLifecycleEvent",
]

TaskStatus = Literal["pending", "running", "completed", "failed", "cancelled"]

TaskLifecycleEventType = Literal[
    "task.created",
    "task.updated",
    "task.started",
    "task.completed",
    "task.failed",
    "task.cancelled",
]

_FROZEN = ConfigDict(frozen=True)
# Commands, filters and lifecycle events are mutable, as the seed's are; entities frozen.
_PLAIN = ConfigDict()


class Task(BaseModel):
    """A unit of work tied to an intent. Frozen: an edit is a new instance."""

    model_config = _FROZEN

    id: str
    intent_id: str
    parent_id: str | None = None
    action: str
    label: str | None = None
    status: TaskStatus
    priority: float = Field(ge=0.0, le=1.0)
    context: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    input_memory_ids: list[str] | None = None
    output_memory_ids: list[str] | None = None
    agent_id: str | None = None
    attempt: int | None = Field(default=None, ge=0)
    meta: dict[str, Any] | None = None


class TaskCreate(BaseModel):
    model_config = _PLAIN

    type: Literal["task.create"] = "task.create"
    task: Task


class TaskUpdate(BaseModel):
    """Merge ``partial`` into the task; ``id`` and ``status`` keys are ignored."""

    model_config = _PLAIN

    type: Literal["task.update"] = "task.update"
    task_id: str
    partial: dict[str, Any]
    author: str


class TaskStart(BaseModel):
    model_config = _PLAIN

    type: Literal["task.start"] = "task.start"
    task_id: str
    agent_id: str | None = None


class TaskComplete(BaseModel):
    model_config = _PLAIN

    type: Literal["task.complete"] = "task.complete"
    task_id: str
    result: dict[str, Any] | None = None
    output_memory_ids: list[str] | None = None


class TaskFail(BaseModel):
    model_config = _PLAIN

    type: Literal["task.fail"] = "task.fail"
    task_id: str
    error: str
    # Advisory: travels with the command on the log; the seed's machine always allows a retry.
    retryable: bool | None = None


class TaskCancel(BaseModel):
    model_config = _PLAIN

    type: Literal["task.cancel"] = "task.cancel"
    task_id: str
    reason: str | None = None


TaskCommand = Annotated[
    TaskCreate | TaskUpdate | TaskStart | TaskComplete | TaskFail | TaskCancel,
    Field(discriminator="type"),
]

TaskCommandAdapter: TypeAdapter[TaskCommand] = TypeAdapter(TaskCommand)


class TaskFilter(BaseModel):
    """All present conditions are AND-combined; an empty filter matches every task."""

    model_config = _PLAIN

    intent_id: str | None = None
    action: str | None = None
    status: TaskStatus | None = None
    statuses: list[TaskStatus] | None = None
    agent_id: str | None = None
    min_priority: float | None = None
    has_input_memory_id: str | None = None
    has_output_memory_id: str | None = None
    parent_id: str | None = None
    # True: no parent_id; False: has a parent_id.
    is_root: bool | None = None


class TaskLifecycleEvent(BaseModel):
    model_config = _PLAIN

    namespace: Literal["task"] = "task"
    type: TaskLifecycleEventType
    task: Task
    cause_type: str
