"""get_items and the MemoryFilter predicate.

A filter is compiled once into a list of small predicates, one per present condition, so
a scan of 100k items evaluates only what the filter asks and never re-validates anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from projector.graph.state import GraphState
from queryd.graph.decay import check_decay, decay_at
from schemas.graph.coerce import coerce, coerce_opt
from schemas.graph.filters import MemoryFilter, QueryOptions, Range, SortOption
from schemas.graph.ids import now_ms
from schemas.graph.items import MemoryItem, item_timestamp

Predicate = Callable[[MemoryItem], bool]
_MISSING = object()


def _in_range(value: float | None, r: Range) -> bool:
    v = 0.0 if value is None else value  # a missing score counts as 0, as in compute_score
    if r.min is not None and v < r.min:
        return False
    return not (r.max is not None and v > r.max)


def _meta_get(meta: Mapping[str, Any] | None, path: str) -> Any:
    cur: Any = meta
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def compile_filter(f: MemoryFilter, now: int | None = None) -> Predicate:
    """A predicate equivalent to ``matches_filter(item, f)``."""
    preds: list[Predicate] = []
    add = preds.append
    if f.ids is not None:
        ids = frozenset(f.ids)
        add(lambda it: it.id in ids)
    if f.scope is not None:
        scope = f.scope
        add(lambda it: it.scope == scope)
    if f.scope_prefix is not None:
        prefix = f.scope_prefix
        add(lambda it: it.scope.startswith(prefix))
    if f.author is not None:
        author = f.author
        add(lambda it: it.author == author)
    if f.kind is not None:
        kind = f.kind
        add(lambda it: it.kind == kind)
    if f.source_kind is not None:
        source_kind = f.source_kind
        add(lambda it: it.source_kind == source_kind)
    if f.range is not None:
        for name in ("authority", "conviction", "importance"):
            r = getattr(f.range, name)
            if r is not None:
                get = attrgetter(name)
                add(lambda it, get=get, r=r: _in_range(get(it), r))
    if f.intent_id is not None:
        intent_id = f.intent_id
        add(lambda it: it.intent_id == intent_id)
    if f.intent_ids is not None:
        intent_ids = frozenset(f.intent_ids)
        add(lambda it: it.intent_id is not None and it.intent_id in intent_ids)
    if f.task_id is not None:
        task_id = f.task_id
        add(lambda it: it.task_id == task_id)
    if f.task_ids is not None:
        task_ids = frozenset(f.task_ids)
        add(lambda it: it.task_id is not None and it.task_id in task_ids)
    if f.has_parent is not None:
        has_parent = f.has_parent
        add(lambda it: bool(it.parents) and has_parent in it.parents)
    if f.is_root is not None:
        is_root = f.is_root
        add(lambda it: (not it.parents) == is_root)
    if f.parents is not None:
        pf = f.parents
        if pf.includes is not None:
            inc = pf.includes
            add(lambda it: bool(it.parents) and inc in it.parents)
        if pf.includes_any is not None:
            any_of = frozenset(pf.includes_any)
            add(lambda it: bool(it.parents) and not any_of.isdisjoint(it.parents))
        if pf.includes_all is not None:
            all_of = frozenset(pf.includes_all)
            add(lambda it: all_of.issubset(it.parents or ()))
        if pf.count is not None:
            count = pf.count
            add(lambda it: _in_range(len(it.parents or ()), count))
    if f.decay is not None:
        rate, interval_ms, dkind = check_decay(f.decay.config)
        minimum = f.decay.min
        at = now_ms() if now is None else now
        add(lambda it: decay_at(item_timestamp(it), at, rate, interval_ms, dkind) >= minimum)
    if f.created is not None:
        before, after = f.created.before, f.created.after
        if before is not None or after is not None:

            def created(it: MemoryItem) -> bool:
                ts = item_timestamp(it)
                if ts is None:
                    return False  # no known time is outside every window
                if before is not None and not ts < before:
                    return False
                return after is None or ts >= after

            add(created)
    if f.not_ is not None:
        inner = compile_filter(f.not_, now)
        add(lambda it: not inner(it))
    if f.meta is not None:
        pairs = list(f.meta.items())
        add(lambda it: all(_meta_get(it.meta, p) == v for p, v in pairs))
    if f.meta_has is not None:
        paths = list(f.meta_has)
        add(lambda it: all(_meta_get(it.meta, p) is not _MISSING for p in paths))
    if f.or_ is not None:
        alts = [compile_filter(sub, now) for sub in f.or_]
        add(lambda it: any(alt(it) for alt in alts))

    if not preds:
        return lambda it: True
    if len(preds) == 1:
        return preds[0]
    if len(preds) == 2:
        p0, p1 = preds
        return lambda it: p0(it) and p1(it)

    def conj(it: MemoryItem) -> bool:
        for p in preds:
            if not p(it):
                return False
        return True

    return conj


def matches_filter(item: MemoryItem, f: MemoryFilter | Mapping[str, Any]) -> bool:
    """Whether ``item`` satisfies every present condition of ``f``."""
    return compile_filter(coerce(MemoryFilter, f))(item)


def filter_items(
    state: GraphState, f: MemoryFilter | None, now: int | None = None
) -> Sequence[MemoryItem]:
    """Items matching ``f``, in insertion order (all items when ``f`` is None)."""
    items: Any = state.items
    if f is None:
        return items.values_tuple()  # type: ignore[no-any-return]
    if f.ids is not None:
        # Look the ids up instead of scanning, then restore insertion order.
        found = {i: items[i] for i in f.ids if i in items}
        source: Iterable[MemoryItem] = [found[i] for i in sorted(found, key=items.position)]
    else:
        source = items.values_tuple()
    pred = compile_filter(f, now)
    return [it for it in source if pred(it)]


def _sort_key(field: str) -> Callable[[MemoryItem], float]:
    if field == "recency":
        return lambda it: item_timestamp(it) or 0
    if field == "authority":
        return attrgetter("authority")
    if field in ("conviction", "importance"):
        get = attrgetter(field)
        return lambda it: get(it) or 0.0  # a missing score sorts as 0
    raise ValueError(f"unknown sort field: {field!r}")


def sort_items(items: Sequence[MemoryItem], sort: SortOption | list[SortOption] | None
               ) -> list[MemoryItem]:  # fmt: skip
    """Multi-key stable sort: ties keep the incoming (insertion) order."""
    out = list(items)
    if sort is None:
        return out
    keys = sort if isinstance(sort, list) else [sort]
    checked = []
    for opt in keys:
        if opt.order not in ("asc", "desc"):
            raise ValueError(f"unknown sort order: {opt.order!r}")
        checked.append((_sort_key(opt.field), opt.order == "desc"))
    # Stable sorts from the last key to the first give lexicographic order; reverse=True
    # keeps equal elements in their original order, so ties stay in insertion order.
    for key, desc in reversed(checked):
        out.sort(key=key, reverse=desc)
    return out


def page(seq: Sequence[Any], offset: int | None, limit: int | None) -> list[Any]:
    start = offset or 0
    if limit is None:
        return list(seq[start:])
    return list(seq[start : start + limit])


def get_items(
    state: GraphState,
    filter: MemoryFilter | Mapping[str, Any] | None = None,
    options: QueryOptions | Mapping[str, Any] | None = None,
) -> list[MemoryItem]:
    """Filter, then sort, then page. No filter: every item in insertion order."""
    f = coerce_opt(MemoryFilter, filter)
    opts = coerce_opt(QueryOptions, options)
    matched = filter_items(state, f)
    if opts is None:
        return list(matched)
    ordered = sort_items(matched, opts.sort) if opts.sort is not None else matched
    return page(ordered, opts.offset, opts.limit)


def get_item_by_id(state: GraphState, id: str) -> MemoryItem | None:
    return state.items.get(id)


__all__ = [
    "compile_filter",
    "filter_items",
    "get_item_by_id",
    "get_items",
    "matches_filter",
    "page",
    "sort_items",
]
