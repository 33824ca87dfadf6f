"""The combined fold: total, deterministic, and operations decided in log order."""

from __future__ import annotations

from typing import Any

import pytest

from projector.audit import replay
from projector.lifecycle import lifecycle_payload
from projector.record_fold import (
    BATCH,
    LogState,
    PreconditionFailed,
    apply_record,
    check_records,
    empty_state,
    fold_log,
    fold_record,
)
from schemas.audit import Deletion, Message, Recall
from schemas.codec import MAGIC, encode_envelope_json, encode_record
from schemas.graph.envelopes import now_iso
from schemas.graph.errors import DuplicateMemoryError, MemoryNotFoundError
from schemas.graph.ids import uuid7
from schemas.graph.items import create_edge, create_memory_item
from schemas.records import GraphEnvelope


def env(
    payload: dict[str, Any],
    *,
    namespace: str | None = None,
    type: str | None = None,
) -> GraphEnvelope:
    kind = type or payload["type"]
    return GraphEnvelope(
        id=uuid7(),
        namespace=namespace or kind.split(".")[0],
        type=kind,
        ts=now_iso(),
        payload=payload,
    )


def item(id: str | None = None, **kw: Any) -> dict[str, Any]:
    made = create_memory_item(
        id=id,
        scope="s",
        kind="observation",
        content={"v": 1},
        author="a",
        source_kind="observed",
        authority=kw.pop("authority", 0.9),
        **kw,
    )
    return made.model_dump(mode="json", by_alias=True, exclude_none=True)


def create(id: str | None = None, **kw: Any) -> GraphEnvelope:
    return env({"type": "memory.create", "item": item(id, **kw)})


def fold_all(records: list[Any]) -> LogState:
    return fold_log(enumerate(encode_record(r) if not isinstance(r, bytes) else r for r in records))


def test_audit_events_fold_into_the_memory_state_with_their_log_seq() -> None:
    m1, m2 = Message(speaker="a", content="x"), Message(speaker="b", content="y")
    state = fold_all([m1, create("i1"), m2, Deletion(targets=(m1.id,), reason="r")])
    assert state.last_seq == 3 and len(state.memory) == 3
    assert [e.seq for e in state.memory.events] == [0, 2, 3]
    deletion = state.memory.events[-1]
    assert state.memory == replay([m1.with_seq(0), m2.with_seq(2), deletion])
    assert state.memory.is_deleted(m1.id)
    assert list(state.graph.items) == ["i1"]


def test_the_fold_is_total_and_a_rejection_changes_nothing_else() -> None:
    m = Message(speaker="a", content="x")
    good = [m, create("i1")]
    bad: list[Any] = [
        b"garbage",
        MAGIC + b"\x01" * 8 + b"unknown schema",
        b'{"id": 3}',
        m,  # duplicate audit id
        Recall(query="q", recalled=(Message(speaker="z", content="z").id,)),  # unknown target
        create("i1"),  # duplicate item id
        env({"type": "memory.retract", "item_id": "nope", "author": "a"}),
        env({"type": "memory.create", "item": {**item("i2"), "authority": 7}}),  # out of range
        env({"type": "intent.complete", "intent_id": "nope", "author": "a"}),
        env({"type": "teleport.now"}),
        env({}, namespace="memstream", type="memstream.nonsense"),
        env(
            {"type": "memory.update", "item_id": "i1", "partial": {}, "author": "a"},
            namespace="memstream",
            type=BATCH,
        ),
    ]
    state = empty_state()
    lifecycle = []
    for seq, record in enumerate(good + bad):
        data = record if isinstance(record, bytes) else encode_record(record)
        state, events = fold_record(state, seq, data)
        lifecycle.extend(events)
    assert [r.seq for r in state.rejections] == list(range(2, 2 + len(bad)))
    assert all(r.reason for r in state.rejections)
    clean = fold_all(good)
    assert state.memory == clean.memory and state.memory.events == clean.memory.events
    assert state.graph == clean.graph and state.last_seq == len(good) + len(bad) - 1
    rejected = [e for e in lifecycle if e.type == "record.rejected"]
    assert len(rejected) == len(bad)
    assert lifecycle_payload(rejected[0])["seq"] == 2


def test_json_envelopes_as_typescript_writes_them_are_folded() -> None:
    state = fold_all([encode_envelope_json(create("i1"))])
    assert "i1" in state.graph.items and not state.rejections


def test_lifecycle_events_for_audit_and_graph_records() -> None:
    state = empty_state()
    state, ev1 = fold_record(state, 0, encode_record(Message(speaker="a", content="x")))
    state, ev2 = fold_record(state, 1, encode_record(create("i1")))
    assert [e.type for e in ev1] == ["message.appended"]
    assert [e.type for e in ev2] == ["memory.created"]
    payload = lifecycle_payload(ev2[0])
    assert payload["item"]["id"] == "i1" and payload["seq"] == 1 and payload["cause_id"]


def test_strict_apply_raises_the_seed_error() -> None:
    state = fold_all([create("i1")])
    with pytest.raises(DuplicateMemoryError):
        apply_record(state, 1, create("i1"))
    with pytest.raises(DuplicateMemoryError):
        check_records(state, [create("i2"), create("i2")])
    check_records(state, [create("i2"), create("i3")])


def _two_with_contradiction() -> list[Any]:
    return [
        create("a"),
        create("b"),
        create("c", parents=["a"]),
        create("d", parents=["c"]),
        env(
            {"item_id_a": "a", "item_id_b": "b", "author": "x", "meta": None},
            namespace="memstream",
            type="memstream.mark_contradiction",
        ),
    ]


def test_operations_are_decided_in_log_order_and_deterministically() -> None:
    records = _two_with_contradiction() + [
        env(
            {"winner_id": "a", "loser_id": "b", "author": "x", "reason": "r"},
            namespace="memstream",
            type="memstream.resolve_contradiction",
        ),
        env(
            {"item_id": "a", "author": "x", "reason": None},
            namespace="memstream",
            type="memstream.cascade_retract",
        ),
    ]
    data = [encode_record(r) for r in records]
    one = fold_log(enumerate(data))
    two = fold_log(enumerate(data))
    assert one == two  # minted edge ids are derived from the envelope, not the clock
    assert not one.rejections
    assert set(one.graph.items) == {"b"}
    assert one.graph.items["b"].authority == pytest.approx(0.09)


def test_cascade_published_before_a_new_child_still_sees_the_log_order() -> None:
    # Agent 1 publishes cascade_retract(a); agent 2 adds a child of a after it. The fold
    # decides the cascade where it stands: the later child survives (stale), whatever
    # either agent saw when it published.
    cascade = env(
        {"item_id": "a", "author": "x"}, namespace="memstream", type="memstream.cascade_retract"
    )
    state = fold_all([create("a"), cascade, create("late", parents=["a"])])
    assert set(state.graph.items) == {"late"}


def test_a_batch_with_a_stale_precondition_is_rejected() -> None:
    base = fold_all([create("a")])
    assert base.graph_seq == 0
    update = {
        "type": "memory.update",
        "item_id": "a",
        "partial": {"importance": 0.5},
        "author": "x",
    }
    batch = env({"commands": [update], "graph_seq": 0}, namespace="memstream", type=BATCH)
    ok = apply_record(base, 1, batch).state
    assert ok.graph.items["a"].importance == 0.5
    moved = apply_record(base, 1, create("b")).state
    with pytest.raises(PreconditionFailed):
        apply_record(moved, 2, batch)
    folded = fold_record(moved, 2, encode_record(batch)).state
    assert folded.rejections[-1].error == "PreconditionFailed"


def test_a_batch_is_all_or_nothing() -> None:
    base = fold_all([create("a")])
    good = {"type": "memory.update", "item_id": "a", "partial": {"importance": 0.5}, "author": "x"}
    bad = {"type": "memory.retract", "item_id": "zz", "author": "x"}
    batch = env({"commands": [good, bad]}, namespace="memstream", type=BATCH)
    with pytest.raises(MemoryNotFoundError):
        apply_record(base, 1, batch)
    after = fold_record(base, 1, encode_record(batch)).state
    assert after.graph.items["a"].importance is None
    assert len(after.rejections) == 1


def test_edges_and_intents_and_tasks_share_the_log() -> None:
    edge = create_edge(
        from_="a", to="b", kind="SUPPORTS", author="x", source_kind="observed", authority=1.0
    )
    records = [
        create("a"),
        create("b"),
        env({"type": "edge.create", "edge": edge.model_dump(mode="json", exclude_none=True)}),
        env(
            {
                "type": "intent.create",
                "intent": {
                    "id": "g",
                    "label": "goal",
                    "priority": 0.5,
                    "owner": "me",
                    "status": "active",
                },
            }
        ),
        env(
            {
                "type": "task.create",
                "task": {
                    "id": "t",
                    "intent_id": "g",
                    "action": "do",
                    "priority": 0.5,
                    "status": "pending",
                },
            }
        ),
        env({"type": "task.start", "task_id": "t"}),
    ]
    state = fold_all(records)
    assert not state.rejections, state.rejections
    assert edge.edge_id in state.graph.edges
    assert state.tasks.tasks["t"].status == "running"
    assert state.intents.intents["g"].label == "goal"


def test_with_copies_the_state_and_refuses_unknown_fields() -> None:
    state = fold_log([(0, encode_record(Message(speaker="a", content="b")))])
    moved = state.with_(last_seq=5, graph_seq=3)
    assert (moved.last_seq, moved.graph_seq, moved.memory) == (5, 3, state.memory)
    assert (state.last_seq, state.graph_seq) == (0, None)
    with pytest.raises(TypeError, match="no field 'nope'"):
        state.with_(nope=1)


def test_a_checked_fold_equals_the_strict_one() -> None:
    # What a log folds for its own append, already checked by `check_records`.
    state = fold_log([(0, encode_record(Message(speaker="a", content="b")))])
    event = Message(speaker="c", content="d")
    check_records(state, [event])
    assert apply_record(state, 1, event, checked=True) == apply_record(state, 1, event)
