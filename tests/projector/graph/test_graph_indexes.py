"""The reducer-maintained read indexes (scopes, columns) and the batched paths (pop_many,
retract_many, the replay fast path) agree with plain scans and with the item-by-item paths."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pydantic import ValidationError

from projector.graph.integrity import cascade_order, cascade_retract
from projector.graph.pmap import HOLE, OrderedPMap
from projector.graph.reducer import Tx, apply_command
from projector.graph.replay import replay_commands
from projector.graph.selection import get_items, matches_filter
from projector.graph.state import (
    GraphState,
    build_columns,
    build_index,
    create_graph_state,
)
from queryd.graph.scoring import compute_score, get_scored_items
from schemas.graph.commands import MemoryCommandAdapter
from schemas.graph.errors import DuplicateMemoryError, InvalidTimestampError
from schemas.graph.ids import now_ms
from schemas.graph.items import item_timestamp

SCOPES = ["user:1/a", "user:1/b", "user:12/a", "user:2/a", "team:1", "user:1"]
SORT_FIELDS = ["authority", "conviction", "importance", "recency"]


def _item(rng: random.Random, i: int, ids: list[str], timed: bool = False) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": f"i{i}",
        "scope": rng.choice(SCOPES),
        "kind": "k",
        "content": {},
        "author": "a",
        "source_kind": "observed",
        "authority": rng.choice([0.1, 0.5, 0.9]),
        "conviction": rng.choice([None, 0.3, 0.7]),
        "importance": rng.choice([None, 0.2, 0.8]),
        "created_at": rng.choice([None, 1000 + i, 5000]),
    }
    if timed and item["created_at"] is None:
        item["created_at"] = 2000 + i
    if ids and rng.random() < 0.5:
        item["parents"] = rng.sample(ids, min(len(ids), rng.randint(1, 2)))
    return item


def _commands(seed: int, n: int, timed: bool = False) -> list[dict[str, Any]]:
    """Creates, updates (scope, score and time changes), retracts: a mixed log."""
    rng = random.Random(seed)
    cmds: list[dict[str, Any]] = []
    live: list[str] = []
    for i in range(n):
        r = rng.random()
        if r < 0.6 or not live:
            it = _item(rng, i, live, timed)
            live.append(it["id"])
            cmds.append({"type": "memory.create", "item": it})
        elif r < 0.85:
            partial = rng.choice(
                [
                    {"scope": rng.choice(SCOPES)},
                    {"importance": rng.random()},
                    {"authority": 0.3, "scope": rng.choice(SCOPES)},
                    {"conviction": None},
                ]
            )
            cmds.append(
                {
                    "type": "memory.update",
                    "item_id": rng.choice(live),
                    "partial": partial,
                    "author": "a",
                }
            )
        else:
            victim = live.pop(rng.randrange(len(live)))
            cmds.append({"type": "memory.retract", "item_id": victim, "author": "a"})
    return cmds


def _fold_one_by_one(cmds: list[dict[str, Any]]) -> list[GraphState]:
    states = [create_graph_state()]
    for c in cmds:
        states.append(apply_command(states[-1], c).state)
    return states


def _ref_items(st: GraphState, f: dict[str, Any], sort: list[dict[str, str]]) -> list[str]:
    hits = [it for it in st.items.values() if matches_filter(it, f)]
    if any(s["field"] == "recency" for s in sort):
        for it in hits:  # the seed's sort computes each hit's key in turn
            if item_timestamp(it) is None:
                raise InvalidTimestampError(
                    f'Cannot determine timestamp for item "{it.id}": set created_at or use '
                    "a UUIDv7 id"
                )

    def key(field: str, it: Any) -> float:
        if field == "recency":
            return item_timestamp(it) or 0
        return getattr(it, field) or 0

    for s in reversed(sort):
        hits.sort(key=lambda it, s=s: key(s["field"], it), reverse=s["order"] == "desc")
    return [it.id for it in hits]


def _check_indexes(st: GraphState, rng: random.Random) -> None:
    fresh = build_index(st.items, st.edges)  # type: ignore[arg-type]
    idx = st.index
    for name in ("children", "outgoing", "incoming", "active_by_kind"):
        a, b = getattr(idx, name), getattr(fresh, name)
        assert {k: set(v) for k, v in a.items()} == {k: set(v) for k, v in b.items()}, name
    assert set(idx.stale) == set(fresh.stale)
    # Columns: every live slot holds its item's values.
    cols, vals = idx.columns, st.items.slot_values()  # type: ignore[attr-defined]
    assert len(cols.ts) == len(vals)
    want = build_columns(st.items)  # type: ignore[arg-type]
    for slot, it in enumerate(vals):
        if it is HOLE:
            continue
        for name in ("authority", "conviction", "importance", "ts"):
            assert getattr(cols, name)[slot] == getattr(want, name)[slot], (name, it.id)
    # Scope queries against a scan, with every sort shape.
    for f in (
        {"scope_prefix": "user:1"},
        {"scope_prefix": "user:1/"},
        {"scope": "user:1"},
        {"scope_prefix": "team"},
        {"scope_prefix": "nobody"},
        {"scope": "user:2/a", "scope_prefix": "user:"},
    ):
        sort = [
            {"field": rng.choice(SORT_FIELDS), "order": rng.choice(["asc", "desc"])}
            for _ in range(rng.randint(1, 2))
        ]
        try:
            want = _ref_items(st, f, sort)
        except InvalidTimestampError as exc:  # an item without a time, sorted by recency
            with pytest.raises(InvalidTimestampError) as got_exc:
                get_items(st, f, {"sort": sort})
            assert str(got_exc.value) == str(exc)
            continue
        got = [it.id for it in get_items(st, f, {"sort": sort})]
        assert got == want, (f, sort)
        got_page = [it.id for it in get_items(st, f, {"sort": sort, "offset": 1, "limit": 3})]
        assert got_page == got[1:4]
        unsorted = [it.id for it in get_items(st, f)]
        assert unsorted == [it.id for it in st.items.values() if matches_filter(it, f)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_scope_index_and_columns_agree_with_a_scan(seed: int) -> None:
    cmds = _commands(seed, 400)
    rng = random.Random(seed)
    states = _fold_one_by_one(cmds)
    snapshots = {
        i: [it.id for it in get_items(states[i], {"scope_prefix": "user:1"})]
        for i in range(0, len(states), 50)
    }
    for st in states[::37] + [states[-1]]:
        _check_indexes(st, rng)
    # One Tx for the whole log (replay): the same state and the same answers.
    bulk = replay_commands(cmds).state
    assert list(bulk.items.items()) == list(states[-1].items.items())
    _check_indexes(bulk, rng)
    for i, ids in snapshots.items():  # older states answer as they did
        assert [it.id for it in get_items(states[i], {"scope_prefix": "user:1"})] == ids


def test_scope_moves_are_rechecked_and_garbage_is_rebuilt() -> None:
    st = create_graph_state()
    for i in range(5):
        st = apply_command(
            st,
            {
                "type": "memory.create",
                "item": {
                    "id": f"m{i}",
                    "scope": "a",
                    "kind": "k",
                    "content": {},
                    "author": "x",
                    "source_kind": "observed",
                    "authority": 0.5,
                    "created_at": i,
                },
            },
        ).state
    for rnd in range(12):  # ping-pong m0 between scopes: entries are left behind
        st = apply_command(
            st,
            {
                "type": "memory.update",
                "item_id": "m0",
                "author": "x",
                "partial": {"scope": "b" if rnd % 2 == 0 else "a"},
            },
        ).state
        want_a = ["m1", "m2", "m3", "m4"] + ([] if rnd % 2 == 0 else ["m0"])
        assert sorted(it.id for it in get_items(st, {"scope": "a"})) == sorted(want_a)
        assert [it.id for it in get_items(st, {"scope_prefix": ""})] == [f"m{i}" for i in range(5)]
        assert st.index.scope_garbage <= len(st.items)  # rebuilt once it outgrows the items


def test_compaction_renumbers_slots_and_rebuilds_the_read_indexes() -> None:
    cmds = [
        {
            "type": "memory.create",
            "item": {
                "id": f"m{i}",
                "scope": f"s{i % 3}",
                "kind": "k",
                "content": {},
                "author": "x",
                "source_kind": "observed",
                "authority": (i % 10) / 10,
                "created_at": i,
            },
        }
        for i in range(200)
    ]
    st = replay_commands(cmds).state
    for i in range(150):  # holes outnumber live entries: the map compacts
        st = apply_command(st, {"type": "memory.retract", "item_id": f"m{i}", "author": "x"}).state
    assert st.items.slot_count() < 200  # type: ignore[attr-defined]
    _check_indexes(st, random.Random(0))
    srt = [{"field": "authority", "order": "desc"}]
    assert [it.id for it in get_items(st, {"scope": "s1"}, {"sort": srt})] == _ref_items(
        st, {"scope": "s1"}, srt
    )


def test_pop_many_matches_removing_one_by_one() -> None:
    m: OrderedPMap[str, int] = OrderedPMap((f"k{i}", i) for i in range(300))
    keys = [f"k{i}" for i in range(0, 300, 7)]
    one = m
    for k in keys:
        one = one.remove(k)
    many, vals = m.pop_many(keys)
    assert list(many.items()) == list(one.items())
    assert vals == [m[k] for k in keys]
    assert len(m) == 300 and m["k0"] == 0  # the input map is untouched
    with pytest.raises(KeyError):
        m.pop_many(["k1", "nope"])
    same, got = m.pop_many(["nope"], strict=False)
    assert same is m and got == [None]
    almost, _ = m.pop_many([f"k{i}" for i in range(290)])  # compacts
    assert list(almost) == [f"k{i}" for i in range(290, 300)]


def test_replay_fast_path_reports_the_same_failures() -> None:
    good = {
        "id": "a",
        "scope": "s",
        "kind": "k",
        "content": {},
        "author": "x",
        "source_kind": "observed",
        "authority": 0.5,
    }
    bad = {**good, "id": "b", "authority": 2.0}
    cmds: list[Any] = [
        {"type": "memory.create", "item": good},
        {"type": "memory.create", "item": bad},
        {"type": "memory.create", "item": good},  # duplicate
        {"type": "memory.create", "item": {**good, "id": "c"}, "extra": 1},  # general path
        {"type": "memory.create"},
    ]
    res = replay_commands(cmds)
    assert list(res.state.items) == ["a", "c"]
    assert [f.index for f in res.skipped] == [1, 2, 4]
    err = res.skipped[0].error
    assert isinstance(err, ValidationError)
    with pytest.raises(ValidationError) as ref:
        MemoryCommandAdapter.validate_python(cmds[1])
    assert err.errors() == ref.value.errors()  # the command-level error, not the item's
    assert isinstance(res.skipped[1].error, DuplicateMemoryError)
    assert [e.type for e in res.events] == ["memory.created", "memory.created"]


def _dag(seed: int, extra: int) -> tuple[GraphState, str]:
    rng = random.Random(seed)
    cmds: list[dict[str, Any]] = [
        {
            "type": "memory.create",
            "item": {
                "id": f"x{i}",
                "scope": "bg",
                "kind": "k",
                "content": {},
                "author": "a",
                "source_kind": "observed",
                "authority": 0.5,
            },
        }
        for i in range(extra)
    ]
    ids = ["root"]
    cmds.append(
        {
            "type": "memory.create",
            "item": {
                "id": "root",
                "scope": "s",
                "kind": "k",
                "content": {},
                "author": "a",
                "source_kind": "observed",
                "authority": 0.5,
            },
        }
    )
    for i in range(60):
        parents = rng.sample(ids, min(len(ids), rng.randint(1, 3)))
        if rng.random() < 0.2:
            parents.append("ghost")
        if extra and rng.random() < 0.2:
            parents.append(f"x{rng.randrange(extra)}")  # reaches outside the cascade
        ids.append(f"n{i}")
        cmds.append(
            {
                "type": "memory.create",
                "item": {
                    "id": f"n{i}",
                    "scope": "s",
                    "kind": "k",
                    "content": {},
                    "author": "a",
                    "source_kind": "observed",
                    "authority": 0.5,
                    "parents": parents,
                },
            }
        )
    pool = ids + [f"x{i}" for i in range(extra)]
    for j in range(40):
        a, b = rng.choice(pool), rng.choice(pool)
        cmds.append(
            {
                "type": "edge.create",
                "edge": {
                    "edge_id": f"e{j}",
                    "from": a,
                    "to": b,
                    "kind": rng.choice(["SUPPORTS", "ALIAS"]),
                    "author": "a",
                    "source_kind": "observed",
                    "authority": 1.0,
                    "active": rng.random() < 0.8,
                },
            }
        )
    res = replay_commands(cmds)
    assert not res.skipped
    return res.state, "root"


@pytest.mark.parametrize(("seed", "extra"), [(1, 0), (2, 0), (3, 50), (4, 500)])
def test_cascade_batch_matches_item_by_item(seed: int, extra: int) -> None:
    st, root = _dag(seed, extra)
    order = cascade_order(st, root)
    res = cascade_retract(st, root, "a")
    single = Tx(st)
    for iid in order:
        single.retract_item(iid)
    ref = single.freeze()
    assert res.retracted == order
    assert list(res.state.items.items()) == list(ref.items.items())
    assert list(res.state.edges.items()) == list(ref.edges.items())
    assert [(e.type, e.item, e.edge, e.cause_type) for e in res.events] == [
        (e.type, e.item, e.edge, e.cause_type) for e in single.events
    ]
    _check_indexes(res.state, random.Random(seed))
    assert len(st.items) == extra + 61  # the input state is untouched


@pytest.mark.parametrize("kind", ["exponential", "linear", "step"])
def test_scored_items_over_columns_equal_compute_score(kind: str) -> None:
    cmds = _commands(9, 300, timed=True)  # a decay needs every item's time
    now = now_ms()
    cmds.append(
        {
            "type": "memory.create",
            "item": {  # future-dated: decays to 1.0
                "id": "future",
                "scope": "s",
                "kind": "k",
                "content": {},
                "author": "a",
                "source_kind": "observed",
                "authority": 0.5,
                "created_at": now + 10**9,
            },
        }
    )
    st = replay_commands(cmds).state
    w = {
        "authority": 0.5,
        "conviction": 0.2,
        "importance": -0.3,
        "decay": {"rate": 0.1, "interval": "hour", "type": kind},
    }
    got = get_scored_items(st, w)
    assert len(got) == len(st.items)
    for s in got:  # the clock moved between the calls by at most a few ms
        assert s.score == pytest.approx(compute_score(s.item, w), rel=1e-6, abs=1e-12)
    nodecay = {"authority": 0.5, "conviction": 0.2, "importance": 0.3}
    for s in get_scored_items(st, nodecay, {"pre": {"scope_prefix": "user:1"}}):
        assert s.score == compute_score(s.item, nodecay)  # bit for bit
    top = get_scored_items(st, nodecay, {"limit": 5, "offset": 2})
    full = get_scored_items(st, nodecay)
    assert [(s.item.id, s.score) for s in top] == [(s.item.id, s.score) for s in full[2:7]]
    scores = [s.score for s in full]
    assert scores == sorted(scores, reverse=True)
    # Annotating one result does not leak into the others' set fields.
    full[0].contradicted_by = []
    assert full[1].contradicted_by is None
    assert full[0].model_dump()["contradicted_by"] == []


def _create_runs(seed: int, n: int) -> list[dict[str, Any]]:
    """Long runs of creates as the replay batches them, with what breaks a batch: repeated
    ids (in the run and before it), children named before their parents, missing parents,
    and retracts between the runs (holes, then compaction as the map grows)."""
    rng = random.Random(seed)
    cmds: list[dict[str, Any]] = []
    made: list[str] = []
    for i in range(n):
        r = rng.random()
        iid = rng.choice(made) if r < 0.08 and made else f"c{i}"  # or a duplicate
        it = {
            "id": iid,
            "scope": rng.choice(SCOPES),
            "kind": "k",
            "content": {"i": i},
            "author": "a",
            "source_kind": "observed",
            "authority": 0.5,
            "created_at": 1000 + i,
        }
        if rng.random() < 0.15:
            # a child named before its parent (created up to 30 steps later), or a ghost
            it["parents"] = [rng.choice([f"c{i + rng.randint(1, 30)}", "ghost", *made[-3:]])]
        cmds.append({"type": "memory.create", "item": it})
        made.append(iid)
        if rng.random() < 0.03 and made:
            cmds.append({"type": "memory.retract", "item_id": rng.choice(made), "author": "a"})
    return cmds


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_batched_creates_match_one_by_one(seed: int) -> None:
    cmds = _create_runs(seed, 600)
    base = replay_commands(cmds[:50]).state  # also onto a non-empty graph
    for start, rest in ((None, cmds), (base, cmds[50:])):
        st = start if start is not None else create_graph_state()
        events: list[tuple[str, str]] = []
        failures: list[tuple[int, str]] = []
        for i, c in enumerate(rest):
            try:
                st, evs = apply_command(st, c)
            except Exception as exc:
                failures.append((i, type(exc).__name__))
                continue
            events += [
                (e.type, (e.item or e.edge).id if e.item else e.edge.edge_id)  # type: ignore[union-attr]
                for e in evs
            ]
        res = replay_commands(rest, state=start)
        assert [(f.index, type(f.error).__name__) for f in res.skipped] == failures
        assert any(name == "DuplicateMemoryError" for _, name in failures)
        got = [(e.type, e.item.id if e.item else e.edge.edge_id) for e in res.events]  # type: ignore[union-attr]
        assert got == events
        assert list(res.state.items.items()) == list(st.items.items())
        assert set(res.state.index.stale) == set(st.index.stale) != set()
        _check_indexes(res.state, random.Random(seed))


def test_replayed_items_share_one_fields_set_safely() -> None:
    base = {
        "scope": "s",
        "kind": "k",
        "content": {},
        "author": "a",
        "source_kind": "observed",
        "authority": 0.5,
    }
    cmds = [{"type": "memory.create", "item": {"id": f"s{i}", **base}} for i in range(3)]
    cmds.append({"type": "memory.create", "item": {**base, "id": "t", "importance": 0.2}})
    items = list(replay_commands(cmds).state.items.values())
    assert items[0].__pydantic_fields_set__ is items[1].__pydantic_fields_set__
    assert items[3].__pydantic_fields_set__ == {*base, "id", "importance"}
    edited = items[0].model_copy(update={"importance": 0.9})  # pydantic copies the set
    assert "importance" in edited.model_fields_set
    assert items[1].model_dump(exclude_unset=True) == {"id": "s1", **base}


def test_scope_sort_with_few_and_many_hits_matches_a_scan() -> None:
    rng = random.Random(11)
    cmds = [
        {
            "type": "memory.create",
            "item": {
                "id": f"i{i}",
                "scope": "rare" if i % 50 == 7 else "big",
                "kind": "k",
                "content": {},
                "author": "a",
                "source_kind": "observed",
                "authority": rng.choice([0.1, 0.5, 0.9]),
                "importance": rng.choice([None, 0.2, 0.8]),
                "created_at": 1000 + i % 17,
            },
        }
        for i in range(400)
    ]
    st = replay_commands(cmds).state
    sort = [{"field": "importance", "order": "desc"}, {"field": "recency", "order": "asc"}]
    want_rare = _ref_items(st, {"scope": "rare"}, sort)
    assert len(want_rare) * 16 < len(st.items)  # few hits: read from the pvectors
    assert [it.id for it in get_items(st, {"scope": "rare"}, {"sort": sort})] == want_rare
    # many hits: list copies of the columns, cached on the state ...
    want_big = _ref_items(st, {"scope_prefix": "b"}, sort)
    assert [it.id for it in get_items(st, {"scope_prefix": "b"}, {"sort": sort})] == want_big
    # ... which the few-hits query then reuses, with the same answer
    assert [it.id for it in get_items(st, {"scope": "rare"}, {"sort": sort})] == want_rare
