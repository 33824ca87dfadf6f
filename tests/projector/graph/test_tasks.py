"""The task reducer: create/update, attempts and every transition of the status machine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from projector.graph.tasks import (
    TaskResult,
    TaskState,
    apply_task_command,
    create_task,
    create_task_state,
)
from schemas.graph.errors import (
    DuplicateTaskError,
    InvalidTaskTransitionError,
    MemexError,
    TaskNotFoundError,
)
from schemas.graph.tasks import Task, TaskCreate

STATUSES = ["pending", "running", "completed", "failed", "cancelled"]
# command -> (statuses it may leave, status it enters, event type, extra fields)
MACHINE: dict[str, tuple[set[str], str, str, dict[str, object]]] = {
    "task.start": ({"pending", "failed"}, "running", "task.started", {"agent_id": "agent:b"}),
    "task.complete": ({"running"}, "completed", "task.completed", {"result": {"n": 1}}),
    "task.fail": ({"running"}, "failed", "task.failed", {"error": "boom", "retryable": True}),
    "task.cancel": ({"pending", "running", "failed"}, "cancelled", "task.cancelled", {}),
}


def _task(**kw: object) -> Task:
    base: dict[str, object] = {"id": "t1", "intent_id": "i1", "action": "fetch", "priority": 0.5}
    base.update(kw)
    return create_task(**base)  # type: ignore[arg-type]


def _state_with(*tasks: Task) -> TaskState:
    state = create_task_state()
    for task in tasks:
        state = apply_task_command(state, TaskCreate(task=task)).state
    return state


def _run(state: TaskState, command: str, **fields: object) -> TaskState:
    return apply_task_command(state, {"type": command, "task_id": "t1", **fields}).state


def test_create_adds_and_emits() -> None:
    state = create_task_state()
    result = apply_task_command(state, {"type": "task.create", "task": _task().model_dump()})
    assert isinstance(result, TaskResult)
    new_state, events = result
    assert list(new_state.tasks) == ["t1"] and len(state.tasks) == 0
    assert [(e.namespace, e.type, e.cause_type) for e in events] == [
        ("task", "task.created", "task.create")
    ]


def test_create_duplicate_raises() -> None:
    with pytest.raises(DuplicateTaskError) as info:
        apply_task_command(_state_with(_task()), TaskCreate(task=_task()))
    assert info.value.task_id == "t1" and isinstance(info.value, MemexError)


@pytest.mark.parametrize("from_status", STATUSES)
@pytest.mark.parametrize("command", sorted(MACHINE))
def test_status_machine(command: str, from_status: str) -> None:
    allowed, to_status, event_type, extra = MACHINE[command]
    state = _state_with(_task(status=from_status, attempt=2))
    cmd = {"type": command, "task_id": "t1", **extra}
    if from_status in allowed:
        new_state, events = apply_task_command(state, cmd)
        task = new_state.tasks["t1"]
        assert task.status == to_status
        assert [(e.type, e.cause_type) for e in events] == [(event_type, command)]
        assert task.attempt == (3 if command == "task.start" else 2)
        assert state.tasks["t1"].status == from_status  # old state unchanged
    else:
        with pytest.raises(InvalidTaskTransitionError) as info:
            apply_task_command(state, cmd)
        err = info.value
        assert (err.task_id, err.from_status, err.to_status) == ("t1", from_status, to_status)


@pytest.mark.parametrize("command", sorted(MACHINE))
def test_transition_on_missing_task_raises(command: str) -> None:
    with pytest.raises(TaskNotFoundError) as info:
        apply_task_command(
            create_task_state(), {"type": command, "task_id": "ghost", **MACHINE[command][3]}
        )
    assert info.value.task_id == "ghost"


def test_retry_cycle_increments_attempt() -> None:
    state = _state_with(_task())
    state = _run(state, "task.start", agent_id="agent:a")
    assert (state.tasks["t1"].attempt, state.tasks["t1"].agent_id) == (1, "agent:a")
    state = _run(state, "task.fail", error="timeout", retryable=True)
    assert (state.tasks["t1"].status, state.tasks["t1"].error) == ("failed", "timeout")
    state = _run(state, "task.start")
    assert state.tasks["t1"].attempt == 2
    assert state.tasks["t1"].agent_id == "agent:a"  # kept when start names no agent
    state = _run(state, "task.complete", result={"rows": 3}, output_memory_ids=["m9"])
    done = state.tasks["t1"]
    assert (done.status, done.result, done.output_memory_ids) == ("completed", {"rows": 3}, ["m9"])


def test_start_counts_from_missing_attempt() -> None:
    task = Task(id="t1", intent_id="i1", action="a", status="pending", priority=0.1)
    assert task.attempt is None
    assert _run(_state_with(task), "task.start").tasks["t1"].attempt == 1


def test_complete_without_result_keeps_fields() -> None:
    state = _state_with(_task(status="running", result={"partial": True}))
    done = _run(state, "task.complete").tasks["t1"]
    assert done.result == {"partial": True} and done.output_memory_ids is None


def test_update_merges_and_ignores_id_and_status() -> None:
    state = _state_with(_task(context={"a": 1}))
    new_state, events = apply_task_command(
        state,
        {
            "type": "task.update",
            "task_id": "t1",
            "partial": {"id": "zz", "status": "completed", "label": "L", "context": {"b": 2}},
            "author": "agent:a",
        },
    )
    task = new_state.tasks["t1"]
    assert list(new_state.tasks) == ["t1"]
    assert (task.id, task.status, task.label) == ("t1", "pending", "L")
    assert task.context == {"b": 2}  # C23: replaced, as the seed's task.update does
    assert [e.type for e in events] == ["task.updated"]
    assert state.tasks["t1"].label is None


def test_update_moves_indexes() -> None:
    state = _state_with(_task(parent_id="p1"), _task(id="t2", intent_id="i1"))
    moved = apply_task_command(
        state,
        {
            "type": "task.update",
            "task_id": "t1",
            "partial": {"intent_id": "i2", "parent_id": "p2"},
            "author": "a",
        },
    ).state
    assert moved.by_intent is not None and moved.by_parent is not None
    assert set(moved.by_intent["i1"]) == {"t2"} and set(moved.by_intent["i2"]) == {"t1"}
    assert "p1" not in moved.by_parent and set(moved.by_parent["p2"]) == {"t1"}
    assert state.by_intent is not None and set(state.by_intent["i1"]) == {"t1", "t2"}


def test_update_missing_raises() -> None:
    with pytest.raises(TaskNotFoundError):
        apply_task_command(
            create_task_state(),
            {"type": "task.update", "task_id": "x", "partial": {}, "author": "a"},
        )


def test_state_from_plain_dict_builds_indexes() -> None:
    state = TaskState(tasks={"t1": _task(parent_id="p")})
    assert state.by_intent is not None and set(state.by_intent["i1"]) == {"t1"}
    assert state.by_parent is not None and set(state.by_parent["p"]) == {"t1"}


def test_malformed_dict_raises_validation_error() -> None:
    with pytest.raises(ValidationError):
        apply_task_command(create_task_state(), {"type": "task.start"})
