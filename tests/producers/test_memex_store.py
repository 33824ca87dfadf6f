"""MemexStore end to end: every facade method, routing through one mutation door, dumps/loads."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from producers.memex_store import InMemoryGraphs, MemexStore
from projector.graph.dispatch import GraphOperation, MutationOutcome, apply_mutation
from projector.graph.intents import create_intent
from projector.graph.serialization import stringify
from projector.graph.state import GraphState
from schemas.graph.commands import MemoryRetract
from schemas.graph.errors import (
    DuplicateMemoryError,
    InvalidIntentTransitionError,
    InvalidTaskTransitionError,
    MemoryNotFoundError,
)
from schemas.graph.intents import IntentPause
from schemas.graph.items import create_memory_item
from schemas.graph.transplant import ImportReport, MemexExport

OBS: dict[str, Any] = {"scope": "user:laz", "kind": "observation", "source_kind": "observed"}


def mk(store: MemexStore, v: Any, **kw: Any) -> str:
    args = {**OBS, "content": {"v": v}, "author": "agent:x", "authority": 0.9, **kw}
    return store.create(**args).id


@pytest.fixture
def store() -> MemexStore:
    return MemexStore()


def test_constructor_defaults_and_states(store: MemexStore) -> None:
    assert isinstance(store.mem, GraphState)
    assert len(store.mem.items) == 0 and len(store.intents.intents) == 0
    assert len(store.tasks.tasks) == 0
    seeded = MemexStore(mem=store.mem, intents=store.intents, tasks=store.tasks)
    assert seeded.mem is store.mem and seeded.tasks is store.tasks


def test_create_add_item_and_items(store: MemexStore) -> None:
    a = store.create(**OBS, content={"v": 1}, author="agent:x", authority=0.9, importance=0.2)
    assert store.item(a.id) == a
    b = create_memory_item(**OBS, content={"v": 2}, author="agent:y", authority=0.4)
    assert store.add(b) is b
    assert [i.id for i in store.items()] == [a.id, b.id]
    assert [i.id for i in store.items({"author": "agent:y"})] == [b.id]
    sort = {"sort": {"field": "authority", "order": "asc"}}
    assert [i.id for i in store.items(None, sort)] == [b.id, a.id]
    with pytest.raises(DuplicateMemoryError):
        store.add(b)
    assert store.item("missing") is None


def test_mutations_rebind_states_but_keep_old_ones(store: MemexStore) -> None:
    before = store.mem
    mk(store, 1)
    assert store.mem is not before and len(before.items) == 0


def test_apply_update_retract(store: MemexStore) -> None:
    a = mk(store, 1)
    events = store.update(a, {"importance": 0.5, "content": {"w": 2}}, "agent:x", reason="r")
    assert [e.type for e in events] == ["memory.updated"]
    assert store.item(a).content == {"v": 1, "w": 2}  # type: ignore[union-attr]
    events = store.apply({"type": "memory.update", "item_id": a, "partial": {}, "author": "u"})
    assert [e.type for e in events] == ["memory.updated"]
    assert [e.type for e in store.retract(a, "agent:x")] == ["memory.retracted"]
    assert store.item(a) is None
    with pytest.raises(MemoryNotFoundError):
        store.retract(a, "agent:x")
    with pytest.raises(ValidationError):
        store.apply({"type": "memory.bogus"})


def test_edges_and_navigation(store: MemexStore) -> None:
    a = mk(store, "a")
    b = mk(store, "b", parents=[a])
    c = mk(store, "c")
    e = store.add_edge(
        from_=a, to=c, kind="SUPPORTS", author="x", source_kind="observed", authority=0.5
    )
    assert store.edges() == [e]
    assert store.edges({"kind": "ALIAS"}) == []
    assert [i.id for i in store.parents(b)] == [a]
    assert [i.id for i in store.children(a)] == [b]
    assert [i.id for i in store.related(a)] == [c]
    assert [i.id for i in store.related(c, direction="from")] == []
    tree = store.support_tree(b)
    assert tree is not None and tree.item.id == b and tree.parents[0].item.id == a
    assert {i.id for i in store.support_set(b)} == {a, b}
    stats = store.stats()
    assert (stats.items.total, stats.edges.total, stats.items.with_parents) == (3, 1, 1)


def test_scored_and_smart_retrieve(store: MemexStore) -> None:
    hi = mk(store, "hi", authority=0.9)
    lo = mk(store, "lo", authority=0.1)
    assert [s.item.id for s in store.scored({"authority": 1.0})] == [hi, lo]
    assert [s.item.id for s in store.scored({"authority": 1.0}, {"min_score": 0.5})] == [hi]
    packed = store.smart_retrieve(budget=1, cost_fn=lambda i: 1.0, weights={"authority": 1.0})
    assert [s.item.id for s in packed] == [hi]


def test_integrity(store: MemexStore) -> None:
    a, b = mk(store, "a", authority=0.8), mk(store, "b", authority=0.6)
    events = store.mark_contradiction(a, b, "system:detector", meta={"why": "x"})
    assert [e.type for e in events] == ["edge.created"]
    assert [(c.a.id, c.b.id) for c in store.contradictions()] == [(a, b)]
    events = store.resolve_contradiction(a, b, "system:judge", reason="newer")
    assert store.contradictions() == []
    assert store.item(b).authority == pytest.approx(0.06)  # type: ignore[union-attr]
    assert {e.type for e in events} >= {"edge.retracted", "edge.created", "memory.updated"}
    c = mk(store, "c")
    assert [e.type for e in store.mark_alias(a, c, "x")] == ["edge.created", "edge.created"]
    assert [i.id for i in store.aliases(a)] == [c]
    assert {i.id for i in store.alias_group(c)} == {a, c}


def test_cascade_retract_and_stale(store: MemexStore) -> None:
    root = mk(store, "root")
    kid = mk(store, "kid", parents=[root])
    orphan = mk(store, "orphan", parents=["gone"])
    assert [s.item.id for s in store.stale_items()] == [orphan]
    assert store.cascade_retract(root, "x", reason="bad") == [kid, root]
    assert store.item(root) is None and store.item(kid) is None


def test_bulk(store: MemexStore) -> None:
    a = mk(store, "a", importance=0.5, created_at=1_000)
    b = mk(store, "b", importance=0.5, author="agent:y")
    c = mk(store, "c", author="agent:z")
    events = store.apply_many(
        {"author": "agent:x"}, lambda i: {"importance": 0.9}, "bulk", reason="r"
    )
    assert [e.item.id for e in events] == [a]  # type: ignore[union-attr]
    store.apply_many({"author": "agent:z"}, lambda i: None, "bulk")
    assert store.item(c) is None
    events = store.bulk_adjust_scores({"author": "agent:y"}, {"importance": 0.7}, "bulk")
    assert store.item(b).importance == 1.0  # type: ignore[union-attr]
    assert len(events) == 1
    events = store.decay_importance(60_000, 0.5, "bulk")
    assert store.item(a).importance == pytest.approx(0.45)  # type: ignore[union-attr]
    assert store.item(b).importance == 1.0  # type: ignore[union-attr]


def test_intents_and_tasks(store: MemexStore) -> None:
    intent = store.create_intent(label="ship", priority=0.7, owner="agent:x")
    assert intent.status == "active"
    assert [e.type for e in store.apply_intent(IntentPause(intent_id=intent.id, author="x"))] == [
        "intent.paused"
    ]
    with pytest.raises(InvalidIntentTransitionError):
        store.apply_intent({"type": "intent.pause", "intent_id": intent.id, "author": "x"})
    assert [i.id for i in store.get_intents({"status": "paused"})] == [intent.id]
    assert store.get_intents({"status": "active"}) == []

    task = store.create_task(intent_id=intent.id, action="fetch", priority=0.5)
    assert (task.status, task.attempt) == ("pending", 0)
    store.apply_task({"type": "task.start", "task_id": task.id, "agent_id": "agent:x"})
    events = store.apply_task({"type": "task.complete", "task_id": task.id, "result": {"n": 1}})
    assert [(e.namespace, e.type) for e in events] == [("task", "task.completed")]
    with pytest.raises(InvalidTaskTransitionError):
        store.apply_task({"type": "task.start", "task_id": task.id})
    assert [t.id for t in store.get_tasks({"intent_id": intent.id})] == [task.id]
    assert store.get_tasks()[0].attempt == 1


def test_export_and_import_between_stores(store: MemexStore) -> None:
    intent = store.create_intent(label="ship", priority=0.7, owner="agent:x")
    a = mk(store, "a", intent_id=intent.id)
    b = mk(store, "b", parents=[a])
    sl = store.export_slice(memory_ids=[b], include_parents=True, include_related_intents=True)
    assert isinstance(sl, MemexExport)
    assert [m.id for m in sl.memories] == [a, b] and [i.id for i in sl.intents] == [intent.id]

    other = MemexStore()
    report = other.import_slice(sl)
    assert isinstance(report, ImportReport)
    assert report.created.memories == [a, b] and report.created.intents == [intent.id]
    assert other.item(b) == store.item(b)

    # a clashing A in a third store gets re-id'd, and B's parent follows it
    third = MemexStore()
    third.add(create_memory_item(**OBS, id=a, content={"other": True}, author="z", authority=0.1))
    report = third.import_slice(
        sl.model_dump(by_alias=True), shallow_compare_existing=True, re_id_on_difference=True
    )
    new_a = report.created.memories[0]
    assert report.conflicts.memories == [] and new_a != a  # the seed reports it created
    assert third.item(b).parents == [new_a]  # type: ignore[union-attr]


def test_to_json_dumps_loads_round_trip(store: MemexStore) -> None:
    a = mk(store, "a")
    b = mk(store, "b", parents=[a], importance=0.3)
    store.add_edge(
        from_=a, to=b, kind="DERIVED_FROM", author="x", source_kind="observed", authority=0.5
    )
    data = store.to_json()
    assert [pair[0] for pair in data["items"]] == [a, b]
    assert "from" in data["edges"][0][1]
    text = store.dumps()
    assert text == stringify(store.mem) and "\n" not in text
    pretty = store.dumps(pretty=True)
    assert pretty == stringify(store.mem, pretty=True) and "\n  " in pretty
    restored = MemexStore.loads(pretty)
    assert isinstance(restored, MemexStore)
    assert list(restored.mem.items.items()) == list(store.mem.items.items())
    assert list(restored.mem.edges.items()) == list(store.mem.edges.items())
    assert restored.dumps() == text
    assert len(restored.intents.intents) == 0 and len(restored.tasks.tasks) == 0


class RecordingGraphs(InMemoryGraphs):
    """What a log's backend does: see every mutation at one place."""

    def __init__(self) -> None:
        super().__init__(MemexStore().backend.graphs())
        self.seen: list[Any] = []

    def mutate(self, mutation: Any) -> MutationOutcome:
        self.seen.append(mutation)
        return super().mutate(mutation)


def test_every_mutation_goes_through_one_door() -> None:
    backend = RecordingGraphs()
    store = MemexStore(backend=backend)
    a = mk(store, "a")
    b = mk(store, "b", parents=[a])
    store.update(a, {"importance": 0.1}, "x")
    store.add_edge(
        from_=a, to=b, kind="SUPPORTS", author="x", source_kind="observed", authority=0.5
    )
    store.mark_contradiction(a, b, "x")
    store.resolve_contradiction(a, b, "x")
    store.mark_alias(a, b, "x")
    store.apply_many({}, lambda i: {}, "x")
    store.bulk_adjust_scores({}, {"authority": -0.1}, "x")
    store.decay_importance(0, 0.5, "x")
    intent = store.create_intent(label="l", priority=0.1, owner="o")
    store.apply_intent({"type": "intent.complete", "intent_id": intent.id, "author": "x"})
    task = store.create_task(intent_id=intent.id, action="a", priority=0.1)
    store.apply_task({"type": "task.cancel", "task_id": task.id})
    store.import_slice(MemexExport())
    store.cascade_retract(a, "x")
    store.retract(mk(store, "c"), "x")
    kinds = [m.name if isinstance(m, GraphOperation) else m.type for m in backend.seen]
    assert kinds == [
        "memory.create",
        "memory.create",
        "memory.update",
        "edge.create",
        "mark_contradiction",
        "resolve_contradiction",
        "mark_alias",
        "apply_many",
        "bulk_adjust_scores",
        "decay_importance",
        "intent.create",
        "intent.complete",
        "task.create",
        "task.cancel",
        "import_slice",
        "cascade_retract",
        "memory.create",
        "memory.retract",
    ]
    # reads never go through the door
    n = len(backend.seen)
    store.items(), store.edges(), store.stats(), store.get_intents(), store.export_slice()
    assert len(backend.seen) == n


def test_apply_mutation_is_pure(store: MemexStore) -> None:
    a = mk(store, "a")
    mem, intents, tasks = store.mem, store.intents, store.tasks
    result = apply_mutation(mem, intents, tasks, MemoryRetract(item_id=a, author="x"))
    assert a in mem.items and a not in result.mem.items
    assert [e.type for e in result.outcome.events] == ["memory.retracted"]
    result = apply_mutation(
        mem, intents, tasks, GraphOperation("import_slice", {"slice": MemexExport()})
    )
    assert isinstance(result.outcome.value, ImportReport)
    created = create_intent(label="l", priority=0.1, owner="o")
    result = apply_mutation(mem, intents, tasks, {"type": "intent.create", "intent": created})
    assert created.id in result.intents.intents and len(intents.intents) == 0
