"""Scoring: compute_score and get_scored_items (pre-filter, score, sort, page)."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, repeat
from operator import is_not
from typing import Any

from projector.graph.decay import check_decay, compute_decay_multiplier, decay_at
from projector.graph.native import native
from projector.graph.ordering import sort_indexes
from projector.graph.pmap import HOLE
from projector.graph.selection import compile_filter, filter_items
from projector.graph.state import COLUMN_NAMES, GraphState, column_values, dense_column
from schemas.gc_guard import no_cyclic_gc
from schemas.graph.coerce import coerce, coerce_opt
from schemas.graph.filters import ScoredQueryOptions
from schemas.graph.ids import extract_timestamp, now_ms
from schemas.graph.items import MemoryItem, no_timestamp
from schemas.graph.results import ScoredItem
from schemas.graph.scoring import ScoreWeights


def compute_score(
    item: MemoryItem, weights: ScoreWeights | Mapping[str, Any], *, now: int | None = None
) -> float:
    """Weighted sum of the scores (missing weight or score = 0), times the decay if set."""
    w = coerce(ScoreWeights, weights)
    score = (
        item.authority * (w.authority or 0.0)
        + (item.conviction or 0.0) * (w.conviction or 0.0)
        + (item.importance or 0.0) * (w.importance or 0.0)
    )
    if w.decay is not None:
        score *= compute_decay_multiplier(item, w.decay, now=now)
    return score


def score_all(items: Sequence[MemoryItem], w: ScoreWeights, now: int | None = None) -> list[float]:
    """Scores of ``items``, computed column by column (no per-item function call)."""
    return score_columns(column_values(items), w, now, items)


Cols = tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[Any], bool]


def _decay_errors(
    ts: Sequence[Any], at: int, w: ScoreWeights, items: Sequence[MemoryItem]
) -> tuple[float, int, str] | None:
    """What the seed's item-by-item scoring raises, in its order: the first item either
    without a time (InvalidTimestampError naming it) or in the past with an unknown decay
    interval or type (ValueError). The decay's parameters when nothing raises; None when
    no row is in the past (every multiplier is 1, the config is never read)."""
    assert w.decay is not None
    try:
        params = check_decay(w.decay)
    except ValueError:
        params = None
    for i, t in enumerate(ts):
        if t is None:
            raise no_timestamp(items[i])
        if t < at and params is None:
            check_decay(w.decay)  # raises
    if params is None:
        return None
    return params


def score_columns(
    cols: Cols, w: ScoreWeights, now: int | None = None, items: Sequence[MemoryItem] = ()
) -> list[float]:
    """compute_score over columns (authority, conviction, importance, timestamp, whether
    a timestamp is None), bit for bit: the same operations in the same order. With a
    decay, ``items`` (aligned with the columns) name the item of an error."""
    auth, conv, imp, ts, ts_has_none = cols
    wa, wc, wi = w.authority or 0.0, w.conviction or 0.0, w.importance or 0.0
    base: float | None = None  # 1 - rate, for an exponential decay over known timestamps
    rate, at, interval_ms = 0.0, 0, 1
    if w.decay is not None:
        at = now_ms() if now is None else now
        if not ts:
            return []
        if ts_has_none:
            _decay_errors(ts, at, w, items)  # raises: some item has no time
        try:
            rate, interval_ms, kind = check_decay(w.decay)
        except ValueError:
            _decay_errors(ts, at, w, items)  # raises unless every row is in the future
            return [a * wa + c * wc + i * wi for a, c, i in zip(auth, conv, imp, strict=True)]
        if kind != "exponential":
            return [
                (a * wa + c * wc + i * wi) * decay_at(t, at, rate, interval_ms, kind)
                for a, c, i, t in zip(auth, conv, imp, ts, strict=True)
            ]
        base = 1.0 - rate
    if native is not None:
        # One call for both cases; it declines (None) a row not in the past, among others.
        got = native.score_columns(auth, conv, imp, ts, wa, wc, wi, base, at, interval_ms)
        if got is not None:
            return got
    if base is None:
        return [a * wa + c * wc + i * wi for a, c, i in zip(auth, conv, imp, strict=True)]
    if ts and max(ts) >= at:  # a row not in the past: decay_at's per-row rules
        return [
            (a * wa + c * wc + i * wi) * decay_at(t, at, rate, interval_ms, "exponential")
            for a, c, i, t in zip(auth, conv, imp, ts, strict=True)
        ]
    # decay_at inlined for the common case (every row in the past): one list comprehension,
    # whose float arithmetic 3.11 runs without a call per item.
    return [
        (a * wa + c * wc + i * wi) * base ** ((at - t) / interval_ms)
        for a, c, i, t in zip(auth, conv, imp, ts, strict=True)
    ]


# Shared by every ScoredItem built here. It names all three fields, so assigning one (as
# surface_contradictions does with contradicted_by) adds nothing to it: never mutated.
_SCORED_SET = {"item", "score", "contradicted_by"}
_new = object.__new__
_setattr = object.__setattr__


def scored_item(item: MemoryItem, score: float) -> ScoredItem:
    # construct() specialised: a query may build 100k of these.
    s = _new(ScoredItem)
    _setattr(s, "__dict__", {"item": item, "score": score, "contradicted_by": None})
    _setattr(s, "__pydantic_fields_set__", _SCORED_SET)
    _setattr(s, "__pydantic_extra__", None)
    _setattr(s, "__pydantic_private__", None)
    return s


def scored_items(items: Iterable[MemoryItem], scores: Iterable[float]) -> list[ScoredItem]:
    """``scored_item`` over two sequences, inlined: the all-items query builds 100k."""
    new, setattr_, cls, fs = _new, _setattr, ScoredItem, _SCORED_SET
    out: list[ScoredItem] = []
    append = out.append
    for item, score in zip(items, scores, strict=True):
        s = new(cls)
        setattr_(s, "__dict__", {"item": item, "score": score, "contradicted_by": None})
        setattr_(s, "__pydantic_fields_set__", fs)
        setattr_(s, "__pydantic_extra__", None)
        setattr_(s, "__pydantic_private__", None)
        append(s)
    return out


def rank(items: Sequence[Any], scores: list[float], keep: int | None = None) -> Sequence[int]:
    """Indexes by score descending; ties keep the incoming order. ``keep``: top-k only."""
    n = len(items)
    if native is None and keep is not None and keep * 8 < n:
        # nlargest is documented equal to sorted(..., reverse=True)[:k], ties included.
        return heapq.nlargest(keep, range(n), key=scores.__getitem__)
    return sort_indexes(scores, None, True, keep)


def get_scored_items(
    state: GraphState,
    weights: ScoreWeights | Mapping[str, Any],
    options: ScoredQueryOptions | Mapping[str, Any] | None = None,
) -> list[ScoredItem]:
    """Pre-filter, score, sort by score descending, min_score, post-filter, offset/limit."""
    w = coerce(ScoreWeights, weights)
    o = coerce_opt(ScoredQueryOptions, options) or ScoredQueryOptions()
    with no_cyclic_gc():
        return _scored(state, w, o)


def _live_columns(state: GraphState) -> tuple[Sequence[MemoryItem], Cols]:
    """Every item and its columns, read from the reducer's columns (C-level copies)."""
    items: Any = state.items
    lists = [dense_column(state, name) for name in COLUMN_NAMES]
    has_none = state.index.columns.ts_has_none
    if items.has_holes():
        vals = items.slot_values()
        live = list(compress(range(len(vals)), map(is_not, vals, repeat(HOLE))))
        lists = [list(map(col.__getitem__, live)) for col in lists]
    auth, conv, imp, ts = lists
    return items.values_tuple(), (auth, conv, imp, ts, has_none)


def _scored(state: GraphState, w: ScoreWeights, o: ScoredQueryOptions) -> list[ScoredItem]:
    now = now_ms()
    if o.pre is None:
        items, cols = _live_columns(state)
    else:
        items = filter_items(state, o.pre, now)
        cols = column_values(items)
    scores = score_columns(cols, w, now, items)
    start = o.offset or 0
    keep = None
    if o.limit is not None and o.post is None and o.min_score is None:
        keep = start + o.limit
    order = rank(items, scores, keep)
    if o.min_score is not None:
        m = o.min_score
        order = [i for i in order if scores[i] >= m]
    if o.post is not None:
        post = compile_filter(o.post, now)
        order = [i for i in order if post(items[i])]
    end = None if o.limit is None else start + o.limit
    return scored_page(items, scores, order[start:end])


def scored_page(
    items: Sequence[MemoryItem], scores: Sequence[float], page: Sequence[int]
) -> list[ScoredItem]:
    """``[ScoredItem(item=items[i], score=scores[i]) for i in page]``, without validation."""
    if native is not None:
        return native.scored_items(ScoredItem, _SCORED_SET, items, scores, page)
    if 2 * len(page) >= len(items):
        # Most items are returned: build in item order, which walks memory in the order
        # the items were allocated, then permute; about a third faster than rank order.
        built = scored_items(items, scores)
        return list(map(built.__getitem__, page))
    # ScoredItems only for what is returned, after offset/limit.
    return scored_items(map(items.__getitem__, page), map(scores.__getitem__, page))


__all__ = [
    "compute_score",
    "extract_timestamp",
    "get_scored_items",
    "rank",
    "score_all",
    "score_columns",
    "scored_item",
    "scored_items",
    "scored_page",
]
