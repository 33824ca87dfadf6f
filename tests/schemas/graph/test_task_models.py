"""Task wire models: validation, defaults and byte-identical JSON tags."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from projector.graph.tasks import create_task
from schemas.graph.tasks import (
    Task,
    TaskCancel,
    TaskCommandAdapter,
    TaskComplete,
    TaskCreate,
    TaskFail,
    TaskFilter,
    TaskLifecycleEvent,
    TaskStart,
    TaskUpdate,
)


def _task(**kw: object) -> Task:
    base: dict[str, object] = {"id": "t1", "intent_id": "i1", "action": "fetch", "priority": 0.5}
    base.update(kw)
    return create_task(**base)  # type: ignore[arg-type]


def test_create_task_defaults() -> None:
    task = create_task(intent_id="i1", action="fetch", priority=0.5)
    assert task.status == "pending"
    assert task.attempt == 0
    assert len(task.id) == 36 and task.id[14] == "7"


def test_create_task_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        create_task("i1", "fetch", 0.5)  # type: ignore[misc]


@pytest.mark.parametrize("priority", [-0.5, 2.0])
def test_priority_out_of_range_rejected(priority: float) -> None:
    with pytest.raises(ValidationError):
        _task(priority=priority)


def test_negative_attempt_rejected() -> None:
    with pytest.raises(ValidationError):
        _task(attempt=-1)


def test_unknown_status_rejected() -> None:
    with pytest.raises(ValidationError):
        _task(status="done")


@pytest.mark.parametrize(
    ("model", "tag"),
    [
        (TaskUpdate(task_id="t1", partial={"label": "x"}, author="a"), "task.update"),
        (TaskStart(task_id="t1", agent_id="agent:a"), "task.start"),
        (TaskComplete(task_id="t1", result={"ok": True}, output_memory_ids=["m"]), "task.complete"),
        (TaskFail(task_id="t1", error="boom", retryable=True), "task.fail"),
        (TaskCancel(task_id="t1", reason="stop"), "task.cancel"),
    ],
)
def test_command_tags_round_trip(model: object, tag: str) -> None:
    assert model.type == tag  # type: ignore[attr-defined]
    parsed = TaskCommandAdapter.validate_json(model.model_dump_json())  # type: ignore[attr-defined]
    assert type(parsed) is type(model) and parsed == model


def test_create_command_wire_json_is_literal() -> None:
    cmd = TaskCreate(task=_task(input_memory_ids=["m1"]))
    assert cmd.model_dump_json(exclude_none=True) == (
        '{"type":"task.create","task":{"id":"t1","intent_id":"i1","action":"fetch",'
        '"status":"pending","priority":0.5,"input_memory_ids":["m1"],"attempt":0}}'
    )


def test_fail_command_wire_json_is_literal() -> None:
    raw = '{"type":"task.fail","task_id":"t1","error":"boom","retryable":false}'
    cmd = TaskCommandAdapter.validate_json(raw)
    assert isinstance(cmd, TaskFail) and cmd.retryable is False
    assert cmd.model_dump_json(exclude_none=True) == raw


def test_statuses_on_the_wire() -> None:
    for status in ("pending", "running", "completed", "failed", "cancelled"):
        assert f'"status":"{status}"' in _task(status=status).model_dump_json()


def test_missing_fields_rejected() -> None:
    with pytest.raises(ValidationError):
        TaskCommandAdapter.validate_python({"type": "task.fail", "task_id": "t1"})
    with pytest.raises(ValidationError):
        TaskCommandAdapter.validate_python({"type": "task.begin", "task_id": "t1"})


def test_result_is_an_object_or_none_as_in_the_seed() -> None:
    assert _task(result={"text": "plain"}).result == {"text": "plain"}
    with pytest.raises(ValidationError):
        _task(result="plain text")


def test_lifecycle_event_shape() -> None:
    event = TaskLifecycleEvent(type="task.failed", task=_task(), cause_type="task.fail")
    dumped = json.loads(event.model_dump_json(exclude_none=True))
    assert (dumped["namespace"], dumped["type"], dumped["cause_type"]) == (
        "task",
        "task.failed",
        "task.fail",
    )


def test_filter_validates_statuses() -> None:
    assert TaskFilter.model_validate({"statuses": ["failed"]}).statuses == ["failed"]
    with pytest.raises(ValidationError):
        TaskFilter.model_validate({"status": "bogus"})
