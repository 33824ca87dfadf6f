"""Scoring: compute_score and get_scored_items (pre-filter, score, sort, page)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from projector.graph.state import GraphState
from queryd.graph.decay import check_decay, compute_decay_multiplier, decay_at
from queryd.graph.items import compile_filter, filter_items, timestamps
from schemas.graph._gc import no_cyclic_gc
from schemas.graph.coerce import coerce, coerce_opt
from schemas.graph.filters import ScoredQueryOptions
from schemas.graph.ids import extract_timestamp, now_ms
from schemas.graph.items import MemoryItem
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
    wa, wc, wi = w.authority or 0.0, w.conviction or 0.0, w.importance or 0.0
    scores = [it.authority * wa for it in items] if wa else [0.0] * len(items)
    if wc:
        scores = [s + (it.conviction or 0.0) * wc for s, it in zip(scores, items, strict=True)]
    if wi:
        scores = [s + (it.importance or 0.0) * wi for s, it in zip(scores, items, strict=True)]
    if w.decay is not None:
        rate, interval_ms, kind = check_decay(w.decay)
        at = now_ms() if now is None else now
        ts = timestamps(items)
        base = 1.0 - rate
        if None not in ts and kind == "exponential":
            # decay_at inlined: one expression per item instead of a call.
            scores = [
                s * base ** ((at - t) / interval_ms) if t < at else s
                for s, t in zip(scores, ts, strict=True)
            ]
        else:
            scores = [
                s * decay_at(t, at, rate, interval_ms, kind)
                for s, t in zip(scores, ts, strict=True)
            ]
    return scores


_SCORED_SET = frozenset({"item", "score"})
_new = object.__new__
_setattr = object.__setattr__


def scored_item(item: MemoryItem, score: float) -> ScoredItem:
    # construct() specialised: a query may build 100k of these.
    s = _new(ScoredItem)
    _setattr(s, "__dict__", {"item": item, "score": score, "contradicted_by": None})
    _setattr(s, "__pydantic_fields_set__", set(_SCORED_SET))
    _setattr(s, "__pydantic_extra__", None)
    _setattr(s, "__pydantic_private__", None)
    return s


def rank(items: Sequence[MemoryItem], scores: list[float], keep: int | None = None) -> list[int]:
    """Indexes by score descending; ties keep the incoming order. ``keep``: top-k only."""
    n = len(items)
    if keep is not None and keep * 8 < n:
        # nlargest is documented equal to sorted(..., reverse=True)[:k], ties included.
        return heapq.nlargest(keep, range(n), key=scores.__getitem__)
    return sorted(range(n), key=scores.__getitem__, reverse=True)


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


def _scored(state: GraphState, w: ScoreWeights, o: ScoredQueryOptions) -> list[ScoredItem]:
    now = now_ms()
    items = filter_items(state, o.pre, now)
    scores = score_all(items, w, now)
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
    return [scored_item(items[i], scores[i]) for i in order[start:end]]


__all__ = ["compute_score", "extract_timestamp", "get_scored_items", "rank", "score_all"]
