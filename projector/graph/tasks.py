"""Task graph: state, factories and the pure reducer ``apply_task_command``.

Persistent structures make a command O(log n) and leave the input state untouched. The
state keeps two derived indexes (intent_id -> task ids, parent_id -> task ids) so that
``get_tasks_by_intent`` and ``get_child_tasks`` never scan every task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from projector.graph.node_index import Index, build_index, merge_partial, reindex
from projector.graph.pmap import EMPTY, OrderedPMap
from schemas.graph.errors import DuplicateTaskError, InvalidTaskTransitionError, TaskNotFoundError
from schemas.graph.ids import uuid7
from schemas.graph.tasks import (
    Task,
    TaskCancel,
    TaskCommand,
    TaskCommandAdapter,
    TaskComplete,
    TaskCreate,
    TaskFail,
    TaskLifecycleEvent,
    TaskLifecycleEventType,
    TaskStart,
    TaskStatus,
    TaskUpdate,
)

__all__ = [
    "TaskState",
    "TaskResult",
    "create_task_state",
    "create_task",
    "apply_task_command",
]


@dataclass(frozen=True)
class TaskState:
    """The task graph. ``tasks``: read-only, insertion-ordered id -> Task.

    ``by_intent`` and ``by_parent`` are derived indexes, rebuilt when omitted, so
    ``TaskState(tasks={...})`` works.
    """

    tasks: Mapping[str, Task] = field(default_factory=OrderedPMap)
    by_intent: Index | None = field(default=None, repr=False, compare=False)
    by_parent: Index | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.tasks, OrderedPMap) or self.tasks is EMPTY:
            object.__setattr__(self, "tasks", OrderedPMap(self.tasks))
        if self.by_intent is None:
            object.__setattr__(self, "by_intent", build_index(self.tasks, "intent_id"))
        if self.by_parent is None:
            object.__setattr__(self, "by_parent", build_index(self.tasks, "parent_id"))
        object.__setattr__(self, "_stamp", self.tasks.version())  # type: ignore[attr-defined]


def task_indexes(state: TaskState) -> tuple[Index, Index]:
    """``(state.by_intent, state.by_parent)``, rebuilt first if ``state.tasks`` was
    assigned to (as the seed's dict may be) since they were made."""
    tasks: Any = state.tasks
    # (No stamp: a state pickled before maps took assignment; its index holds.)
    if tasks.version() != state.__dict__.get("_stamp", tasks.version()):
        object.__setattr__(state, "by_intent", build_index(tasks, "intent_id"))
        object.__setattr__(state, "by_parent", build_index(tasks, "parent_id"))
        object.__setattr__(state, "_stamp", tasks.version())
    assert state.by_intent is not None and state.by_parent is not None
    return state.by_intent, state.by_parent


class TaskResult(NamedTuple):
    state: TaskState
    events: list[TaskLifecycleEvent]


def create_task_state() -> TaskState:
    """A new empty task graph."""
    return TaskState()


def create_task(
    *,
    intent_id: str,
    action: str,
    priority: float,
    id: str | None = None,
    parent_id: str | None = None,
    label: str | None = None,
    status: TaskStatus | None = None,
    context: dict[str, Any] | None = None,
    result: Any = None,
    error: str | None = None,
    input_memory_ids: list[str] | None = None,
    output_memory_ids: list[str] | None = None,
    agent_id: str | None = None,
    attempt: int | None = None,
    meta: dict[str, Any] | None = None,
) -> Task:
    """A validated Task; ``id`` defaults to a UUIDv7, status to "pending", attempt to 0."""
    return Task(
        id=id if id is not None else uuid7(),
        intent_id=intent_id,
        parent_id=parent_id,
        action=action,
        label=label,
        status=status if status is not None else "pending",
        priority=priority,
        context=context,
        result=result,
        error=error,
        input_memory_ids=input_memory_ids,
        output_memory_ids=output_memory_ids,
        agent_id=agent_id,
        attempt=attempt if attempt is not None else 0,
        meta=meta,
    )


# command tag -> (statuses it may leave, status it enters, event it emits).
# "failed" is not terminal (it can be retried), so it may still be cancelled.
_TRANSITIONS: dict[str, tuple[frozenset[str], TaskStatus, TaskLifecycleEventType]] = {
    "task.start": (frozenset({"pending", "failed"}), "running", "task.started"),
    "task.complete": (frozenset({"running"}), "completed", "task.completed"),
    "task.fail": (frozenset({"running"}), "failed", "task.failed"),
    "task.cancel": (frozenset({"pending", "running", "failed"}), "cancelled", "task.cancelled"),
}


def _event(type_: TaskLifecycleEventType, task: Task, cause: str) -> TaskLifecycleEvent:
    return TaskLifecycleEvent.model_construct(
        namespace="task", type=type_, task=task, cause_type=cause
    )


def _with(state: TaskState, old: Task | None, new: Task) -> TaskState:
    by_intent, by_parent = task_indexes(state)
    by_intent = reindex(by_intent, "intent_id", old, new)
    by_parent = reindex(by_parent, "parent_id", old, new)
    tasks = state.tasks
    assert isinstance(tasks, OrderedPMap)
    return TaskState(tasks=tasks.set(new.id, new), by_intent=by_intent, by_parent=by_parent)


def put_task(state: TaskState, task: Task) -> TaskState:
    """Insert or wholly replace ``task`` (no checks, no events): for import_slice."""
    return _with(state, state.tasks.get(task.id), task)


def _transition_update(cmd: TaskCommand, task: Task) -> dict[str, Any]:
    if isinstance(cmd, TaskStart):
        update: dict[str, Any] = {"attempt": (task.attempt or 0) + 1}
        if cmd.agent_id is not None:
            update["agent_id"] = cmd.agent_id
        return update
    if isinstance(cmd, TaskComplete):
        update = {}
        if cmd.result is not None:
            update["result"] = cmd.result
        if cmd.output_memory_ids is not None:
            update["output_memory_ids"] = cmd.output_memory_ids
        return update
    if isinstance(cmd, TaskFail):
        return {"error": cmd.error}
    assert isinstance(cmd, TaskCancel)
    return {}


def apply_task_command(state: TaskState, cmd: TaskCommand | Mapping[str, Any]) -> TaskResult:
    """Apply one task command; returns the new state and its lifecycle events.

    Raises DuplicateTaskError, TaskNotFoundError or InvalidTaskTransitionError; a
    malformed dict raises pydantic.ValidationError. ``state`` is never modified.
    """
    if isinstance(cmd, Mapping):
        cmd = TaskCommandAdapter.validate_python(cmd)

    if isinstance(cmd, TaskCreate):
        task = cmd.task
        if task.id in state.tasks:
            raise DuplicateTaskError(task.id)
        return TaskResult(_with(state, None, task), [_event("task.created", task, cmd.type)])

    existing = state.tasks.get(cmd.task_id)
    if existing is None:
        raise TaskNotFoundError(cmd.task_id)

    if isinstance(cmd, TaskUpdate):
        updated = existing.model_copy(update=merge_partial(existing, cmd.partial))
        return TaskResult(
            _with(state, existing, updated), [_event("task.updated", updated, cmd.type)]
        )

    allowed, to_status, event_type = _TRANSITIONS[cmd.type]
    if existing.status not in allowed:
        raise InvalidTaskTransitionError(cmd.task_id, existing.status, to_status)
    moved = existing.model_copy(update={"status": to_status, **_transition_update(cmd, existing)})
    return TaskResult(_with(state, existing, moved), [_event(event_type, moved, cmd.type)])
