"""Intent wire models: validation, defaults and byte-identical JSON tags."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from projector.graph.intents import create_intent
from schemas.graph.intents import (
    Intent,
    IntentCancel,
    IntentCommandAdapter,
    IntentComplete,
    IntentCreate,
    IntentFilter,
    IntentLifecycleEvent,
    IntentPause,
    IntentResume,
    IntentUpdate,
)


def _intent(**kw: object) -> Intent:
    base: dict[str, object] = {"id": "i1", "label": "ship", "priority": 0.5, "owner": "agent:a"}
    base.update(kw)
    return create_intent(**base)  # type: ignore[arg-type]


def test_create_intent_defaults() -> None:
    intent = create_intent(label="ship", priority=0.5, owner="agent:a")
    assert intent.status == "active"
    assert len(intent.id) == 36 and intent.id[14] == "7"  # a UUIDv7
    assert intent.parent_id is None and intent.root_memory_ids is None


def test_create_intent_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        create_intent("ship", 0.5, "agent:a")  # type: ignore[misc]


@pytest.mark.parametrize("priority", [-0.01, 1.01, float("nan")])
def test_priority_out_of_range_rejected(priority: float) -> None:
    with pytest.raises(ValidationError):
        _intent(priority=priority)


def test_unknown_status_rejected() -> None:
    with pytest.raises(ValidationError):
        _intent(status="done")


def test_intent_is_frozen() -> None:
    intent = _intent()
    with pytest.raises(ValidationError):
        intent.label = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("model", "tag"),
    [
        (IntentUpdate(intent_id="i1", partial={}, author="a"), "intent.update"),
        (IntentComplete(intent_id="i1", author="a"), "intent.complete"),
        (IntentCancel(intent_id="i1", author="a"), "intent.cancel"),
        (IntentPause(intent_id="i1", author="a"), "intent.pause"),
        (IntentResume(intent_id="i1", author="a"), "intent.resume"),
    ],
)
def test_command_tags(model: object, tag: str) -> None:
    assert model.type == tag  # type: ignore[attr-defined]
    parsed = IntentCommandAdapter.validate_python(json.loads(model.model_dump_json()))  # type: ignore[attr-defined]
    assert type(parsed) is type(model) and parsed == model


def test_create_command_wire_json_is_literal() -> None:
    cmd = IntentCreate(intent=_intent(root_memory_ids=["m1"]))
    assert cmd.model_dump_json(exclude_none=True) == (
        '{"type":"intent.create","intent":{"id":"i1","label":"ship","priority":0.5,'
        '"owner":"agent:a","status":"active","root_memory_ids":["m1"]}}'
    )


def test_pause_command_wire_json_is_literal() -> None:
    raw = '{"type":"intent.pause","intent_id":"i1","author":"a","reason":"later"}'
    cmd = IntentCommandAdapter.validate_json(raw)
    assert isinstance(cmd, IntentPause)
    assert cmd.model_dump_json(exclude_none=True) == raw


def test_statuses_on_the_wire() -> None:
    for status in ("active", "paused", "completed", "cancelled"):
        assert f'"status":"{status}"' in _intent(status=status).model_dump_json()


def test_unknown_command_tag_rejected() -> None:
    with pytest.raises(ValidationError):
        IntentCommandAdapter.validate_python({"type": "intent.delete", "intent_id": "i1"})


def test_missing_command_field_rejected() -> None:
    with pytest.raises(ValidationError):
        IntentCommandAdapter.validate_python({"type": "intent.complete", "intent_id": "i1"})


def test_lifecycle_event_shape() -> None:
    event = IntentLifecycleEvent(
        type="intent.created", intent=_intent(), cause_type="intent.create"
    )
    dumped = json.loads(event.model_dump_json(exclude_none=True))
    assert dumped["namespace"] == "intent"
    assert dumped["type"] == "intent.created"
    assert dumped["cause_type"] == "intent.create"
    with pytest.raises(ValidationError):
        IntentLifecycleEvent(type="memory.created", intent=_intent(), cause_type="x")  # type: ignore[arg-type]


def test_filter_accepts_statuses() -> None:
    f = IntentFilter.model_validate({"statuses": ["active", "paused"], "is_root": True})
    assert f.statuses == ["active", "paused"] and f.is_root is True
    with pytest.raises(ValidationError):
        IntentFilter.model_validate({"statuses": ["nope"]})
