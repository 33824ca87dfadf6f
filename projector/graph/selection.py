"""Selection: which items of a memory graph a `MemoryFilter` and `QueryOptions` select, in order.

Both the bulk operations of the fold (`projector.graph.bulk`) and the queries
(`queryd.graph`, `get_scored_items` among them) select items with these functions:
`compile_filter` and `matches_filter` (the predicate), `filter_items` (matching items,
using the state's scope index), `sort_items` and `page`, and `get_items` (all of them).

A filter is compiled once into a list of small predicates, one per present condition, so
a scan of 100k items evaluates only what the filter asks and never re-validates anything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import attrgetter, eq, is_not
from typing import Any

from projector.graph.decay import check_decay, decay_at
from projector.graph.ordering import sort_indexes
from projector.graph.pmap import HOLE
from projector.graph.state import GraphState, dense_column
from schemas.gc_guard import no_cyclic_gc
from schemas.graph.coerce import coerce, coerce_opt
from schemas.graph.filters import MemoryFilter, QueryOptions, Range, SortOption
from schemas.graph.ids import now_ms
from schemas.graph.items import MemoryItem, item_timestamp, require_timestamp

Predicate = Callable[[MemoryItem], bool]
_MISSING = object()


def _in_range(value: float | None, r: Range) -> bool:
    """Whether ``value`` is within the inclusive bounds. An absent score is outside any
    range with a bound (the seed's rule), inside one without."""
    lo, hi = r.min, r.max
    if value is None:
        return lo is None and hi is None
    if lo is not None and value < lo:
        return False
    return not (hi is not None and value > hi)


def _meta_get(meta: Mapping[str, Any] | None, path: str) -> Any:
    cur: Any = meta
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


# Exact-match fields a scan evaluates column-wise in C (map/compress) before the rest.
_EQ_FIELDS = ("scope", "author", "kind", "source_kind", "intent_id", "task_id")
_SCAN_FIELDS = frozenset({*_EQ_FIELDS, "scope_prefix", "ids"})


def _score_in_range(name: str, r: Range) -> Callable[[MemoryItem], bool]:
    get = attrgetter(name)
    return lambda it: _in_range(get(it), r)


def compile_filter(
    f: MemoryFilter, now: int | None = None, skip: frozenset[str] = frozenset()
) -> Predicate:
    """A predicate equivalent to ``matches_filter(item, f)`` (less the ``skip`` fields)."""
    preds: list[Predicate] = []
    add = preds.append
    if f.ids is not None and "ids" not in skip:
        ids = frozenset(f.ids)
        add(lambda it: it.id in ids)
    if f.scope is not None and "scope" not in skip:
        scope = f.scope
        add(lambda it: it.scope == scope)
    if f.scope_prefix is not None and "scope_prefix" not in skip:
        prefix = f.scope_prefix
        add(lambda it: it.scope.startswith(prefix))
    if f.author is not None and "author" not in skip:
        author = f.author
        add(lambda it: it.author == author)
    if f.kind is not None and "kind" not in skip:
        kind = f.kind
        add(lambda it: it.kind == kind)
    if f.source_kind is not None and "source_kind" not in skip:
        source_kind = f.source_kind
        add(lambda it: it.source_kind == source_kind)
    if f.range is not None:
        for name in ("authority", "conviction", "importance"):
            r = getattr(f.range, name)
            if r is not None:
                add(_score_in_range(name, r))
    if f.intent_id is not None and "intent_id" not in skip:
        intent_id = f.intent_id
        add(lambda it: it.intent_id == intent_id)
    if f.intent_ids is not None:
        intent_ids = frozenset(f.intent_ids)
        add(lambda it: it.intent_id is not None and it.intent_id in intent_ids)
    if f.task_id is not None and "task_id" not in skip:
        task_id = f.task_id
        add(lambda it: it.task_id == task_id)
    if f.task_ids is not None:
        task_ids = frozenset(f.task_ids)
        add(lambda it: it.task_id is not None and it.task_id in task_ids)
    if f.has_parent is not None:
        has_parent = f.has_parent
        add(lambda it: it.parents is not None and has_parent in it.parents)
    if f.is_root is not None:
        is_root = f.is_root
        add(lambda it: (not it.parents) == is_root)
    if f.parents is not None:
        pf = f.parents
        if pf.includes is not None:
            inc = pf.includes
            add(lambda it: it.parents is not None and inc in it.parents)
        if pf.includes_any is not None:
            any_of = frozenset(pf.includes_any)
            add(lambda it: it.parents is not None and not any_of.isdisjoint(it.parents))
        if pf.includes_all is not None:
            all_of = frozenset(pf.includes_all)
            add(lambda it: all_of.issubset(it.parents or ()))
        if pf.count is not None:
            count = pf.count
            add(lambda it: _in_range(len(it.parents or ()), count))  # never absent: 0
    if f.decay is not None:
        config, minimum = f.decay.config, f.decay.min
        at = now_ms() if now is None else now

        def decayed(it: MemoryItem) -> bool:
            # As the seed evaluates it, item by item: the item's time first, then (for an
            # item in the past) the interval and type, so a bad config raises only then.
            ts = require_timestamp(it)
            if at - ts <= 0:
                return 1.0 >= minimum
            rate, interval_ms, dkind = check_decay(config)
            return decay_at(ts, at, rate, interval_ms, dkind) >= minimum

        add(decayed)
    if f.created is not None:
        before, after = f.created.before, f.created.after
        if before is not None or after is not None:

            def created(it: MemoryItem) -> bool:
                ts = require_timestamp(it)  # no known time: the seed's InvalidTimestampError
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
    if f.or_:  # an empty list is no condition: it matches every item, as in the seed
        alts = [compile_filter(sub, now) for sub in f.or_]
        add(lambda it: any(alt(it) for alt in alts))

    if not preds:
        return _always
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


def _always(item: MemoryItem) -> bool:
    return True


def matches_filter(item: MemoryItem, f: MemoryFilter | Mapping[str, Any]) -> bool:
    """Whether ``item`` satisfies every present condition of ``f``."""
    return compile_filter(coerce(MemoryFilter, f))(item)


def _by_scope(
    state: GraphState, scope: str | None, prefix: str | None
) -> tuple[list[MemoryItem], bool]:
    """Candidates for an exact scope and/or a scope prefix, in insertion order, from the
    scope index the reducer maintains (O(scopes + matches), no scan of the items).

    The flag says whether every candidate is known to match: false when the index holds
    entries left behind by scope changes, which the caller must then re-check.
    """
    slots, exact = _scope_slots(state, scope, prefix)
    items: Any = state.items
    found = list(map(items.slot_values().__getitem__, slots))
    if items.has_holes():  # retracted items leave holes in their groups
        found = list(compress(found, map(is_not, found, repeat(HOLE))))
    return found, exact


def _scope_slots(
    state: GraphState, scope: str | None, prefix: str | None
) -> tuple[list[int], bool]:
    """``_by_scope`` as ascending item slots (holes included), and the same flag."""
    idx = state.index
    scopes = idx.scopes
    if scope is not None:
        names = [scope] if scope in scopes and scope.startswith(prefix or "") else []
    else:
        assert prefix is not None
        keys = list(scopes)  # scope names: far fewer than items
        names = list(compress(keys, map(str.startswith, keys, repeat(prefix))))
    exact = idx.scope_garbage == 0
    if not names:
        return [], True
    if len(names) == 1:
        group = scopes[names[0]]
        slots = list(group) if exact else sorted(set(group))
    elif exact:  # ascending, disjoint groups: timsort merges the runs
        slots = sorted(chain.from_iterable(map(scopes.__getitem__, names)))
    else:
        slots = sorted(set(chain.from_iterable(map(scopes.__getitem__, names))))
    return slots, exact


_SCOPE_FIELDS = frozenset({"scope", "scope_prefix"})
_SORT_FIELDS = frozenset({"authority", "conviction", "importance", "recency"})
_OTHER_FIELDS = tuple(n for n in MemoryFilter.model_fields if n not in _SCOPE_FIELDS)


def _sorted_by_scope(
    state: GraphState, f: MemoryFilter, opts: QueryOptions
) -> list[MemoryItem] | None:
    """get_items for a filter of scope conditions only, sorted on the reducer's columns:
    the hits' slots are sorted and paged before any item is touched. None: not applicable."""
    if any(getattr(f, n) is not None for n in _OTHER_FIELDS):
        return None
    sort = opts.sort
    if sort is None:
        return None
    keys = sort if isinstance(sort, list) else [sort]
    if not keys or any(opt.field not in _SORT_FIELDS for opt in keys):
        return None  # the item-by-item path raises the seed's error, if there is an item
    slots, exact = _scope_slots(state, f.scope, f.scope_prefix)
    if not exact:
        return None
    cols = state.index.columns
    if cols.ts_has_none and any(opt.field == "recency" for opt in keys):
        return None  # an item may have no time: the item-by-item path raises for it
    items: Any = state.items
    vals = items.slot_values()
    if items.has_holes():
        slots = list(compress(slots, map(is_not, map(vals.__getitem__, slots), repeat(HOLE))))
    many = len(slots) * 16 >= len(vals)
    if many and not items.has_holes():
        vals = items.values_tuple()  # without holes, slot i is the i-th value
    by_field: dict[str, Any] = {}
    for opt in keys:
        name = "ts" if opt.field == "recency" else opt.field
        # Many hits: the state's dense column (indexed several times faster than a pvector),
        # made once per state. Few: the pvector, no copy of 100k for 1k hits.
        by_field[opt.field] = dense_column(state, name, copy=many)
    # As sort_items: one stable sort per key, least significant first.
    order: Sequence[int] = slots
    for opt in reversed(keys):
        order = sort_indexes(by_field[opt.field], order, opt.order == "desc")
    return list(map(vals.__getitem__, page(order, opts.offset, opts.limit)))


def filter_items(
    state: GraphState, f: MemoryFilter | None, now: int | None = None
) -> Sequence[MemoryItem]:
    """Items matching ``f``, in insertion order (all items when ``f`` is None)."""
    items: Any = state.items
    if f is None:
        return items.values_tuple()
    source: Sequence[MemoryItem]
    exact = False  # True: the scope conditions are already known to hold
    skip = _SCAN_FIELDS
    if f.ids is not None:
        # Look the ids up instead of scanning, then restore insertion order.
        found = {i: items[i] for i in f.ids if i in items}
        source = [found[i] for i in sorted(found, key=items.position)]
    elif f.scope is not None or f.scope_prefix is not None:
        source, exact = _by_scope(state, f.scope, f.scope_prefix)
        skip = _SCAN_FIELDS - {"ids"}
    else:
        source = items.values_tuple()
    # The simple conditions run column-wise in C: no Python call per item.
    for name in _EQ_FIELDS:
        value = getattr(f, name)
        if value is not None and not (exact and name == "scope"):
            source = list(compress(source, map(eq, map(attrgetter(name), source), repeat(value))))
    if f.scope_prefix is not None and not exact:
        prefix = f.scope_prefix
        scopes = map(attrgetter("scope"), source)
        source = list(compress(source, map(str.startswith, scopes, repeat(prefix))))
    pred = compile_filter(f, now, skip)
    if pred is _always:
        return source
    return [it for it in source if pred(it)]


_EXACT_FLOAT = 2**53


def timestamps(items: Sequence[MemoryItem]) -> list[int | None]:
    """item_timestamp of each item, column-wise (created_at is almost always set)."""
    ts: list[int | None] = list(map(attrgetter("created_at"), items))
    if None in ts:
        ts = [item_timestamp(it) if t is None else t for t, it in zip(ts, items, strict=True)]
    return ts


def unknown_sort_field(field: str) -> ValueError:
    return ValueError(
        f'Unknown sort field: "{field}". Expected "authority", "conviction", "importance", '
        'or "recency".'
    )


def _column(items: Sequence[MemoryItem], field: str) -> list[Any]:
    """Sort key column of ``field``; a missing score sorts as 0. The caller has checked
    the field and (for recency) that every item has a time."""
    col: list[Any]
    if field == "recency":
        col = timestamps(items)
    else:
        col = list(map(attrgetter(field), items))
        if None in col:
            col = [0 if v is None else v for v in col]
    if field == "recency" and col and max(col) < _EXACT_FLOAT and min(col) > -_EXACT_FLOAT:
        # Exact as floats, and a sort compares floats much faster than multi-digit ints.
        col = list(map(float, col))
    return col


def _check_sort_keys(items: Sequence[MemoryItem], keys: list[SortOption]) -> None:
    """Raise what the seed's sort raises, in its order: it computes each item's key (all
    sort fields, in order) item by item, so the first item and field that fail decide
    between ValueError (unknown field) and InvalidTimestampError (no time for recency)."""
    unknown = any(opt.field not in _SORT_FIELDS for opt in keys)
    recency = any(opt.field == "recency" for opt in keys)
    if not unknown and not (recency and None in timestamps(items)):
        return
    for it in items:
        for opt in keys:
            if opt.field not in _SORT_FIELDS:
                raise unknown_sort_field(opt.field)
            if opt.field == "recency":
                require_timestamp(it)


def sort_items(
    items: Sequence[MemoryItem], sort: SortOption | list[SortOption] | None
) -> list[MemoryItem]:
    """Multi-key sort; ties keep the incoming (insertion) order."""
    if sort is None:
        return list(items)
    keys = sort if isinstance(sort, list) else [sort]
    if not items or not keys:
        return list(items)
    _check_sort_keys(items, keys)
    cols = [_column(items, opt.field) for opt in keys]
    # One stable sort per key, least significant first, each keyed by a precomputed column
    # (reverse keeps ties in order): together a lexicographic sort whose final ties keep
    # the incoming order.
    order: Sequence[int] | None = None
    for opt, col in zip(reversed(keys), reversed(cols), strict=True):
        order = sort_indexes(col, order, opt.order == "desc")
    return list(map(items.__getitem__, range(len(items)) if order is None else order))


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
    with no_cyclic_gc():
        if (
            f is not None
            and opts is not None
            and opts.sort is not None
            and (f.scope is not None or f.scope_prefix is not None)
        ):
            fast = _sorted_by_scope(state, f, opts)
            if fast is not None:
                return fast
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
