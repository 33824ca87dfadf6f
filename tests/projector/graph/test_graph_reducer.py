"""Seed 003 memory reducer, integrity mutations, bulk operations and replay."""

from __future__ import annotations

import pickle
import random

import pytest
from pydantic import ValidationError

from projector.graph.bulk import apply_many, bulk_adjust_scores, decay_importance
from projector.graph.integrity import (
    cascade_retract,
    mark_alias,
    mark_contradiction,
    resolve_contradiction,
)
from projector.graph.pmap import OrderedPMap
from projector.graph.reducer import apply_command, merge_edge, merge_item
from projector.graph.replay import replay_commands, replay_from_envelopes
from projector.graph.state import (
    CommandResult,
    GraphState,
    build_index,
    clone_graph_state,
    create_graph_state,
)
from queryd.graph.integrity import get_aliases, get_contradictions, get_stale_items
from schemas.graph.commands import (
    EdgeCreate,
    EdgeRetract,
    EdgeUpdate,
    MemoryCreate,
    MemoryRetract,
    MemoryUpdate,
)
from schemas.graph.envelopes import create_event_envelope
from schemas.graph.errors import (
    DuplicateEdgeError,
    DuplicateMemoryError,
    EdgeNotFoundError,
    InvalidTimestampError,
    MemoryNotFoundError,
)
from schemas.graph.ids import now_ms
from schemas.graph.items import Edge, MemoryItem, create_edge, create_memory_item


def item(id: str, parents: list[str] | None = None, **kw: object) -> MemoryItem:
    args: dict[str, object] = dict(
        id=id,
        scope="s",
        kind="observation",
        content={"v": id},
        author="a",
        source_kind="observed",
        authority=0.8,
        parents=parents,
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
        author="a",
        source_kind="observed",
        authority=1.0,
        **kw,
    )  # type: ignore[arg-type]


def build(*cmds: object) -> GraphState:
    st = create_graph_state()
    for c in cmds:
        st = apply_command(st, c).state  # type: ignore[arg-type]
    return st


def index_of(st: GraphState) -> object:
    return build_index(st.items, st.edges)  # type: ignore[arg-type]


def assert_index_consistent(st: GraphState) -> None:
    fresh = build_index(st.items, st.edges)  # type: ignore[arg-type]
    idx = st.index
    for name in ("children", "outgoing", "incoming", "active_by_kind"):
        a, b = getattr(idx, name), getattr(fresh, name)
        assert {k: set(v) for k, v in a.items()} == {k: set(v) for k, v in b.items()}, name
    assert set(idx.stale) == set(fresh.stale)


# -- OrderedPMap ------------------------------------------------------------------------------


def test_ordered_pmap_matches_dict_semantics() -> None:
    rng = random.Random(7)
    ref: dict[int, int] = {}
    m: OrderedPMap[int, int] = OrderedPMap()
    versions = []
    for i in range(5000):
        k = rng.randrange(400)
        if rng.random() < 0.6:
            ref[k] = i
            m = m.set(k, i)
        else:
            ref.pop(k, None)
            m = m.discard(k)
        if i % 250 == 0:
            versions.append((dict(ref), m))
    assert list(m.items()) == list(ref.items())
    for snapshot, old in versions:  # old versions are unchanged
        assert list(old.items()) == list(snapshot.items())
        assert len(old) == len(snapshot)
    assert pickle.loads(pickle.dumps(m)) == m
    with pytest.raises(KeyError):
        m.set_new(next(iter(m)), 0)


# -- create / update / retract ----------------------------------------------------------------


def test_create_and_events_and_old_state_unchanged() -> None:
    s0 = create_graph_state()
    res = apply_command(s0, MemoryCreate(item=item("a")))
    assert isinstance(res, CommandResult)
    s1, events = res
    assert len(s0.items) == 0 and "a" not in s0.items
    assert s1.items["a"].id == "a" and len(s1.items) == 1
    assert [(e.namespace, e.type, e.cause_type) for e in events] == [
        ("memory", "memory.created", "memory.create")
    ]
    assert events[0].item is s1.items["a"] and events[0].edge is None


def test_dict_commands_accepted() -> None:
    st = build({"type": "memory.create", "item": item("a").model_dump()})
    assert st.items["a"].authority == 0.8


def test_duplicate_and_missing_errors_leave_no_trace() -> None:
    st = build(MemoryCreate(item=item("a")), EdgeCreate(edge=edge("e", "a", "a")))
    before = (dict(st.items), dict(st.edges))
    with pytest.raises(DuplicateMemoryError) as e1:
        apply_command(st, MemoryCreate(item=item("a")))
    assert e1.value.item_id == "a"
    with pytest.raises(DuplicateEdgeError) as e2:
        apply_command(st, EdgeCreate(edge=edge("e", "a", "a")))
    assert e2.value.edge_id == "e"
    with pytest.raises(MemoryNotFoundError) as e3:
        apply_command(st, MemoryUpdate(item_id="zz", partial={}, author="x"))
    assert e3.value.item_id == "zz"
    with pytest.raises(MemoryNotFoundError):
        apply_command(st, MemoryRetract(item_id="zz", author="x"))
    with pytest.raises(EdgeNotFoundError) as e4:
        apply_command(st, EdgeUpdate(edge_id="zz", partial={}, author="x"))
    assert e4.value.edge_id == "zz"
    with pytest.raises(EdgeNotFoundError):
        apply_command(st, EdgeRetract(edge_id="zz", author="x"))
    assert (dict(st.items), dict(st.edges)) == before


def test_update_merges_and_keeps_identity_and_position() -> None:
    st = build(
        MemoryCreate(item=item("a", meta={"m": 1})),
        MemoryCreate(item=item("b")),
    )
    st2, ev = apply_command(
        st,
        MemoryUpdate(
            item_id="a",
            author="x",
            partial={
                "content": {"w": 2},
                "meta": {"n": 2},
                "id": "hijack",
                "created_at": 5,
                "importance": 0.4,
                "unknown_key": 1,
            },
        ),
    )
    a = st2.items["a"]
    assert a.content == {"v": "a", "w": 2} and a.meta == {"m": 1, "n": 2}
    assert a.id == "a" and a.created_at == 1000 and a.importance == 0.4
    assert a.unknown_key == 1  # set as the seed's model_copy(update=) sets it
    assert list(st2.items) == ["a", "b"]  # an updated item keeps its position
    assert ev[0].type == "memory.updated" and ev[0].item is a
    assert st.items["a"].importance is None  # old state unchanged


def test_updates_do_not_revalidate_scores() -> None:
    st = build(MemoryCreate(item=item("a")))
    st = apply_command(st, MemoryUpdate(item_id="a", partial={"authority": 7.5}, author="x")).state
    assert st.items["a"].authority == 7.5
    assert merge_item(item("b"), {"importance": -3}).importance == -3
    e = merge_edge(edge("e", "a", "b"), {"weight": 9, "from": "z", "to": "z", "edge_id": "z"})
    assert (e.weight, e.from_, e.to, e.edge_id) == (9, "a", "b", "e")


def test_retract_item_removes_incident_edges_one_event_each() -> None:
    st = build(
        MemoryCreate(item=item("a")),
        MemoryCreate(item=item("b")),
        MemoryCreate(item=item("c")),
        EdgeCreate(edge=edge("e1", "a", "b")),
        EdgeCreate(edge=edge("e2", "c", "a")),
        EdgeCreate(edge=edge("e3", "a", "a")),
        EdgeCreate(edge=edge("e4", "b", "c")),
    )
    st2, events = apply_command(st, MemoryRetract(item_id="a", author="x"))
    assert [e.type for e in events] == ["memory.retracted"] + ["edge.retracted"] * 3
    assert [e.edge.edge_id for e in events[1:] if e.edge] == ["e1", "e2", "e3"]
    # Each event carries the edge as it was (the seed's), active here.
    assert all(e.edge is not None and e.edge.active is True for e in events[1:])
    assert "a" not in st2.items and list(st2.edges) == ["e4"]
    assert_index_consistent(st2)


def test_edge_update_and_retract() -> None:
    st = build(EdgeCreate(edge=edge("e", "a", "b", kind="CONTRADICTS")))
    st2, ev = apply_command(st, EdgeRetract(edge_id="e", author="x"))
    # Retracted means gone (C1), the event carrying the edge as it was.
    assert "e" not in st2.edges and st.edges["e"].active is True
    assert ev[0].type == "edge.retracted" and ev[0].edge.active is True
    with pytest.raises(EdgeNotFoundError):
        apply_command(st2, EdgeRetract(edge_id="e", author="x"))
    st3, ev = apply_command(st, EdgeUpdate(edge_id="e", partial={"kind": "SUPPORTS"}, author="x"))
    assert st3.edges["e"].kind == "SUPPORTS" and ev[0].type == "edge.updated"
    for s in (st2, st3):
        assert_index_consistent(s)


def test_stale_index_follows_parents() -> None:
    st = build(MemoryCreate(item=item("c", ["p", "q"])))
    assert [s.missing_parents for s in get_stale_items(st)] == [["p", "q"]]
    st = apply_command(st, MemoryCreate(item=item("p"))).state
    assert [s.missing_parents for s in get_stale_items(st)] == [["q"]]
    st = apply_command(st, MemoryCreate(item=item("q"))).state
    assert get_stale_items(st) == []
    st = apply_command(st, MemoryRetract(item_id="p", author="x")).state
    assert [s.item.id for s in get_stale_items(st)] == ["c"]
    st = apply_command(st, MemoryUpdate(item_id="c", partial={"parents": ["q"]}, author="x")).state
    assert get_stale_items(st) == []
    assert_index_consistent(st)


def test_clone_and_plain_mapping_construction() -> None:
    st = build(MemoryCreate(item=item("a", ["b"])), MemoryCreate(item=item("b")))
    cl = clone_graph_state(st)
    assert cl == st and cl is not st
    plain = GraphState(items={"a": st.items["a"], "b": st.items["b"]}, edges={})
    assert plain == st and list(plain.items.values()) == list(st.items.values())
    assert_index_consistent(plain)


def test_random_commands_keep_index_consistent() -> None:
    rng = random.Random(3)
    st = create_graph_state()
    ids = [f"i{n}" for n in range(30)]
    for n in range(600):
        r = rng.random()
        i, j = rng.choice(ids), rng.choice(ids)
        if r < 0.35:
            cmd: object = MemoryCreate(item=item(i, rng.sample(ids, rng.randrange(3))))
        elif r < 0.5:
            cmd = MemoryRetract(item_id=i, author="x")
        elif r < 0.6:
            cmd = MemoryUpdate(item_id=i, partial={"parents": rng.sample(ids, 2)}, author="x")
        elif r < 0.8:
            cmd = EdgeCreate(edge=edge(f"e{n}", i, j, rng.choice(["ALIAS", "CONTRADICTS"])))
        elif r < 0.9 and len(st.edges):
            cmd = EdgeRetract(edge_id=rng.choice(list(st.edges)), author="x")
        else:
            continue
        try:
            st = apply_command(st, cmd).state  # type: ignore[arg-type]
        except (DuplicateMemoryError, MemoryNotFoundError):
            pass
    assert_index_consistent(st)


# -- integrity mutations ----------------------------------------------------------------------


def test_mark_and_resolve_contradiction() -> None:
    st = build(MemoryCreate(item=item("w")), MemoryCreate(item=item("l", authority=0.5)))
    st, ev = mark_contradiction(st, "w", "l", "detector", meta={"why": "x"})
    assert [e.type for e in ev] == ["edge.created"]
    assert [(c.a.id, c.b.id) for c in get_contradictions(st)] == [("w", "l")]
    ghost = mark_contradiction(st, "w", "ghost", "detector")  # C2: made all the same
    assert [(e.edge.from_, e.edge.to) for e in ghost.events if e.edge] == [("w", "ghost")]
    st2, ev = resolve_contradiction(st, "w", "l", "judge", reason="newer")
    assert [e.type for e in ev] == ["edge.retracted", "edge.created", "memory.updated"]
    assert st2.items["l"].authority == pytest.approx(0.05)  # 10% of 0.5
    sup = [e for e in st2.edges.values() if e.kind == "SUPERSEDES"]
    assert [(e.from_, e.to, e.active) for e in sup] == [("w", "l", True)]
    assert get_contradictions(st2) == []
    again = resolve_contradiction(st2, "w", "l", "judge")  # stale call: no-op
    assert again.state is st2 and again.events == []


def test_mark_alias() -> None:
    st = build(MemoryCreate(item=item("a")), MemoryCreate(item=item("b")))
    assert mark_alias(st, "a", "a", "x") == (st, [])
    st, ev = mark_alias(st, "a", "b", "x")
    assert [(e.edge.from_, e.edge.to) for e in ev if e.edge] == [("a", "b"), ("b", "a")]
    assert [i.id for i in get_aliases(st, "a")] == ["b"]


def test_cascade_retract_leaves_first_and_cycles() -> None:
    st = build(
        MemoryCreate(item=item("root")),
        MemoryCreate(item=item("a", ["root"])),
        MemoryCreate(item=item("a1", ["a"])),
        MemoryCreate(item=item("b", ["root", "a"])),
        MemoryCreate(item=item("x", ["y"])),
        MemoryCreate(item=item("y", ["x", "a1"])),  # a cycle under a1
        MemoryCreate(item=item("other")),
        EdgeCreate(edge=edge("e", "b", "other")),
    )
    res = cascade_retract(st, "root", "x", reason="bad source")
    assert res.retracted[-1] == "root"
    pos = {i: n for n, i in enumerate(res.retracted)}
    assert set(pos) == {"root", "a", "a1", "b", "x", "y"}
    for child, parent in [("a", "root"), ("a1", "a"), ("b", "a"), ("y", "a1")]:
        assert pos[child] < pos[parent]
    assert list(res.state.items) == ["other"] and len(res.state.edges) == 0
    assert [e.type for e in res.events].count("memory.retracted") == 6
    assert [e.type for e in res.events].count("edge.retracted") == 1
    assert len(st.items) == 7  # input unchanged
    nothing = cascade_retract(st, "ghost", "x")  # C3: no error, nothing to do
    assert nothing.state is st and nothing.retracted == [] and nothing.events == []


def test_cascade_retract_deep_chain_is_iterative() -> None:
    cmds = [MemoryCreate(item=item("n0"))]
    cmds += [MemoryCreate(item=item(f"n{i}", [f"n{i - 1}"])) for i in range(1, 5000)]
    st = replay_commands(cmds).state
    res = cascade_retract(st, "n0", "x")
    assert res.retracted[0] == "n4999" and res.retracted[-1] == "n0"
    assert len(res.state.items) == 0


# -- bulk -------------------------------------------------------------------------------------


def test_apply_many() -> None:
    st = build(*(MemoryCreate(item=item(f"i{n}", kind="k" if n % 2 else "j")) for n in range(6)))

    def transform(it: MemoryItem) -> dict[str, object] | None:
        return None if it.id == "i1" else {} if it.id == "i3" else {"importance": 0.3}

    st2, ev = apply_many(st, {"kind": "k"}, transform, "x")
    assert [e.type for e in ev] == ["memory.retracted", "memory.updated"]
    assert "i1" not in st2.items and st2.items["i5"].importance == 0.3
    assert st2.items["i3"].importance is None and len(st.items) == 6


def test_bulk_adjust_scores_clamps() -> None:
    st = build(
        MemoryCreate(item=item("a", authority=0.95, importance=0.1)),
        MemoryCreate(item=item("b", authority=0.5)),
    )
    st2, ev = bulk_adjust_scores(st, {}, {"authority": 0.1, "importance": -0.5}, "x")
    assert st2.items["a"].authority == 1.0 and st2.items["a"].importance == 0.0
    # An absent score counts as 0 (C5): -0.5 clamps to 0.0.
    assert st2.items["b"].authority == pytest.approx(0.6) and st2.items["b"].importance == 0.0
    assert len(ev) == 2


def test_decay_importance() -> None:
    now = now_ms()
    st = build(
        MemoryCreate(item=item("old", importance=0.8, created_at=now - 10_000)),
        MemoryCreate(item=item("new", importance=0.8, created_at=now)),
        MemoryCreate(item=item("none", created_at=now - 10_000)),
        MemoryCreate(item=item("zero", importance=0.0, created_at=now - 10_000)),
    )
    st2, ev = decay_importance(st, 5_000, 0.5, "x")
    assert [e.item.id for e in ev if e.item] == ["old"]
    assert st2.items["old"].importance == pytest.approx(0.4)
    # As the seed: no check of the factor, the result clamped to 0..1.
    assert decay_importance(st, 5_000, -1, "x").state.items["old"].importance == 0.0


# -- replay -----------------------------------------------------------------------------------


def test_replay_commands_collects_failures() -> None:
    cmds: list[object] = [
        MemoryCreate(item=item("a")),
        {"type": "memory.create", "item": {**item("b").model_dump(), "authority": 3}},
        MemoryCreate(item=item("a")),
        {"type": "memory.retract", "item_id": "ghost", "author": "x"},
        {"type": "memory.create", "item": item("c").model_dump()},
    ]
    res = replay_commands(cmds)
    assert list(res.state.items) == ["a", "c"]
    assert [f.index for f in res.skipped] == [1, 2, 3]
    assert isinstance(res.skipped[0].error, ValidationError)
    assert isinstance(res.skipped[1].error, DuplicateMemoryError)
    assert isinstance(res.skipped[2].error, MemoryNotFoundError)
    assert res.skipped[2].command == cmds[3]
    assert [e.type for e in res.events] == ["memory.created", "memory.created"]


def test_replay_is_linear_and_matches_apply() -> None:
    cmds = [MemoryCreate(item=item(f"i{n}", [f"i{n - 1}"] if n else None)) for n in range(300)]
    assert replay_commands(cmds).state == build(*cmds)


def test_replay_from_envelopes_sorts_by_ts_and_rejects_bad_ts() -> None:
    def env(ts: str, cmd: object) -> dict[str, object]:
        e = create_event_envelope("memory.command", cmd).model_dump()
        e["ts"] = ts
        return e

    envs = [
        env(
            "2024-01-01T00:00:02.000Z",
            {
                "type": "memory.update",
                "item_id": "a",
                "partial": {"importance": 0.2},
                "author": "x",
            },
        ),
        env("2024-01-01T00:00:01.000+00:00", MemoryCreate(item=item("a")).model_dump()),
        env("2024-01-01T00:00:03.000Z", MemoryCreate(item=item("b")).model_dump()),
        env("2024-01-01T01:00:00.000+01:00", MemoryCreate(item=item("c")).model_dump()),
        env("2024-02-30T00:00:00.000Z", MemoryCreate(item=item("d")).model_dump()),
        env("2024-01-01T00:00:03.000Z", MemoryCreate(item=item("b")).model_dump()),
    ]
    res = replay_from_envelopes(envs)
    # c is at 00:00:00Z (the +01:00 offset), then a, then the update, then b.
    assert list(res.state.items) == ["c", "a", "b"]
    assert res.state.items["a"].importance == 0.2
    assert [f.index for f in res.skipped] == [4, 5]
    assert isinstance(res.skipped[0].error, InvalidTimestampError)
    assert res.skipped[0].envelope is envs[4]
    assert isinstance(res.skipped[1].error, DuplicateMemoryError)  # same ts: input order


def test_bulk_retraction_path_matches_per_item_path() -> None:
    from projector.graph.reducer import Tx

    st = build(
        MemoryCreate(item=item("r")),
        MemoryCreate(item=item("a", ["r"])),
        MemoryCreate(item=item("b", ["a", "ghost"])),
        MemoryCreate(item=item("keep", ["b"])),
        EdgeCreate(edge=edge("e1", "a", "keep")),
        EdgeCreate(edge=edge("e2", "keep", "b", kind="CONTRADICTS")),
        EdgeCreate(edge=edge("e3", "b", "a")),
    )
    order = ["b", "a", "r"]
    bulk, single = Tx(st), Tx(st)
    bulk.retract_many(order)  # 3 of 4 items: the rebuild path
    for i in order:
        single.retract_item(i)
    s1, s2 = bulk.freeze(), single.freeze()
    assert s1 == s2 and list(s1.items) == ["keep"]
    assert [(e.type, e.item or e.edge) for e in bulk.events] == [
        (e.type, e.item or e.edge) for e in single.events
    ]
    assert_index_consistent(s1)
    assert [s.item.id for s in get_stale_items(s1)] == ["keep"]


def test_assignment_to_the_maps_reindexes_and_old_pickles_still_load() -> None:
    import pickle

    st = build(MemoryCreate(item=item("c", ["p"])))
    # A state pickled by the code before the maps took assignment has no stamp.
    old = pickle.loads(pickle.dumps(st))
    del old.__dict__["_stamp"]
    assert [s.item.id for s in get_stale_items(old)] == ["c"]
    clone = clone_graph_state(st)
    clone.items["p"] = item("p")  # as into the seed's dict: the clone re-derives its index
    assert get_stale_items(clone) == [] and [s.item.id for s in get_stale_items(st)] == ["c"]
    assert_index_consistent(clone)
    state2 = apply_command(clone, MemoryRetract(item_id="p", author="x")).state
    assert [s.item.id for s in get_stale_items(state2)] == ["c"]
