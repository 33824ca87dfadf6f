"""Pure queries over the task graph."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from projector.graph.node_index import in_insertion_order
from projector.graph.tasks import TaskState, task_indexes
from schemas.graph.tasks import Task, TaskFilter

__all__ = [
    "get_tasks",
    "get_task_by_id",
    "get_tasks_by_intent",
    "get_child_tasks",
    "matches_task_filter",
]


def matches_task_filter(task: Task, f: TaskFilter) -> bool:
    """True when ``task`` meets every condition present in ``f``."""
    if f.intent_id is not None and task.intent_id != f.intent_id:
        return False
    if f.action is not None and task.action != f.action:
        return False
    if f.status is not None and task.status != f.status:
        return False
    if f.statuses is not None and task.status not in f.statuses:
        return False
    if f.agent_id is not None and task.agent_id != f.agent_id:
        return False
    if f.min_priority is not None and not task.priority >= f.min_priority:
        return False
    if f.has_input_memory_id is not None and f.has_input_memory_id not in (
        task.input_memory_ids or ()
    ):
        return False
    if f.has_output_memory_id is not None and f.has_output_memory_id not in (
        task.output_memory_ids or ()
    ):
        return False
    if f.parent_id is not None and task.parent_id != f.parent_id:
        return False
    if f.is_root is not None and (task.parent_id is None) != f.is_root:
        return False
    return True


def get_tasks(state: TaskState, filter: TaskFilter | Mapping[str, Any] | None = None) -> list[Task]:
    """Tasks matching ``filter`` (all of them when None), in insertion order."""
    if filter is None:
        return list(state.tasks.values())
    f = filter if isinstance(filter, TaskFilter) else TaskFilter.model_validate(filter)
    # Narrow through an index when the filter names one, instead of scanning every task.
    if f.intent_id is not None:
        candidates = get_tasks_by_intent(state, f.intent_id)
    elif f.parent_id is not None:
        candidates = get_child_tasks(state, f.parent_id)
    else:
        candidates = list(state.tasks.values())
    return [task for task in candidates if matches_task_filter(task, f)]


def get_task_by_id(state: TaskState, id: str) -> Task | None:
    """The task with this id, or None."""
    return state.tasks.get(id)


def get_tasks_by_intent(state: TaskState, intent_id: str) -> list[Task]:
    """Tasks whose intent_id is ``intent_id``, in insertion order (indexed, no scan)."""
    return in_insertion_order(state.tasks, task_indexes(state)[0].get(intent_id, ()))


def get_child_tasks(state: TaskState, parent_id: str) -> list[Task]:
    """Tasks whose parent_id is ``parent_id``, in insertion order (indexed, no scan)."""
    return in_insertion_order(state.tasks, task_indexes(state)[1].get(parent_id, ()))
