"""The 23 places where the graph API differed from memex-python 0.14.0 (issue 12), each
run through both libraries' public APIs: the outcomes must be the same.

memex-python is a black box here: only its public API is called.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import memex
import pytest

import memstream


def item(i: str, **kw: Any) -> dict[str, Any]:
    return {
        "id": i,
        "scope": "s",
        "kind": "observation",
        "content": {},
        "author": "a",
        "source_kind": "observed",
        "authority": 0.5,
        **kw,
    }


def mk(lib: ModuleType, *items: dict[str, Any], edges: tuple[dict[str, Any], ...] = ()) -> Any:
    s = lib.create_graph_state()
    for x in items:
        s = lib.apply_command(s, {"type": "memory.create", "item": x}).state
    for e in edges:
        e = {"author": "a", "source_kind": "observed", "authority": 1, "active": True, **e}
        s = lib.apply_command(s, {"type": "edge.create", "edge": e}).state
    return s


def outcome(f: Callable[[ModuleType], Any], lib: ModuleType) -> Any:
    try:
        return ("ok", f(lib))
    except Exception as exc:  # the error is part of the behaviour compared
        return ("raised", type(exc).__name__, str(exc))


def same(f: Callable[[ModuleType], Any]) -> Any:
    seed, ours = outcome(f, memex), outcome(f, memstream)
    assert ours == seed
    return ours


def test_c1_edge_retract_removes_the_edge() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(
            L,
            item("a"),
            item("b"),
            edges=({"edge_id": "e1", "from": "a", "to": "b", "kind": "SUPPORTS"},),
        )
        s, ev = L.apply_command(s, {"type": "edge.retract", "edge_id": "e1", "author": "a"})
        again = outcome(
            lambda L: L.apply_command(
                s, {"type": "edge.update", "edge_id": "e1", "partial": {}, "author": "a"}
            ),
            L,
        )
        replayed = L.replay_commands(
            [
                {"type": "memory.create", "item": item("a")},
                {
                    "type": "edge.create",
                    "edge": {
                        "edge_id": "e1",
                        "from": "a",
                        "to": "a",
                        "kind": "K",
                        "author": "a",
                        "source_kind": "o",
                        "authority": 1,
                        "active": True,
                    },
                },
                {"type": "edge.retract", "edge_id": "e1", "author": "a"},
                {"type": "edge.retract", "edge_id": "e1", "author": "a"},
            ]
        )
        return (
            "e1" in s.edges,
            ev[0].edge.active,
            L.get_stats(s).edges.total,
            again[:2],
            [(x.index, type(x.error).__name__) for x in replayed.skipped],
        )

    assert same(f)[1][3] == ("raised", "EdgeNotFoundError")


@pytest.mark.parametrize("op", ["mark_contradiction", "mark_alias"])
def test_c2_marks_need_no_existing_endpoint(op: str) -> None:
    same(
        lambda L: [
            (e.type, e.edge.from_, e.edge.to)
            for e in getattr(L, op)(mk(L, item("a")), "a", "gone", "j").events
        ]
    )


def test_c3_cascade_of_an_absent_id() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(L, item("a"), item("c", parents=["gone"]), item("d", parents=["c"]))
        r1, r2 = L.cascade_retract(s, "gone", "x"), L.cascade_retract(s, "nope", "x")
        return r1.retracted, list(r1.state.items), r2.retracted, r2.state is s

    assert same(f)[1] == (["d", "c"], ["a"], [], True)


def test_c4_cascade_order() -> None:
    same(
        lambda L: (
            L.cascade_retract(
                mk(
                    L,
                    item("r"),
                    item("c1", parents=["r"]),
                    item("c2", parents=["r"]),
                    item("g", parents=["c1"]),
                    item("x", parents=["r", "c2"]),
                ),
                "r",
                "x",
            ).retracted
        )
    )


def test_c5_bulk_adjust_scores() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(L, item("none"), item("full", importance=1.0), item("half", importance=0.5))
        _, ev = L.bulk_adjust_scores(s, {}, {"importance": 0.2}, "x")
        return [(e.type, e.item.id, e.item.importance) for e in ev]

    same(f)


def test_c6_no_op_returns_the_same_state() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(L, item("a", created_at=5))
        return (
            L.apply_many(s, {}, lambda i: {}, "x").state is s,
            L.bulk_adjust_scores(s, {"scope": "nope"}, {"authority": 0.1}, "x").state is s,
            L.bulk_adjust_scores(s, {}, {}, "x").state is s,
            L.decay_importance(s, 0, 0.5, "x").state is s,
        )

    assert same(f)[1] == (True, True, True, True)


def test_c7_result_records_are_tuples() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(
            L,
            item("a"),
            item("b", parents=["gone"]),
            edges=({"edge_id": "e", "from": "a", "to": "b", "kind": "CONTRADICTS"},),
        )
        st, ev, retracted = L.cascade_retract(s, "a", "x")
        st2, ev2, skipped = L.replay_commands([])
        ((a, b, edge),) = L.get_contradictions(s)
        ((it, missing),) = L.get_stale_items(s)
        items, edges = L.get_stats(s)
        return (
            retracted,
            skipped,
            a.id,
            b.id,
            edge.edge_id,
            it.id,
            missing,
            tuple(items)[0],
            tuple(edges),
            isinstance(L.get_stats(s), tuple),
        )

    same(f)


def test_c8_graph_state_maps_are_assignable_and_clones_independent() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(L, item("a"))
        c = L.clone_graph_state(s)
        c.items["zz"] = L.MemoryItem(**item("zz", parents=["a"]))
        del c.items["a"]
        e = L.create_graph_state()
        e.items["q"] = L.MemoryItem(**item("q"))
        return (
            c.items is s.items,
            list(s.items),
            list(c.items),
            [x.id for x in L.get_stale_items(c)],
            [x.id for x in L.get_items(e)],
            list(L.create_graph_state().items),
            list(L.apply_command(c, {"type": "memory.create", "item": item("a")}).state.items),
        )

    same(f)
    # The one difference left (README, Compatibility): persistent maps, not dicts.
    assert isinstance(memex.create_graph_state().items, dict)
    assert not isinstance(memstream.create_graph_state().items, dict)


@pytest.mark.parametrize(
    "flt",
    [
        {"or": []},
        {"range": {"conviction": {"max": 0.5}}},
        {"range": {"conviction": {}}},
        {"not": {"or": []}},
    ],
)
def test_c9_filters(flt: dict[str, Any]) -> None:
    same(lambda L: [i.id for i in L.get_items(mk(L, item("a"), item("b", conviction=0.3)), flt)])


@pytest.mark.parametrize(
    "call",
    [
        lambda L: L.get_items(
            L.create_graph_state(), None, {"sort": {"field": "bogus", "order": "asc"}}
        ),
        lambda L: L.get_items(mk(L, item("a")), None, {"sort": {"field": "bogus", "order": "asc"}}),
        lambda L: L.get_scored_items(
            mk(L, item("a", created_at=1)),
            {"authority": 1, "decay": {"rate": 0.1, "interval": "month", "type": "exponential"}},
        ),
        lambda L: L.get_scored_items(
            L.create_graph_state(),
            {"authority": 1, "decay": {"rate": 0.1, "interval": "month", "type": "exponential"}},
        ),
        lambda L: L.get_items(
            mk(L, item("a", created_at=1)),
            {"decay": {"config": {"rate": 0.1, "interval": "hour", "type": "cubic"}, "min": 0.1}},
        ),
    ],
)
def test_c10_unknown_sort_field_or_decay_raises_only_when_used(call: Any) -> None:
    same(lambda L: [getattr(x, "id", None) for x in call(L)])


@pytest.mark.parametrize(
    "value",
    [
        "custom-id-12345",
        "00000000-0000-7000-8000-000000000000",
        "{01a23c77-6b71-7380-9c69-e1ff3816e7fc}",
        12,
    ],
)
def test_c11_extract_timestamp(value: Any) -> None:
    same(lambda L: (L.extract_timestamp(value), L.safe_extract_timestamp(value)))


def test_c12_filter_contradictions_ties_and_self() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(
            L,
            item("aaa"),
            item("zzz"),
            item("solo"),
            edges=(
                {"edge_id": "e1", "from": "aaa", "to": "zzz", "kind": "CONTRADICTS"},
                {"edge_id": "e2", "from": "solo", "to": "solo", "kind": "CONTRADICTS"},
            ),
        )
        out = []
        for order in (("zzz", "aaa", "solo"), ("aaa", "zzz", "solo")):
            sc = [L.ScoredItem(item=s.items[i], score=0.5) for i in order]
            out.append([x.item.id for x in L.filter_contradictions(s, sc)])
        return out

    assert same(f)[1] == [["aaa"], ["aaa"]]


def test_c13_surface_contradictions_leaves_its_input() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(
            L,
            item("a"),
            item("b"),
            edges=({"edge_id": "e1", "from": "a", "to": "b", "kind": "CONTRADICTS"},),
        )
        sc = [L.ScoredItem(item=s.items[i], score=0.5) for i in ("a", "b")]
        out = L.surface_contradictions(s, sc)
        return (
            [x.contradicted_by for x in sc],
            [x is y for x, y in zip(out, sc, strict=True)],
            [[c.id for c in x.contradicted_by] for x in out],
        )

    same(f)


def test_c14_apply_diversity_counts_repeated_parents() -> None:
    same(
        lambda L: [
            (x.item.id, x.score)
            for x in L.apply_diversity(
                [
                    L.ScoredItem(item=L.MemoryItem(**item("k", parents=["p", "p"])), score=0.5),
                    L.ScoredItem(item=L.MemoryItem(**item("j", parents=["p"])), score=0.9),
                ],
                {"parent_penalty": 0.1},
            )
        ]
    )


def test_c15_stale_items_list_missing_parents_as_they_appear() -> None:
    same(
        lambda L: [
            s.missing_parents
            for s in L.get_stale_items(mk(L, item("k", parents=["gone", "x", "gone"]), item("x")))
        ]
    )


def test_c16_dependents_include_the_item_on_a_cycle() -> None:
    same(
        lambda L: (
            [i.id for i in L.get_dependents(mk(L, item("z", parents=["z"])), "z")],
            [
                i.id
                for i in L.get_dependents(
                    mk(L, item("a", parents=["b"]), item("b", parents=["a"])), "a", True
                )
            ],
        )
    )


def test_c17_aliases_are_directional() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(
            L,
            item("a"),
            item("b"),
            item("c"),
            edges=(
                {"edge_id": "e1", "from": "a", "to": "b", "kind": "ALIAS"},
                {"edge_id": "e2", "from": "gone", "to": "c", "kind": "ALIAS"},
                {"edge_id": "e3", "from": "b", "to": "gone", "kind": "ALIAS"},
            ),
        )
        ids = lambda xs: [i.id for i in xs]  # noqa: E731
        return (
            ids(L.get_alias_group(s, "b")),
            ids(L.get_aliases(s, "b")),
            ids(L.get_alias_group(s, "gone")),
            ids(L.get_alias_group(s, "a")),
        )

    same(f)


def test_c18_support_tree_repeats_an_expanded_item_as_a_leaf() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(L, item("m1", parents=["m2", "m3"]), item("m2", parents=["m1", "m3"]), item("m3"))

        def show(n: Any) -> Any:
            return (n.item.id, [show(p) for p in n.parents])

        return show(L.get_support_tree(s, "m1")), [i.id for i in L.get_support_set(s, "m1")]

    same(f)


def test_c19_wrapped_payloads_hold_the_models() -> None:
    def f(L: ModuleType) -> Any:
        it = L.MemoryItem(**item("m1"))
        ev = L.MemoryLifecycleEvent(type="memory.created", item=it, cause_type="memory.create")
        env = L.wrap_lifecycle_event(ev, "c1")
        st = L.wrap_state_event(it, "c2")
        return (
            env.payload["item"] is it,
            list(env.payload),
            env.payload["type"],
            st.payload["item"] is it,
        )

    same(f)


def test_c20_export_related_walks() -> None:
    def f(L: ModuleType) -> Any:
        mem = mk(L, item("m1"))
        ist = L.apply_intent_command(
            L.create_intent_state(),
            {
                "type": "intent.create",
                "intent": L.create_intent(
                    id="i1", label="g", priority=0.5, owner="o", root_memory_ids=["m1"]
                ),
            },
        ).state
        tst = L.apply_task_command(
            L.create_task_state(),
            {
                "type": "task.create",
                "task": L.create_task(
                    id="t1", intent_id="i1", action="s", priority=0.5, input_memory_ids=["m1"]
                ),
            },
        ).state
        a = L.export_slice(
            mem,
            ist,
            tst,
            memory_ids=["m1"],
            include_related_intents=True,
            include_related_tasks=True,
        )
        b = L.export_slice(mem, ist, tst, task_ids=["t1"], include_related_intents=True)
        return [i.id for i in a.intents], [t.id for t in a.tasks], [i.id for i in b.intents]

    same(f)


def test_c21_re_id_of_an_id_without_a_time() -> None:
    raised = same(
        lambda L: (
            L.import_slice(
                mk(L, item("custom", authority=0.9)),
                L.create_intent_state(),
                L.create_task_state(),
                {"memories": [item("custom", authority=0.1)]},
                shallow_compare_existing=True,
                re_id_on_difference=True,
            ).report.created.memories
        )
    )
    assert raised[:2] == ("raised", "ValueError")


def test_c22_edge_update_replaces_meta() -> None:
    def f(L: ModuleType) -> Any:
        s = mk(
            L,
            item("a"),
            edges=({"edge_id": "e1", "from": "a", "to": "a", "kind": "K", "meta": {"k1": 1}},),
        )
        s = L.apply_command(
            s,
            {"type": "edge.update", "edge_id": "e1", "partial": {"meta": {"k2": 2}}, "author": "a"},
        ).state
        s = L.apply_command(
            s,
            {
                "type": "memory.update",
                "item_id": "a",
                "partial": {"meta": {"k2": 2}},
                "author": "a",
            },
        ).state
        return s.edges["e1"].meta, s.items["a"].meta

    same(f)


def test_c23_intent_and_task_updates_replace_context_and_meta() -> None:
    def f(L: ModuleType) -> Any:
        s = L.apply_intent_command(
            L.create_intent_state(),
            {
                "type": "intent.create",
                "intent": L.create_intent(
                    id="i1", label="g", priority=0.5, owner="o", context={"c1": 1}, meta={"m1": 1}
                ),
            },
        ).state
        s = L.apply_intent_command(
            s,
            {
                "type": "intent.update",
                "intent_id": "i1",
                "partial": {"context": {"c2": 2}, "meta": {"m2": 2}},
                "author": "o",
            },
        ).state
        t = L.apply_task_command(
            L.create_task_state(),
            {
                "type": "task.create",
                "task": L.create_task(
                    id="t1", intent_id="i1", action="s", priority=0.5, meta={"m1": 1}
                ),
            },
        ).state
        t = L.apply_task_command(
            t,
            {"type": "task.update", "task_id": "t1", "partial": {"meta": {"m2": 2}}, "author": "o"},
        ).state
        return s.intents["i1"].context, s.intents["i1"].meta, t.tasks["t1"].meta

    same(f)
