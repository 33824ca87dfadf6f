"""Seed 003 memory-graph queries: filters, sort, edges, navigation, scoring, retrieval, stats."""

from __future__ import annotations

import math

import pytest

from projector.graph.decay import compute_decay_multiplier
from projector.graph.reducer import apply_command
from projector.graph.replay import replay_commands
from projector.graph.selection import get_item_by_id, get_items, matches_filter
from projector.graph.state import GraphState
from queryd.graph.edges import get_edge_by_id, get_edges
from queryd.graph.integrity import get_alias_group, get_aliases, get_dependents
from queryd.graph.navigation import get_children, get_parents, get_related_items
from queryd.graph.retrieval import (
    apply_diversity,
    filter_contradictions,
    get_items_by_budget,
    get_support_set,
    get_support_tree,
    smart_retrieve,
    surface_contradictions,
)
from queryd.graph.scoring import compute_score, get_scored_items
from queryd.graph.stats import get_stats
from schemas.graph.commands import EdgeCreate, EdgeRetract, MemoryCreate
from schemas.graph.filters import MemoryFilter
from schemas.graph.ids import now_ms
from schemas.graph.items import Edge, MemoryItem, create_edge, create_memory_item

DAY = 86_400_000


def item(id: str, **kw: object) -> MemoryItem:
    args: dict[str, object] = dict(
        id=id,
        scope="user:a/general",
        kind="observation",
        content={},
        author="agent:1",
        source_kind="observed",
        authority=0.5,
        created_at=1000,
    )
    args.update(kw)
    return create_memory_item(**args)  # type: ignore[arg-type]


def edge(eid: str, a: str, b: str, kind: str = "SUPPORTS", **kw: object) -> Edge:
    return create_edge(
        edge_id=eid,
        from_=a,
        to=b,
        kind=kind,
        author="x",
        source_kind="observed",
        authority=1.0,
        **kw,
    )  # type: ignore[arg-type]


def state(*objs: MemoryItem | Edge) -> GraphState:
    cmds = [MemoryCreate(item=o) if isinstance(o, MemoryItem) else EdgeCreate(edge=o) for o in objs]
    res = replay_commands(cmds)
    assert not res.skipped
    return res.state


def ids(xs: list[MemoryItem]) -> list[str]:
    return [x.id for x in xs]


# -- filters ----------------------------------------------------------------------------------


@pytest.fixture
def sample() -> GraphState:
    return state(
        item(
            "a",
            scope="user:a/general",
            authority=0.9,
            importance=0.1,
            meta={"x": {"y": 1}},
            intent_id="i1",
            created_at=100,
        ),
        item(
            "b",
            scope="user:a/work",
            kind="assertion",
            authority=0.2,
            conviction=0.7,
            parents=["a"],
            task_id="t1",
            created_at=300,
        ),
        item(
            "c",
            scope="user:b",
            author="agent:2",
            authority=0.5,
            parents=["a", "b"],
            source_kind="agent_inferred",
            created_at=200,
        ),
        item("d", scope="user:ab", authority=0.5, importance=0.9, created_at=None),
    )


@pytest.mark.parametrize(
    ("f", "expected"),
    [
        ({}, ["a", "b", "c", "d"]),
        ({"ids": ["d", "a", "zz"]}, ["a", "d"]),
        ({"scope": "user:a/work"}, ["b"]),
        ({"scope_prefix": "user:a"}, ["a", "b", "d"]),
        ({"scope_prefix": "user:a/"}, ["a", "b"]),
        ({"scope": "user:b", "scope_prefix": "user:a"}, []),
        ({"author": "agent:2"}, ["c"]),
        ({"kind": "assertion"}, ["b"]),
        ({"source_kind": "agent_inferred"}, ["c"]),
        ({"range": {"authority": {"min": 0.5}}}, ["a", "c", "d"]),
        ({"range": {"authority": {"min": 0.3, "max": 0.5}}}, ["c", "d"]),
        ({"range": {"importance": {"max": 0.5}}}, ["a"]),  # C9: a missing score is outside
        ({"intent_id": "i1"}, ["a"]),
        ({"intent_ids": ["i1", "i2"]}, ["a"]),
        ({"task_id": "t1"}, ["b"]),
        ({"task_ids": ["t1"]}, ["b"]),
        ({"has_parent": "a"}, ["b", "c"]),
        ({"is_root": True}, ["a", "d"]),
        ({"is_root": False}, ["b", "c"]),
        ({"parents": {"includes": "b"}}, ["c"]),
        ({"parents": {"includes_any": ["b", "zz"]}}, ["c"]),
        ({"parents": {"includes_all": ["a", "b"]}}, ["c"]),
        ({"parents": {"count": {"min": 1, "max": 1}}}, ["b"]),
        ({"created": {"after": 200}}, ["b", "c", "d"]),  # d: created now (no v7 id)
        ({"created": {"before": 200}}, ["a"]),
        ({"created": {"after": 100, "before": 300}}, ["a", "c"]),
        ({"not": {"scope_prefix": "user:a"}}, ["c"]),
        ({"or": [{"author": "agent:2"}, {"ids": ["a"]}]}, ["a", "c"]),
        ({"or": []}, ["a", "b", "c", "d"]),  # C9: no alternative is no condition
        ({"meta": {"x.y": 1}}, ["a"]),
        ({"meta": {"x.y": 2}}, []),
        ({"meta_has": ["x.y"]}, ["a"]),
        ({"meta_has": ["x.z"]}, []),
        ({"scope_prefix": "user:a", "is_root": True, "range": {"importance": {"min": 0.5}}}, ["d"]),
    ],
)
def test_filters(sample: GraphState, f: dict[str, object], expected: list[str]) -> None:
    assert ids(get_items(sample, f)) == expected
    model = MemoryFilter.model_validate(f)
    assert [i for i in sample.items.values() if matches_filter(i, model)] == get_items(sample, f)
    assert [i for i in sample.items.values() if matches_filter(i, f)] == get_items(sample, f)


def test_decay_filter(sample: GraphState) -> None:
    now = now_ms()
    st = state(item("old", created_at=now - 10 * DAY), item("new", created_at=now))
    f = {"decay": {"config": {"rate": 0.5, "interval": "day", "type": "exponential"}, "min": 0.5}}
    assert ids(get_items(st, f)) == ["new"]


def test_sort_multi_key_ties_keep_insertion_order(sample: GraphState) -> None:
    got = get_items(sample, None, {"sort": {"field": "authority", "order": "desc"}})
    assert ids(got) == ["a", "c", "d", "b"]  # c and d tie: insertion order
    got = get_items(sample, None, {"sort": {"field": "authority", "order": "asc"}})
    assert ids(got) == ["b", "c", "d", "a"]
    got = get_items(
        sample,
        None,
        {
            "sort": [
                {"field": "authority", "order": "asc"},
                {"field": "importance", "order": "desc"},
            ]
        },
    )
    assert ids(got) == ["b", "d", "c", "a"]
    assert ids(get_items(sample, None, {"sort": {"field": "recency", "order": "desc"}}))[0] == "d"
    assert ids(
        get_items(
            sample, None, {"sort": {"field": "recency", "order": "asc"}, "offset": 1, "limit": 2}
        )
    ) == ["c", "b"]
    assert ids(get_items(sample, None, {"limit": 0})) == []
    with pytest.raises(ValueError):
        get_items(sample, None, {"sort": {"field": "popularity"}})


def test_get_item_by_id(sample: GraphState) -> None:
    assert get_item_by_id(sample, "a") is sample.items["a"]
    assert get_item_by_id(sample, "nope") is None


# -- edges and navigation ---------------------------------------------------------------------


def test_edges_and_navigation() -> None:
    st = state(
        item("a"),
        item("b", parents=["a"]),
        item("c", parents=["a", "ghost"]),
        edge("e1", "a", "b", weight=0.9),
        edge("e2", "c", "a", kind="ABOUT", weight=0.2),
        edge("e3", "a", "c"),
    )
    st = apply_command(  # inactive, still there (a retract would remove it: C1)
        st, {"type": "edge.update", "edge_id": "e3", "partial": {"active": False}, "author": "x"}
    ).state
    assert [e.edge_id for e in get_edges(st)] == ["e1", "e2"]
    assert [e.edge_id for e in get_edges(st, {"active_only": False})] == ["e1", "e2", "e3"]
    assert [e.edge_id for e in get_edges(st, {"from": "a"})] == ["e1"]
    assert [e.edge_id for e in get_edges(st, {"from": "a", "active_only": False})] == ["e1", "e3"]
    gone = apply_command(st, EdgeRetract(edge_id="e3", author="x")).state
    assert [e.edge_id for e in get_edges(gone, {"active_only": False})] == ["e1", "e2"]
    assert [e.edge_id for e in get_edges(st, {"to": "a"})] == ["e2"]
    assert [e.edge_id for e in get_edges(st, {"kind": "ABOUT"})] == ["e2"]
    assert [e.edge_id for e in get_edges(st, {"min_weight": 0.5})] == ["e1"]
    assert get_edge_by_id(st, "e3") is not None and get_edge_by_id(st, "zz") is None
    assert ids(get_parents(st, "c")) == ["a"]
    assert ids(get_children(st, "a")) == ["b", "c"]
    assert ids(get_related_items(st, "a")) == ["b", "c"]
    assert ids(get_related_items(st, "a", "from")) == ["b"]
    assert ids(get_related_items(st, "a", "to")) == ["c"]
    assert get_related_items(st, "a", "sideways") == []  # type: ignore[arg-type]  # the seed's
    assert ids(get_dependents(st, "a")) == ["b", "c"]


def test_dependents_transitive_and_aliases() -> None:
    st = state(
        item("a"),
        item("b", parents=["a"]),
        item("c", parents=["b"]),
        item("d", parents=["c", "a"]),
        item("x"),
        item("y"),
        item("z"),
        edge("l1", "x", "y", kind="ALIAS"),
        edge("l2", "z", "y", kind="ALIAS"),
    )
    # The seed's walk: a stack of children, the latest pushed first.
    assert ids(get_dependents(st, "a", transitive=True)) == ["d", "b", "c"]
    # Aliases are directional (C17): y has no outgoing ALIAS edge; x reaches y only.
    assert ids(get_aliases(st, "y")) == [] and ids(get_aliases(st, "x")) == ["y"]
    assert ids(get_alias_group(st, "x")) == ["x", "y"]
    assert ids(get_alias_group(st, "z")) == ["z", "y"]
    assert get_alias_group(st, "ghost") == []


# -- scoring ----------------------------------------------------------------------------------


def test_decay_multiplier() -> None:
    now = 10 * DAY
    it = item("a", created_at=now - 2 * DAY)
    exp = {"rate": 0.5, "interval": "day", "type": "exponential"}
    assert compute_decay_multiplier(it, exp, now=now) == pytest.approx(0.25)
    lin = {"rate": 0.3, "interval": "day", "type": "linear"}
    assert compute_decay_multiplier(it, lin, now=now) == pytest.approx(0.4)
    assert compute_decay_multiplier(it, {**lin, "rate": 0.9}, now=now) == 0.0
    half = item("h", created_at=now - int(1.5 * DAY))
    step = {"rate": 0.5, "interval": "day", "type": "step"}
    assert compute_decay_multiplier(half, step, now=now) == pytest.approx(0.5)
    wk = {"rate": 0.5, "interval": "week", "type": "exponential"}
    assert compute_decay_multiplier(item("w", created_at=now - 7 * DAY), wk, now=now) == 0.5
    hr = {"rate": 0.5, "interval": "hour", "type": "exponential"}
    assert compute_decay_multiplier(item("w", created_at=now - 3_600_000), hr, now=now) == 0.5
    future = item("f", created_at=now + DAY)
    assert compute_decay_multiplier(future, exp, now=now) == 1.0
    assert compute_decay_multiplier(item("f2", created_at=now_ms() + DAY), exp) == 1.0


def test_compute_score() -> None:
    it = item("a", authority=0.8, importance=0.5)
    assert compute_score(it, {"authority": 1.0, "importance": 0.5}) == pytest.approx(1.05)
    assert compute_score(it, {"conviction": 3.0}) == 0.0
    with pytest.raises(ValueError):
        compute_score(it, {"decay": {"rate": 0.1, "interval": "year", "type": "linear"}})


def test_get_scored_items_pipeline(sample: GraphState) -> None:
    w = {"authority": 1.0, "importance": 1.0}
    got = get_scored_items(sample, w)
    assert [(s.item.id, round(s.score, 3)) for s in got] == [
        ("d", 1.4),
        ("a", 1.0),
        ("c", 0.5),
        ("b", 0.2),
    ]
    assert ids([s.item for s in get_scored_items(sample, w, {"min_score": 0.5})]) == ["d", "a", "c"]
    assert ids([s.item for s in get_scored_items(sample, w, {"pre": {"is_root": False}})]) == [
        "c",
        "b",
    ]
    assert ids(
        [
            s.item
            for s in get_scored_items(
                sample, w, {"post": {"author": "agent:1"}, "offset": 1, "limit": 1}
            )
        ]
    ) == ["a"]
    ties = state(item("t1"), item("t2"), item("t3"))
    assert ids([s.item for s in get_scored_items(ties, {"authority": 1}, {"limit": 2})]) == [
        "t1",
        "t2",
    ]


# -- retrieval --------------------------------------------------------------------------------


def test_support_tree_and_set_with_cycle() -> None:
    st = state(item("a", parents=["c"]), item("b", parents=["a"]), item("c", parents=["b", "a"]))
    tree = get_support_tree(st, "c")
    assert tree is not None and tree.item.id == "c"
    assert ids(get_support_set(st, "c")) == ["c", "b", "a"]
    assert get_support_tree(st, "ghost") is None and get_support_set(st, "ghost") == []


def _contradicting() -> GraphState:
    return state(
        item("hi", authority=0.9),
        item("lo", authority=0.3),
        item("old", authority=1.0),
        item("new", authority=0.1),
        item("self", authority=0.5),
        edge("c1", "lo", "hi", kind="CONTRADICTS"),
        edge("s1", "new", "old", kind="SUPERSEDES"),
        edge("c2", "self", "self", kind="CONTRADICTS"),
    )


def test_filter_and_surface_contradictions() -> None:
    st = _contradicting()
    scored = get_scored_items(st, {"authority": 1.0})
    # C12: a self-contradiction drops its item.
    assert ids([s.item for s in filter_contradictions(st, scored)]) == ["hi", "new"]
    surfaced = surface_contradictions(st, scored)
    assert ids([s.item for s in surfaced]) == ["hi", "self", "lo", "new"]
    by = {s.item.id: s.contradicted_by for s in surfaced}
    assert by["hi"] is not None and ids(by["hi"]) == ["lo"]
    assert by["lo"] is not None and ids(by["lo"]) == ["hi"]
    assert by["self"] is None and by["new"] is None


def test_apply_diversity() -> None:
    st = state(
        item("a", authority=0.9, author="x"),
        item("b", authority=0.8, author="x"),
        item("c", authority=0.7, author="y"),
        item("d", authority=0.6, author="x"),
    )
    scored = get_scored_items(st, {"authority": 1.0})
    out = apply_diversity(scored, {"author_penalty": 0.25})
    assert [(s.item.id, round(s.score, 2)) for s in out] == [
        ("a", 0.9),
        ("c", 0.7),
        ("b", 0.55),
        ("d", 0.1),
    ]
    assert scored[1].score == 0.8  # inputs untouched
    clamp = apply_diversity(scored, {"author_penalty": 5})
    assert min(s.score for s in clamp) == 0.0


def test_smart_retrieve_and_budget() -> None:
    st = _contradicting()

    def cost(i: MemoryItem) -> float:
        return 1.0

    got = smart_retrieve(
        st, budget=2, cost_fn=cost, weights={"authority": 1.0}, contradictions="filter"
    )
    assert ids([s.item for s in got]) == ["hi", "new"]
    got = smart_retrieve(
        st,
        budget=10,
        cost_fn=cost,
        weights={"authority": 1.0},
        contradictions="surface",
        diversity={"author_penalty": 0.0},
        filter={"ids": ["hi", "lo"]},
    )
    assert ids([s.item for s in got]) == ["hi", "lo"] and got[0].contradicted_by
    costs = {"old": 5.0, "hi": 1.0}
    packed = get_items_by_budget(
        st, budget=2, cost_fn=lambda i: costs.get(i.id, 1.0), weights={"authority": 1.0}
    )
    assert ids([s.item for s in packed]) == ["hi", "self"]  # old does not fit, skipped
    for bad in (-1.0, math.nan, math.inf, "1"):
        with pytest.raises(ValueError):
            get_items_by_budget(
                st,
                budget=10,
                cost_fn=lambda i, b=bad: b,  # type: ignore[misc]
                weights={"authority": 1.0},
            )
    with pytest.raises(ValueError):
        smart_retrieve(st, budget=1, cost_fn=cost, weights={}, contradictions="ignore")  # type: ignore[arg-type]


# -- stats ------------------------------------------------------------------------------------


def test_stats(sample: GraphState) -> None:
    st = apply_command(sample, EdgeCreate(edge=edge("e", "a", "b"))).state
    st = apply_command(st, EdgeCreate(edge=edge("f", "a", "c", kind="ABOUT"))).state
    st = apply_command(
        st, {"type": "edge.update", "edge_id": "f", "partial": {"active": False}, "author": "x"}
    ).state
    s = get_stats(st)
    assert s.items.total == 4 and s.items.with_parents == 2 and s.items.root == 2
    assert s.items.by_kind == {"observation": 3, "assertion": 1}
    assert s.items.by_author == {"agent:1": 3, "agent:2": 1}
    assert s.items.by_scope["user:a/general"] == 1
    assert s.items.by_source_kind == {"observed": 3, "agent_inferred": 1}
    assert (s.edges.total, s.edges.active, s.edges.by_kind) == (2, 1, {"SUPPORTS": 1, "ABOUT": 1})
    gone = get_stats(apply_command(st, EdgeRetract(edge_id="f", author="x")).state)
    assert (gone.edges.total, gone.edges.by_kind) == (1, {"SUPPORTS": 1})  # C1: removed
