"""Task queries, TaskFilter and the intent/parent indexes."""

from __future__ import annotations

import pytest

from projector.graph.tasks import TaskState, apply_task_command, create_task, create_task_state
from queryd.graph.tasks import get_child_tasks, get_task_by_id, get_tasks, get_tasks_by_intent
from schemas.graph.tasks import TaskCreate, TaskFilter


@pytest.fixture
def state() -> TaskState:
    s = create_task_state()
    tasks = [
        create_task(
            id="a",
            intent_id="i1",
            action="fetch",
            priority=0.9,
            agent_id="x",
            input_memory_ids=["m1"],
        ),
        create_task(
            id="b",
            intent_id="i2",
            action="parse",
            priority=0.3,
            parent_id="a",
            status="running",
            output_memory_ids=["m2"],
        ),
        create_task(
            id="c",
            intent_id="i1",
            action="fetch",
            priority=0.5,
            parent_id="a",
            status="failed",
            agent_id="y",
        ),
        create_task(id="d", intent_id="i1", action="store", priority=0.1, status="completed"),
    ]
    for task in tasks:
        s = apply_task_command(s, TaskCreate(task=task)).state
    return s


def ids(tasks: list) -> list[str]:  # type: ignore[type-arg]
    return [t.id for t in tasks]


def test_all_in_insertion_order(state: TaskState) -> None:
    assert ids(get_tasks(state)) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"intent_id": "i1"}, ["a", "c", "d"]),
        ({"action": "fetch"}, ["a", "c"]),
        ({"status": "running"}, ["b"]),
        ({"statuses": ["failed", "completed"]}, ["c", "d"]),
        ({"agent_id": "y"}, ["c"]),
        ({"min_priority": 0.5}, ["a", "c"]),
        ({"has_input_memory_id": "m1"}, ["a"]),
        ({"has_output_memory_id": "m2"}, ["b"]),
        ({"parent_id": "a"}, ["b", "c"]),
        ({"is_root": True}, ["a", "d"]),
        ({"is_root": False}, ["b", "c"]),
        ({"intent_id": "i1", "action": "fetch", "parent_id": "a"}, ["c"]),
        ({"intent_id": "nope"}, []),
    ],
)
def test_filters(state: TaskState, flt: dict, expected: list[str]) -> None:  # type: ignore[type-arg]
    assert ids(get_tasks(state, flt)) == expected
    assert ids(get_tasks(state, TaskFilter.model_validate(flt))) == expected


def test_by_id(state: TaskState) -> None:
    assert get_task_by_id(state, "b") is state.tasks["b"]
    assert get_task_by_id(state, "zz") is None


def test_by_intent_and_children(state: TaskState) -> None:
    assert ids(get_tasks_by_intent(state, "i1")) == ["a", "c", "d"]
    assert ids(get_tasks_by_intent(state, "i9")) == []
    assert ids(get_child_tasks(state, "a")) == ["b", "c"]
    assert get_child_tasks(state, "d") == []


def test_index_follows_updates(state: TaskState) -> None:
    s = apply_task_command(
        state,
        {"type": "task.update", "task_id": "a", "partial": {"intent_id": "i2"}, "author": "u"},
    ).state
    assert ids(get_tasks_by_intent(s, "i2")) == ["a", "b"]  # global insertion order kept
    assert ids(get_tasks_by_intent(s, "i1")) == ["c", "d"]
    assert ids(get_tasks_by_intent(state, "i1")) == ["a", "c", "d"]
