"""The C loops (projector/graph/_native.c) against their Python reference in
queryd/graph/scoring.py and ordering.py: the same scores bit for bit, the same order,
the same models."""

from __future__ import annotations

import copy
import math
import pickle
import random
import sys
from array import array
from typing import Any

import pytest
from pyrsistent import pvector

from projector.graph import _native, ordering  # _native: built by `pip install` (setup.py)
from projector.graph.ordering import sort_indexes
from projector.graph.replay import replay_commands
from projector.graph.selection import get_items
from projector.graph.state import COLUMN_NAMES, dense_column
from queryd.graph import scoring
from queryd.graph.scoring import get_scored_items, scored_items
from schemas.graph.errors import InvalidTimestampError
from schemas.graph.ids import uuid7
from schemas.graph.results import ScoredItem

NOW = 1_800_000_000_000
# Importing _native above fails this module when the build is missing: the fallback to
# Python must not hide it.


def _bits(xs: list[float]) -> list[str]:
    return [x.hex() for x in xs]


def _columns(rng: random.Random, n: int) -> tuple[list[float], ...]:
    pick = [0.0, -0.0, 0.25, 0.5, 1.0]  # repeats, so ranks have ties
    auth = [rng.choice(pick) if rng.random() < 0.3 else rng.random() for _ in range(n)]
    conv = [rng.random() for _ in range(n)]
    imp = [rng.choice(pick) for _ in range(n)]
    ts = [float(NOW - rng.randrange(1, 10**10)) for _ in range(n)]
    return auth, conv, imp, ts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("base", [None, 0.0, 0.9, 1.0, 0.999999])
def test_score_columns_are_the_python_scores_bit_for_bit(seed: int, base: float | None) -> None:
    rng = random.Random(seed)
    auth, conv, imp, ts = _columns(rng, 2_000)
    wa, wc, wi = rng.random(), -rng.random(), 0.3
    interval = rng.choice([3_600_000, 86_400_000, 604_800_000])
    if base is None:
        ref = [a * wa + c * wc + i * wi for a, c, i in zip(auth, conv, imp, strict=True)]
    else:
        ref = [
            (a * wa + c * wc + i * wi) * base ** ((NOW - t) / interval)
            for a, c, i, t in zip(auth, conv, imp, ts, strict=True)
        ]
    got = _native.score_columns(auth, conv, imp, ts, wa, wc, wi, base, NOW, interval)
    assert got is not None and _bits(got) == _bits(ref)
    packed = [array("d", c) for c in (auth, conv, imp, ts)]  # dense_column's arrays
    assert _bits(_native.score_columns(*packed, wa, wc, wi, base, NOW, interval)) == _bits(ref)


def test_score_columns_leave_other_inputs_to_python() -> None:
    one = [0.5]
    # not exact floats, a row dated at or after `at`, a base outside [0, 1]
    assert _native.score_columns([1], one, one, one, 1.0, 1.0, 1.0, None, 0, 1) is None
    assert _native.score_columns(one, one, one, [float(NOW)], 1.0, 1, 1, 0.5, NOW, 10) is None
    assert _native.score_columns(one, one, one, [0.0], 1.0, 1.0, 1.0, 1.5, NOW, 10) is None
    with pytest.raises(ValueError, match="differ in length"):
        _native.score_columns(one, [], one, None, 1.0, 1.0, 1.0, None, 0, 1)
    assert _native.score_columns([], [], [], [], 1.0, 1.0, 1.0, 0.5, NOW, 10) == []
    empty = array("d")
    assert _native.score_columns(empty, empty, empty, empty, 1.0, 1.0, 1.0, 0.5, NOW, 10) == []
    with pytest.raises(TypeError, match="doubles"):
        _native.score_columns(array("f", [0.5]), one, one, None, 1.0, 1.0, 1.0, None, 0, 1)


def _sorted(values: Any, indexes: Any, descending: bool, keep: int | None = None) -> Any:
    got = _native.sort_indexes(values, indexes, descending, keep)
    return None if got is None else list(memoryview(got).cast("q"))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("descending", [True, False])
def test_sort_indexes_is_pythons_stable_sort(seed: int, descending: bool) -> None:
    rng = random.Random(seed)
    pool = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, -1e-300, math.inf, -math.inf, 5e-324]
    n = rng.choice([0, 1, 2, 7, 300, 5_000])
    values = [rng.choice(pool) if rng.random() < 0.5 else rng.uniform(-2, 2) for _ in range(n)]
    ref = sorted(range(n), key=values.__getitem__, reverse=descending)
    assert _sorted(values, None, descending) == ref
    for keep in (0, 1, 10, n, n + 5):
        assert _sorted(values, None, descending, keep) == ref[:keep]
    # Some indexes, in a given order (a list, a tuple, a pvector of values, int64s).
    some = rng.sample(range(n), n // 3)
    ref_some = sorted(some, key=values.__getitem__, reverse=descending)
    assert _sorted(values, some, descending) == ref_some
    assert _sorted(tuple(values), some, descending) == ref_some
    assert _sorted(pvector(values), some, descending) == ref_some
    assert _sorted(values, memoryview(array("q", some)), descending) == ref_some
    assert _sorted(array("d", values), some, descending) == ref_some
    assert _sorted(array("d", values), None, descending) == ref
    # The Python wrapper, and a second key chained on the first's int64s.
    assert list(sort_indexes(values, some, descending)) == ref_some
    other = [rng.choice([0.0, 1.0]) for _ in range(n)]
    two = sort_indexes(other, sort_indexes(values, None, descending), not descending)
    assert list(two) == sorted(ref, key=other.__getitem__, reverse=not descending)
    if descending:
        assert list(scoring.rank(values, values)) == ref


def test_sort_indexes_leaves_nan_and_non_floats_to_python() -> None:
    assert _native.sort_indexes([1.0, math.nan], None, True, None) is None
    assert _native.sort_indexes([1.0, 2], None, False, None) is None
    assert _native.sort_indexes([1, 2.0, 3.0], [1, 2], False, None) is not None  # only those
    assert _sorted([], None, True) == []
    # the wrapper gives Python's answer for them
    assert list(sort_indexes([1, 2.0, None], [1, 0], True)) == [1, 0]
    assert list(scoring.rank([0, 0], [1, 2.0])) == [1, 0]
    with pytest.raises(IndexError, match="index 5 out of range"):
        _native.sort_indexes([1.0], [5], True, None)
    with pytest.raises(TypeError, match="int64"):
        _native.sort_indexes([1.0], memoryview(b"\0" * 4).cast("i"), True, None)


def _graph(seed: int, n: int) -> Any:
    rng = random.Random(seed)
    cmds: list[dict[str, Any]] = []
    live: list[str] = []
    for i in range(n):
        if rng.random() < 0.85 or not live:
            iid = uuid7(NOW - rng.randrange(1, 10**10))
            item: dict[str, Any] = {
                "id": iid,
                "scope": f"user:{i % 5}",
                "kind": "k",
                "content": {"i": i},
                "author": f"agent:{i % 3}",
                "source_kind": "observed",
                "authority": rng.choice([0.0, 0.5, 1.0, rng.random()]),
                "importance": rng.choice([None, 0.5, rng.random()]),
                "conviction": rng.choice([None, rng.random()]),
            }
            if rng.random() < 0.7:  # else the time comes from the UUIDv7 id
                item["created_at"] = NOW - rng.randrange(1, 10**10)
            cmds.append({"type": "memory.create", "item": item})
            live.append(iid)
        else:  # holes in the items map
            victim = live.pop(rng.randrange(len(live)))
            cmds.append({"type": "memory.retract", "item_id": victim, "author": "a"})
    return replay_commands(cmds).state


def _python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoring, "native", None)
    monkeypatch.setattr(ordering, "native", None)


def _key(result: list[ScoredItem]) -> list[tuple[str, str]]:
    return [(s.item.id, s.score.hex()) for s in result]


WEIGHTS = [
    {"authority": 0.5, "conviction": 0.2, "importance": 0.3},
    {"authority": 1.0, "decay": {"rate": 0.1, "interval": "day", "type": "exponential"}},
    {
        "authority": 0.7,
        "importance": 0.3,
        "decay": {"rate": 0.2, "interval": "hour", "type": "linear"},
    },
    {"conviction": 1.0, "decay": {"rate": 1.0, "interval": "week", "type": "exponential"}},
]
OPTIONS: list[dict[str, Any] | None] = [
    None,
    {"limit": 10},
    {"limit": 7, "offset": 3},
    {"min_score": 0.3},
    {"pre": {"scope_prefix": "user:1"}},
    {"post": {"author": "agent:2"}, "limit": 20},
    {"limit": 5000},
    {"offset": 10},
]


@pytest.mark.parametrize("seed", range(3))
def test_get_scored_items_equals_the_python_path(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = _graph(seed, 1_500)
    monkeypatch.setattr(scoring, "now_ms", lambda: NOW)
    got = {
        (i, j): get_scored_items(st, w, o)
        for i, w in enumerate(WEIGHTS)
        for j, o in enumerate(OPTIONS)
    }
    _python_only(monkeypatch)
    for (i, j), res in got.items():
        ref = get_scored_items(st, WEIGHTS[i], OPTIONS[j])
        assert _key(res) == _key(ref), (WEIGHTS[i], OPTIONS[j])
        assert res == ref  # the models compare equal too


SORTS: list[Any] = [
    {"field": "importance", "order": "desc"},
    [{"field": "importance", "order": "desc"}, {"field": "recency", "order": "desc"}],
    [{"field": "authority", "order": "asc"}, {"field": "conviction", "order": "desc"}],
    [{"field": "recency", "order": "asc"}],
]
FILTERS: list[Any] = [
    None,
    {"scope_prefix": "user:1"},
    {"scope": "user:2"},
    {"author": "agent:1"},
    {"scope_prefix": "user:"},
]


@pytest.mark.parametrize("seed", range(2))
def test_get_items_sorts_equal_the_python_path(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    st = _graph(seed + 10, 1_200)
    cases = [
        (f, {"sort": sort, "limit": lim, "offset": off})
        for f in FILTERS
        for sort in SORTS
        for lim, off in ((None, None), (5, 3))
    ]
    got = [[it.id for it in get_items(st, f, o)] for f, o in cases]
    _python_only(monkeypatch)
    for (f, o), ids in zip(cases, got, strict=True):
        assert ids == [it.id for it in get_items(st, f, o)], (f, o)


def test_scored_items_builds_what_model_construct_builds() -> None:
    st = _graph(7, 200)
    items = list(st.items.values())
    scores = [float(i) / 3 for i in range(len(items))]
    order = list(range(len(items)))[::-1]
    got = _native.scored_items(ScoredItem, scoring._SCORED_SET, items, scores, order)
    for s, i in zip(got, order, strict=True):
        ref = ScoredItem.model_construct(item=items[i], score=scores[i], contradicted_by=None)
        assert type(s) is ScoredItem and s == ref
        assert s.item is items[i] and s.score is scores[i] and s.contradicted_by is None
        assert list(s.__dict__.items()) == list(ref.__dict__.items())  # order: repr's
        assert repr(s) == repr(ref) and s.model_fields_set == ref.model_fields_set
        assert s.__pydantic_extra__ is None and s.__pydantic_private__ is None
        assert s.model_dump() == ScoredItem(item=items[i], score=scores[i]).model_dump()
    # Each result is its own mutable model, as the Python build makes them.
    got[0].contradicted_by = [items[1]]
    assert got[1].contradicted_by is None and got[0].model_dump()["contradicted_by"]
    assert pickle.loads(pickle.dumps(got[2])) == got[2] and copy.deepcopy(got[3]) == got[3]
    assert got[1:] == [scoring.scored_items([items[i]], [scores[i]])[0] for i in order[1:]]
    # Pages: any subset in any order.
    assert _native.scored_items(ScoredItem, scoring._SCORED_SET, items, scores, [5, 0]) == (
        scored_items([items[5], items[0]], [scores[5], scores[0]])
    )
    assert _native.scored_items(ScoredItem, scoring._SCORED_SET, items, scores, []) == []
    # rank's int64 indexes, whole or sliced, as a list of the same ints
    ranked = scoring.rank(items, scores)
    assert isinstance(ranked, memoryview)
    for part in (ranked, ranked[3:40], ranked[:0]):
        assert _native.scored_items(ScoredItem, scoring._SCORED_SET, items, scores, part) == (
            _native.scored_items(ScoredItem, scoring._SCORED_SET, items, scores, list(part))
        )


def test_scored_items_rejects_a_bad_order_and_leaks_nothing() -> None:
    items = list(_graph(8, 50).items.values())
    scores = [0.5] * len(items)
    fs = scoring._SCORED_SET
    for bad in ([len(items)], [-1], [3, 3]):
        with pytest.raises(ValueError, match="out of range or twice"):
            _native.scored_items(ScoredItem, fs, items, scores, bad)
    with pytest.raises(ValueError, match="out of range or twice"):
        _native.scored_items(ScoredItem, fs, items, scores, memoryview(b"\xff" * 8).cast("q"))
    with pytest.raises(TypeError, match="int64"):
        _native.scored_items(ScoredItem, fs, items, scores, memoryview(b"\0" * 8).cast("i"))
    with pytest.raises(ValueError, match="differ in length"):
        _native.scored_items(ScoredItem, fs, items, scores[:-1], [0])
    with pytest.raises(TypeError, match="no object slot"):
        _native.scored_items(int, fs, items, scores, [0])
    before = sys.getrefcount(items[0]), sys.getrefcount(scores[0])
    for _ in range(100):
        built = _native.scored_items(ScoredItem, fs, items, scores, list(range(len(items))))
        del built
    assert (sys.getrefcount(items[0]), sys.getrefcount(scores[0])) == before


def test_dense_columns_and_the_rows_they_leave_to_python(monkeypatch: pytest.MonkeyPatch) -> None:
    st = _graph(9, 300)
    assert all(type(dense_column(st, n)) is array for n in COLUMN_NAMES)
    # Ids that are not UUIDv7 and no created_at: unknown timestamps (None in the column),
    # and one dated in the future: the decay takes Python's per-row path.
    extra = [
        {
            "type": "memory.create",
            "item": {
                "id": f"plain-{i}",
                "scope": "user:1",
                "kind": "k",
                "content": {},
                "author": "a",
                "source_kind": "observed",
                "authority": 0.5,
                **({"created_at": NOW + 10**6} if i == 0 else {}),
            },
        }
        for i in range(3)
    ]
    st2 = replay_commands(extra, state=st).state
    assert type(dense_column(st2, "ts")) is list and None in dense_column(st2, "ts")
    monkeypatch.setattr(scoring, "now_ms", lambda: NOW)

    def outcome(s: Any, w: Any) -> Any:
        try:
            return _key(get_scored_items(s, w))
        except InvalidTimestampError as exc:  # a decay over an item with no time: the seed's
            return ("error", str(exc))

    got = [outcome(s, w) for s in (st, st2) for w in WEIGHTS]
    assert any(g[0] == "error" for g in got)
    _python_only(monkeypatch)
    assert got == [outcome(s, w) for s in (st, st2) for w in WEIGHTS]


@pytest.mark.parametrize("typecode", ["H", "I"])
def test_the_largest_word_id_is_pythons_max(typecode: str) -> None:
    """`max_index` (the snapshot decoder's check of word ids against the vocabulary)
    equals `max` on arrays of 16- and 32-bit ids, and declines other buffers."""
    from projector.snapshot_format import _max_id

    rng = random.Random(7)
    top = 0xFFFF if typecode == "H" else 0xFFFFFFFF
    for n in (1, 2, 7, 1000):
        ids = array(typecode, (rng.randint(0, top) for _ in range(n)))
        assert _native.max_index(ids) == max(ids) == _max_id(ids)
    assert _native.max_index(array(typecode, [top, 0])) == top  # unsigned, not negative
    assert _native.max_index(array(typecode)) == -1
    assert _native.max_index(array("d", [1.0])) is None
    assert _native.max_index(b"\x01\x02") is None
