"""export_slice and import_slice: options, re-id with remapping, and the report buckets."""

from __future__ import annotations

from typing import Any

import pytest

from projector.graph.intents import (
    IntentState,
    apply_intent_command,
    create_intent,
    create_intent_state,
)
from projector.graph.reducer import apply_command
from projector.graph.state import GraphState, create_graph_state
from projector.graph.tasks import TaskState, apply_task_command, create_task, create_task_state
from projector.graph.transplant import ImportResult, derive_reid, import_slice
from queryd.graph.transplant import export_slice
from schemas.graph.ids import safe_extract_timestamp, uuid7
from schemas.graph.intents import IntentCreate
from schemas.graph.items import Edge, MemoryItem, create_edge, create_memory_item
from schemas.graph.tasks import TaskCreate
from schemas.graph.transplant import ExportOptions, ImportOptions, ImportReport, MemexExport

T0 = 1_700_000_000_000


def mid(n: int) -> str:
    """A deterministic UUIDv7-ish id with timestamp T0 + n."""
    return uuid7(T0 + n)


def item(id: str, **kw: Any) -> MemoryItem:
    base: dict[str, Any] = {
        "scope": "s",
        "kind": "observation",
        "content": {"v": id},
        "author": "agent:a",
        "source_kind": "observed",
        "authority": 0.5,
    }
    base.update(kw)
    return create_memory_item(id=id, **base)


def edge(eid: str, a: str, b: str, kind: str = "SUPPORTS", **kw: Any) -> Edge:
    return create_edge(
        edge_id=eid,
        from_=a,
        to=b,
        kind=kind,
        author="agent:a",
        source_kind="observed",
        authority=0.5,
        **kw,
    )


class World:
    """Three graphs built from lists, for compact fixtures."""

    def __init__(self) -> None:
        self.mem: GraphState = create_graph_state()
        self.intents: IntentState = create_intent_state()
        self.tasks: TaskState = create_task_state()

    def add(self, *things: Any) -> World:
        for t in things:
            if isinstance(t, MemoryItem):
                self.mem = apply_command(self.mem, {"type": "memory.create", "item": t}).state
            elif isinstance(t, Edge):
                self.mem = apply_command(self.mem, {"type": "edge.create", "edge": t}).state
            elif t.__class__.__name__ == "Intent":
                self.intents = apply_intent_command(self.intents, IntentCreate(intent=t)).state
            else:
                self.tasks = apply_task_command(self.tasks, TaskCreate(task=t)).state
        return self

    def export(self, **kw: Any) -> MemexExport:
        return export_slice(self.mem, self.intents, self.tasks, **kw)

    def import_(self, sl: Any, **kw: Any) -> ImportResult:
        return import_slice(self.mem, self.intents, self.tasks, sl, **kw)


A, B, C, D, E, X = (mid(i) for i in range(1, 7))


@pytest.fixture
def world() -> World:
    # A <- B <- C (provenance: B has parent A, C has parent B); D aliases C; X unrelated.
    w = World()
    w.add(
        create_intent(id="i1", label="goal", priority=0.5, owner="o"),
        create_intent(id="i2", label="other", priority=0.5, owner="o"),
        create_task(id="t1", intent_id="i1", action="fetch", priority=0.5),
        create_task(id="t2", intent_id="i2", action="parse", priority=0.5),
        item(A),
        item(B, parents=[A], intent_id="i2"),
        item(C, parents=[B], task_id="t2"),
        item(D),
        item(X),
        edge("e-ab", A, B, "DERIVED_FROM"),
        edge("e-bc", B, C),
        edge("alias-cd", C, D, "ALIAS"),
        edge("e-ax", A, X),
    )
    return w


def ids(xs: list[Any]) -> list[str]:
    return [getattr(x, "id", None) or x.edge_id for x in xs]


# -- export -----------------------------------------------------------------------------------


def test_export_seeds_only(world: World) -> None:
    sl = world.export(memory_ids=[B, "missing"], intent_ids=["i1"], task_ids=["t1", "zz"])
    assert ids(sl.memories) == [B]
    assert sl.edges == []
    assert ids(sl.intents) == ["i1"] and ids(sl.tasks) == ["t1"]


def test_export_nothing_by_default(world: World) -> None:
    assert world.export() == MemexExport()


def test_export_parents_is_transitive(world: World) -> None:
    sl = world.export(memory_ids=[C], include_parents=True)
    assert ids(sl.memories) == [A, B, C]  # insertion order, not walk order
    assert ids(sl.edges) == ["e-ab", "e-bc"]


def test_export_children_is_transitive(world: World) -> None:
    sl = world.export(memory_ids=[A], include_children=True)
    assert ids(sl.memories) == [A, B, C]


def test_export_aliases(world: World) -> None:
    assert ids(world.export(memory_ids=[C], include_aliases=True).memories) == [C, D]
    sl = world.export(memory_ids=[A], include_children=True, include_aliases=True)
    assert ids(sl.memories) == [A, B, C, D]
    assert ids(sl.edges) == ["e-ab", "e-bc", "alias-cd"]


def test_export_related_tasks_and_intents(world: World) -> None:
    sl = world.export(memory_ids=[C], intent_ids=["i1"], include_related_tasks=True)
    assert ids(sl.tasks) == ["t1", "t2"]  # t1 via intent i1, t2 via C.task_id
    assert ids(sl.intents) == ["i1"]
    sl = world.export(memory_ids=[B], task_ids=["t1"], include_related_intents=True)
    assert ids(sl.intents) == ["i2"]  # via B.intent_id; tasks pull no intents (the seed's)


def test_export_includes_retracted_edges_between_members(world: World) -> None:
    world.mem = apply_command(  # a retract removes an edge (C1); an update deactivates it
        world.mem,
        {"type": "edge.update", "edge_id": "e-ab", "partial": {"active": False}, "author": "x"},
    ).state
    sl = world.export(memory_ids=[A, B])
    assert [(e.edge_id, e.active) for e in sl.edges] == [("e-ab", False)]


def test_export_options_struct_and_keyword_override(world: World) -> None:
    opts = ExportOptions(memory_ids=[C], include_parents=True)
    assert ids(world.export(options=opts).memories) == [A, B, C]
    assert ids(world.export(options=opts, memory_ids=[B]).memories) == [A, B]
    assert ids(world.export(options={"memory_ids": [A], "include_children": True}).memories) == [
        A,
        B,
        C,
    ]


def test_export_is_a_pure_read(world: World) -> None:
    before = (dict(world.mem.items), dict(world.mem.edges), dict(world.intents.intents))
    world.export(memory_ids=[A], include_children=True, include_aliases=True)
    assert before == (dict(world.mem.items), dict(world.mem.edges), dict(world.intents.intents))


# -- import -----------------------------------------------------------------------------------


def full_slice(world: World) -> MemexExport:
    return world.export(
        memory_ids=[A, B, C, D, X],
        intent_ids=["i1", "i2"],
        task_ids=["t1", "t2"],
    )


def test_import_into_empty_creates_everything(world: World) -> None:
    sl = full_slice(world)
    result = World().import_(sl)
    assert isinstance(result, ImportResult)
    mem, intents, tasks, report = result
    assert list(mem.items) == [A, B, C, D, X]
    assert list(mem.edges) == ["e-ab", "e-bc", "alias-cd", "e-ax"]
    assert list(intents.intents) == ["i1", "i2"] and list(tasks.tasks) == ["t1", "t2"]
    assert report.created.memories == [A, B, C, D, X]
    assert report.created.edges == ["e-ab", "e-bc", "alias-cd", "e-ax"]
    assert report.created.intents == ["i1", "i2"] and report.created.tasks == ["t1", "t2"]
    for bucket in (report.updated, report.skipped, report.conflicts):
        assert bucket.memories == bucket.edges == bucket.intents == bucket.tasks == []
    assert mem.items[B] == world.mem.items[B]


def test_import_accepts_a_dict_slice(world: World) -> None:
    raw = full_slice(world).model_dump(mode="json", by_alias=True)
    mem, _, _, report = World().import_(raw)
    assert list(mem.items) == [A, B, C, D, X] and report.created.edges[0] == "e-ab"


def test_import_leaves_inputs_untouched(world: World) -> None:
    target = World().add(item(A, content={"other": 1}))
    sl = full_slice(world)
    snapshot = (dict(target.mem.items), dict(target.mem.edges))
    target.import_(sl, skip_existing_ids=False)
    target.import_(sl, re_id_on_difference=True)
    assert snapshot == (dict(target.mem.items), dict(target.mem.edges))
    assert len(target.intents.intents) == 0


def changed_target(world: World) -> World:
    """A target holding A identical, B different, t1 different and i1 identical."""
    return World().add(
        world.mem.items[A],
        item(B, content={"v": "local", "mine": 1}, parents=[A]),
        create_intent(id="i1", label="goal", priority=0.5, owner="o"),
        create_task(id="t1", intent_id="i1", action="local", priority=0.5),
        edge("e-ab", A, B, "DERIVED_FROM"),  # same edge as exported
    )


def test_default_skips_existing_ids_without_comparing(world: World) -> None:
    target = changed_target(world)
    mem, intents, tasks, report = target.import_(full_slice(world))
    assert report.skipped.memories == [A, B]
    assert report.created.memories == [C, D, X]
    assert report.skipped.tasks == ["t1"] and report.created.tasks == ["t2"]
    assert report.skipped.intents == ["i1"] and report.skipped.edges == ["e-ab"]
    assert report.conflicts == ImportReport().conflicts
    assert mem.items[B].content == {"v": "local", "mine": 1}  # existing kept
    assert tasks.tasks["t1"].action == "local"


def test_shallow_compare_splits_identical_from_conflicts(world: World) -> None:
    target = changed_target(world)
    _, _, tasks, report = target.import_(full_slice(world), shallow_compare_existing=True)
    assert report.skipped.memories == [A] and report.conflicts.memories == [B]
    assert report.skipped.intents == ["i1"]
    assert report.conflicts.tasks == ["t1"] and tasks.tasks["t1"].action == "local"
    assert report.skipped.edges == ["e-ab"]
    assert report.updated.memories == []


def test_overwrite_when_not_skipping(world: World) -> None:
    target = changed_target(world)
    mem, _, tasks, report = target.import_(full_slice(world), skip_existing_ids=False)
    assert report.updated.memories == [A, B]
    assert report.updated.tasks == ["t1"] and report.updated.intents == ["i1"]
    assert report.updated.edges == ["e-ab"]
    # memory.update merges content keys: the incoming "v" wins, the local-only key survives
    assert mem.items[B].content == {"v": B, "mine": 1}
    assert mem.items[B].intent_id == "i2"
    assert tasks.tasks["t1"].action == "fetch"  # tasks and intents are replaced whole


def test_overwrite_does_not_compare(world: World) -> None:
    # As the seed: without skip_existing_ids an existing id is updated, compared or not.
    target = changed_target(world)
    _, _, _, report = target.import_(
        full_slice(world), skip_existing_ids=False, shallow_compare_existing=True
    )
    assert report.skipped.memories == [] and report.updated.memories == [A, B]


def test_overwrite_of_intent_keeps_status(world: World) -> None:
    target = World().add(create_intent(id="i1", label="goal", priority=0.5, owner="o"))
    target.intents = apply_intent_command(
        target.intents, {"type": "intent.pause", "intent_id": "i1", "author": "a"}
    ).state
    _, intents, _, report = target.import_(world.export(intent_ids=["i1"]), skip_existing_ids=False)
    # As the seed's intent.update: every field but id and status.
    assert report.updated.intents == ["i1"] and intents.intents["i1"].status == "paused"


def test_edge_overwrite_keeps_its_endpoints(world: World) -> None:
    target = World().add(item(A), item(B), item(X), edge("e-ab", A, X))
    mem, _, _, report = target.import_(world.export(memory_ids=[A, B]), skip_existing_ids=False)
    # As the seed's edge.update: endpoints are immutable, the rest is written.
    assert report.updated.edges == ["e-ab"] and report.conflicts.edges == []
    assert (mem.edges["e-ab"].from_, mem.edges["e-ab"].to) == (A, X)
    assert mem.edges["e-ab"].kind == "DERIVED_FROM"


def test_re_id_on_difference_remaps_every_reference(world: World) -> None:
    target = World().add(
        item(A, content={"clash": True}),
    )
    sl = world.export(
        memory_ids=[A, B, C, D],
        intent_ids=["i2"],
        task_ids=["t2"],
    )
    # cross-references from the other graphs into the re-id'd ones
    sl = sl.model_copy(
        update={
            "intents": [sl.intents[0].model_copy(update={"root_memory_ids": [A, B]})],
            "tasks": [
                sl.tasks[0].model_copy(
                    update={"input_memory_ids": [A], "output_memory_ids": [C, A]}
                )
            ],
        }
    )
    mem, intents, tasks, report = target.import_(
        sl, shallow_compare_existing=True, re_id_on_difference=True
    )

    new_a = report.created.memories[0]
    assert report.conflicts.memories == []  # the seed reports a re-id in created only
    assert report.created.memories == [new_a, B, C, D]
    assert safe_extract_timestamp(new_a) == safe_extract_timestamp(A) + 1  # type: ignore[operator]
    assert new_a[14] == "7" and new_a[19] in "89ab"
    assert mem.items[A].content == {"clash": True}  # the original stays
    assert mem.items[new_a].content == {"v": A}
    assert mem.items[B].parents == [new_a]  # parents remapped
    assert mem.edges["e-ab"].from_ == new_a  # edge endpoints remapped

    # Intents and tasks (created under their own ids) point at the re-id'd memory.
    assert report.created.intents == ["i2"] and report.created.tasks == ["t2"]
    assert intents.intents["i2"].root_memory_ids == [new_a, B]
    assert tasks.tasks["t2"].input_memory_ids == [new_a]
    assert tasks.tasks["t2"].output_memory_ids == [C, new_a]


def test_re_id_of_an_entity_without_a_time_is_the_seeds_value_error(world: World) -> None:
    target = World().add(edge("e-bc", X, X))  # an edge id that is not a UUIDv7
    with pytest.raises(ValueError, match='Cannot re-id "e-bc": provide created_at'):
        target.import_(
            world.export(memory_ids=[B, C]), shallow_compare_existing=True, re_id_on_difference=True
        )


def test_re_id_skips_identical_entities(world: World) -> None:
    target = World().add(world.mem.items[A])
    _, _, _, report = target.import_(
        world.export(memory_ids=[A, B]), shallow_compare_existing=True, re_id_on_difference=True
    )
    assert report.skipped.memories == [A] and report.created.memories == [B]


def test_re_id_is_deterministic(world: World) -> None:
    target = World().add(item(A, content={"clash": True}))
    sl = world.export(memory_ids=[A])
    first = target.import_(sl, shallow_compare_existing=True, re_id_on_difference=True).report
    second = target.import_(sl, shallow_compare_existing=True, re_id_on_difference=True).report
    assert first == second


def test_reimporting_after_re_id_mints_another_id(world: World) -> None:
    target = World().add(item(A, content={"clash": True}))
    sl = world.export(memory_ids=[A])
    re_id = {"shallow_compare_existing": True, "re_id_on_difference": True}
    mem, intents, tasks, report = target.import_(sl, **re_id)
    again = import_slice(mem, intents, tasks, sl, **re_id).report
    assert again.created.memories[0] not in (A, report.created.memories[0])


def test_derive_reid_for_non_v7_ids_and_clashes() -> None:
    with pytest.raises(ValueError, match='Cannot re-id "legacy-id": provide created_at'):
        derive_reid("legacy-id", None, lambda _: False)
    assert safe_extract_timestamp(derive_reid("legacy-id", 41, lambda _: False)) == 42
    first = derive_reid(A, None, lambda _: False)
    assert derive_reid(A, None, lambda c: c == first) != first


def test_repeated_ids_inside_the_slice(world: World) -> None:
    a = world.mem.items[A]
    sl = MemexExport(memories=[a, a, a.model_copy(update={"content": {"x": 1}})])
    mem, _, _, report = World().import_(sl)
    # As the seed: each copy meets the graph as the import left it, so later copies of
    # an id are existing ids, skipped (not compared) by default.
    assert report.created.memories == [A]
    assert report.skipped.memories == [A, A] and report.conflicts.memories == []
    assert mem.items[A] == a


def test_options_struct_and_keyword_override(world: World) -> None:
    target = changed_target(world)
    sl = world.export(memory_ids=[B])
    assert target.import_(
        sl, options=ImportOptions(skip_existing_ids=False)
    ).report.updated.memories == [B]
    report = target.import_(
        sl, options={"skip_existing_ids": False}, shallow_compare_existing=True
    ).report
    assert report.updated.memories == [B]
    report = target.import_(sl, options=ImportOptions(re_id_on_difference=True)).report
    assert report.skipped.memories == [B]  # re-id needs shallow_compare_existing


def test_round_trip_between_stores(world: World) -> None:
    sl = world.export(
        memory_ids=[C],
        include_parents=True,
        include_related_tasks=True,
        include_related_intents=True,
    )
    mem, intents, tasks, _ = World().import_(sl)
    back = export_slice(
        mem,
        intents,
        tasks,
        memory_ids=list(mem.items),
        intent_ids=list(intents.intents),
        task_ids=list(tasks.tasks),
    )
    assert back == sl
