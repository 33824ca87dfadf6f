"""The intent reducer: create/update and every transition of the status machine."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from projector.graph.intents import (
    IntentResult,
    IntentState,
    apply_intent_command,
    create_intent,
    create_intent_state,
)
from projector.graph.pmap import OrderedPMap
from queryd.graph.intents import get_child_intents
from schemas.graph.errors import (
    DuplicateIntentError,
    IntentNotFoundError,
    InvalidIntentTransitionError,
    MemexError,
)
from schemas.graph.intents import Intent, IntentCreate

STATUSES = ["active", "paused", "completed", "cancelled"]
# command -> (statuses it may leave, status it enters, event type)
MACHINE = {
    "intent.complete": ({"active", "paused"}, "completed", "intent.completed"),
    "intent.cancel": ({"active", "paused"}, "cancelled", "intent.cancelled"),
    "intent.pause": ({"active"}, "paused", "intent.paused"),
    "intent.resume": ({"paused"}, "active", "intent.resumed"),
}


def _state_with(intent: Intent) -> IntentState:
    return apply_intent_command(create_intent_state(), IntentCreate(intent=intent)).state


def _intent(**kw: object) -> Intent:
    base: dict[str, object] = {"id": "i1", "label": "ship", "priority": 0.5, "owner": "agent:a"}
    base.update(kw)
    return create_intent(**base)  # type: ignore[arg-type]


def test_create_adds_and_emits() -> None:
    state = create_intent_state()
    result = apply_intent_command(
        state, {"type": "intent.create", "intent": _intent().model_dump()}
    )
    assert isinstance(result, IntentResult)
    new_state, events = result
    assert list(new_state.intents) == ["i1"]
    assert len(state.intents) == 0  # input untouched
    assert [(e.namespace, e.type, e.cause_type) for e in events] == [
        ("intent", "intent.created", "intent.create")
    ]
    assert events[0].intent == new_state.intents["i1"]


def test_create_duplicate_raises() -> None:
    state = _state_with(_intent())
    with pytest.raises(DuplicateIntentError) as info:
        apply_intent_command(state, IntentCreate(intent=_intent(label="other")))
    assert info.value.intent_id == "i1"
    assert isinstance(info.value, MemexError)


def test_intents_keep_insertion_order() -> None:
    state = create_intent_state()
    for i in ["c", "a", "b"]:
        state = apply_intent_command(state, IntentCreate(intent=_intent(id=i))).state
    state = apply_intent_command(
        state, {"type": "intent.update", "intent_id": "c", "partial": {"label": "x"}, "author": "u"}
    ).state
    assert list(state.intents) == ["c", "a", "b"]
    assert state.intents["c"].label == "x"


def test_state_mapping_takes_assignment_as_the_seed_dict() -> None:
    state = _state_with(_intent())
    assert isinstance(state.intents, OrderedPMap)
    state.intents["x"] = _intent(id="x", parent_id=state.intents.__iter__().__next__())
    assert list(state.intents)[-1] == "x"
    # the parent index follows the assignment
    assert [i.id for i in get_child_intents(state, list(state.intents)[0])] == ["x"]
    with pytest.raises(AttributeError):
        state.intents = {}  # type: ignore[misc]


def test_state_from_plain_dict() -> None:
    parent, child = _intent(id="p"), _intent(id="c", parent_id="p")
    state = IntentState(intents={"p": parent, "c": child})
    assert isinstance(state.intents, OrderedPMap)
    assert state.by_parent is not None and set(state.by_parent["p"]) == {"c"}


def test_update_merges_and_ignores_id_and_status() -> None:
    state = _state_with(_intent(context={"a": 1}, meta={"k": "v"}))
    new_state, events = apply_intent_command(
        state,
        {
            "type": "intent.update",
            "intent_id": "i1",
            "partial": {
                "id": "other",
                "status": "completed",
                "label": "renamed",
                "priority": 0.9,
                "context": {"b": 2},
                "meta": {"k2": "v2"},
                "not_a_field": 1,
            },
            "author": "agent:a",
            "reason": "refine",
        },
    )
    updated = new_state.intents["i1"]
    assert list(new_state.intents) == ["i1"]
    assert updated.status == "active"
    assert updated.label == "renamed" and updated.priority == 0.9
    # C23: a shallow merge at the top level, as the seed's: context and meta replaced.
    assert updated.context == {"b": 2}
    assert updated.meta == {"k2": "v2"}
    assert updated.not_a_field == 1  # set as the seed's model_copy(update=) sets it
    assert [e.type for e in events] == ["intent.updated"]
    assert events[0].cause_type == "intent.update"
    assert state.intents["i1"].label == "ship"  # old state unchanged


def test_update_can_reparent() -> None:
    state = _state_with(_intent(id="p1"))
    state = apply_intent_command(state, IntentCreate(intent=_intent(id="p2"))).state
    state = apply_intent_command(state, IntentCreate(intent=_intent(id="c", parent_id="p1"))).state
    moved = apply_intent_command(
        state,
        {"type": "intent.update", "intent_id": "c", "partial": {"parent_id": "p2"}, "author": "u"},
    ).state
    assert moved.by_parent is not None and state.by_parent is not None
    assert "p1" not in moved.by_parent and set(moved.by_parent["p2"]) == {"c"}
    assert set(state.by_parent["p1"]) == {"c"}


def test_update_missing_raises() -> None:
    with pytest.raises(IntentNotFoundError) as info:
        apply_intent_command(
            create_intent_state(),
            {"type": "intent.update", "intent_id": "nope", "partial": {}, "author": "a"},
        )
    assert info.value.intent_id == "nope"


@pytest.mark.parametrize("command", sorted(MACHINE))
def test_transition_on_missing_intent_raises(command: str) -> None:
    with pytest.raises(IntentNotFoundError) as info:
        apply_intent_command(
            create_intent_state(), {"type": command, "intent_id": "ghost", "author": "a"}
        )
    assert info.value.intent_id == "ghost"


@pytest.mark.parametrize("from_status", STATUSES)
@pytest.mark.parametrize("command", sorted(MACHINE))
def test_status_machine(command: str, from_status: str) -> None:
    allowed, to_status, event_type = MACHINE[command]
    state = _state_with(_intent(status=from_status))
    cmd = {"type": command, "intent_id": "i1", "author": "agent:a", "reason": "r"}
    if from_status in allowed:
        new_state, events = apply_intent_command(state, cmd)
        assert new_state.intents["i1"].status == to_status
        assert [(e.type, e.cause_type) for e in events] == [(event_type, command)]
        assert events[0].intent.status == to_status
        assert state.intents["i1"].status == from_status
    else:
        with pytest.raises(InvalidIntentTransitionError) as info:
            apply_intent_command(state, cmd)
        err = info.value
        assert (err.intent_id, err.from_status, err.to_status) == ("i1", from_status, to_status)


def test_pause_resume_round_trip_then_complete() -> None:
    state = _state_with(_intent())
    for command in ["intent.pause", "intent.resume", "intent.pause", "intent.complete"]:
        state = apply_intent_command(
            state, {"type": command, "intent_id": "i1", "author": "a"}
        ).state
    assert state.intents["i1"].status == "completed"


def test_malformed_dict_raises_validation_error() -> None:
    with pytest.raises(ValidationError):
        apply_intent_command(create_intent_state(), {"type": "intent.pause"})
