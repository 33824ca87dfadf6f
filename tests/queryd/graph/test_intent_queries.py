"""Intent queries and IntentFilter."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from projector.graph.intents import (
    IntentState,
    apply_intent_command,
    create_intent,
    create_intent_state,
)
from queryd.graph.intents import get_child_intents, get_intent_by_id, get_intents
from schemas.graph.intents import IntentCreate, IntentFilter


@pytest.fixture
def state() -> IntentState:
    s = create_intent_state()
    intents = [
        create_intent(id="root", label="r", priority=0.9, owner="alice", root_memory_ids=["m1"]),
        create_intent(id="c1", label="a", priority=0.2, owner="bob", parent_id="root"),
        create_intent(id="other", label="o", priority=0.5, owner="alice", status="paused"),
        create_intent(
            id="c2",
            label="b",
            priority=0.7,
            owner="alice",
            parent_id="root",
            status="completed",
            root_memory_ids=["m1", "m2"],
        ),
    ]
    for intent in intents:
        s = apply_intent_command(s, IntentCreate(intent=intent)).state
    return s


def ids(intents: list) -> list[str]:  # type: ignore[type-arg]
    return [i.id for i in intents]


def test_no_filter_returns_all_in_order(state: IntentState) -> None:
    assert ids(get_intents(state)) == ["root", "c1", "other", "c2"]


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        ({"owner": "alice"}, ["root", "other", "c2"]),
        ({"status": "paused"}, ["other"]),
        ({"statuses": ["active", "completed"]}, ["root", "c1", "c2"]),
        ({"min_priority": 0.5}, ["root", "other", "c2"]),
        ({"has_memory_id": "m2"}, ["c2"]),
        ({"has_memory_id": "m1"}, ["root", "c2"]),
        ({"parent_id": "root"}, ["c1", "c2"]),
        ({"is_root": True}, ["root", "other"]),
        ({"is_root": False}, ["c1", "c2"]),
        ({"owner": "alice", "is_root": False}, ["c2"]),
        ({"parent_id": "root", "status": "active"}, ["c1"]),
        ({}, ["root", "c1", "other", "c2"]),
    ],
)
def test_filters(state: IntentState, flt: dict, expected: list[str]) -> None:  # type: ignore[type-arg]
    assert ids(get_intents(state, flt)) == expected
    assert ids(get_intents(state, IntentFilter.model_validate(flt))) == expected


def test_bad_filter_dict_raises(state: IntentState) -> None:
    with pytest.raises(ValidationError):
        get_intents(state, {"status": "nope"})


def test_by_id(state: IntentState) -> None:
    assert get_intent_by_id(state, "c1") is state.intents["c1"]
    assert get_intent_by_id(state, "missing") is None


def test_children_in_insertion_order(state: IntentState) -> None:
    assert ids(get_child_intents(state, "root")) == ["c1", "c2"]
    assert get_child_intents(state, "c1") == []
