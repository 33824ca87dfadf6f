"""GraphState: the memory graph as persistent, insertion-ordered maps plus derived indexes.

A state is immutable. Every command builds a new state that shares almost all of its
structure with the old one (O(log n) per write), so old states stay valid and unchanged and
a fold over n commands is linear. The indexes answer the reads that would otherwise scan
everything: children by parent id, edges by endpoint, active edges by kind, stale items.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

from pyrsistent import pvector

from projector.graph.pmap import (
    EMPTY,
    HOLE,
    OrderedPMap,
    SmallSet,
    sset_add,
    sset_iter,
    sset_remove,
)
from schemas.gc_guard import untrack_large
from schemas.graph.commands import MemoryLifecycleEvent
from schemas.graph.items import Edge, MemoryItem, item_timestamp

_EXACT_FLOAT = 2**53


@dataclass(frozen=True, slots=True)
class Columns:
    """Per-slot columns of the items (aligned with ``items.position``), for queries that sort
    or score many items without touching each model: pvectors read back at C speed.

    Scores are stored with None as 0.0 (as scoring and sorting treat them); ``ts`` holds
    ``item_timestamp`` (as a float when exact), None where unknown. A removed slot keeps
    stale values: readers take only the slots of live items.
    """

    authority: Any
    conviction: Any
    importance: Any
    ts: Any
    ts_has_none: bool  # some ts may be None: readers take their slow path


EMPTY_COLUMNS = Columns(pvector(), pvector(), pvector(), pvector(), False)


def column_values(
    items: Iterable[Any],
) -> tuple[list[float], list[float], list[float], list[Any], bool]:
    """The column values of ``items`` (HOLE allowed: zeros)."""
    rows = [_ZERO if it is HOLE else it for it in items]
    auth = list(map(attrgetter("authority"), rows))
    conv = [0.0 if v is None else v for v in map(attrgetter("conviction"), rows)]
    imp = [0.0 if v is None else v for v in map(attrgetter("importance"), rows)]
    ts: list[Any] = list(map(attrgetter("created_at"), rows))
    has_none = False
    if None in ts:
        ts = [item_timestamp(it) if t is None else t for t, it in zip(ts, rows, strict=True)]
        has_none = None in ts
    if ts and (has_none or not -_EXACT_FLOAT < min(ts) <= max(ts) < _EXACT_FLOAT):
        ts = [t if t is None or abs(t) >= _EXACT_FLOAT else float(t) for t in ts]
    else:
        ts = list(map(float, ts))
    return auth, conv, imp, ts, has_none


class _Zero:
    __slots__ = ()
    authority = conviction = importance = 0.0
    created_at = 0
    id = ""


_ZERO: Any = _Zero()


COLUMN_NAMES = ("authority", "conviction", "importance", "ts")


def dense_column(state: GraphState, name: str, *, copy: bool = True) -> Any:
    """One of the state's columns (``COLUMN_NAMES``) as a dense sequence, built once per
    state and cached on its items map: an ``array('d')`` when every value is a float (the
    C loops read its doubles in place, no object per value), else a list. Either indexes
    several times faster than a pvector, and sorts and scores index 10k-100k times a
    query. The items map changes whenever a column does, so the cache cannot go stale.
    Read only.

    ``copy=False``: the cached one if there is one, else the pvector itself (for a query
    touching few slots, which would not repay a copy)."""
    vec = getattr(state.index.columns, name)
    items: Any = state.items
    if not copy:
        got = items.derived_if_built("column:" + name)
        return vec if got is None else got

    def build(_m: Any) -> Any:
        if set(map(type, vec)) <= {float}:
            return array("d", vec)
        out = list(vec)  # None, or an int past float precision: as they are
        untrack_large((out,))
        return out

    return items.derived("column:" + name, build)


def build_columns(items: OrderedPMap[str, MemoryItem]) -> Columns:
    auth, conv, imp, ts, has_none = column_values(items.slot_values())
    return Columns(pvector(auth), pvector(conv), pvector(imp), pvector(ts), has_none)


@dataclass(frozen=True, slots=True)
class GraphIndex:
    """Derived from items and edges; maintained by the reducer, never by callers."""

    # parent id -> ids of existing items listing it in their parents (parent may be missing)
    children: OrderedPMap[str, SmallSet]
    # item id -> ids of edges whose from_ / to is that id (active or not)
    outgoing: OrderedPMap[str, SmallSet]
    incoming: OrderedPMap[str, SmallSet]
    # edge kind -> ids of the active edges of that kind
    active_by_kind: OrderedPMap[str, SmallSet]
    # ids of items with at least one parent id that is not in the graph
    stale: OrderedPMap[str, bool]
    # scope -> pvector of item slots (``items.position``), for scope / scope_prefix queries.
    # Appended to, never shrunk: a retracted item leaves a HOLE slot and an item moved to
    # another scope leaves its old entry behind, so readers re-check each hit's scope.
    # Without moves (``scope_garbage == 0``) every group is ascending and duplicate-free.
    scopes: OrderedPMap[str, Any]
    # entries left behind by scope changes; past len(items) the groups are rebuilt
    scope_garbage: int = 0
    columns: Columns = EMPTY_COLUMNS


EMPTY_INDEX = GraphIndex(EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, 0, EMPTY_COLUMNS)


@dataclass(frozen=True)
class GraphState:
    """The memory graph. ``items`` and ``edges`` are insertion-ordered maps.

    ``GraphState(items=..., edges=...)`` also accepts plain mappings; they are converted and
    indexed once (O(n)). The reducer builds states directly, with the index already kept.
    The maps take dict-style assignment, as the seed's dicts do (``state.items[k] = v``);
    the state notices it (the maps' versions) and rebuilds its index on the next read.
    """

    items: Mapping[str, MemoryItem] = field(default_factory=lambda: EMPTY.copy())
    edges: Mapping[str, Edge] = field(default_factory=lambda: EMPTY.copy())
    _index: GraphIndex | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        items, edges = self.items, self.edges
        if not isinstance(items, OrderedPMap) or items is EMPTY:
            items = OrderedPMap(items.items() if isinstance(items, Mapping) else items)
            object.__setattr__(self, "items", items)
        if not isinstance(edges, OrderedPMap) or edges is EMPTY:
            edges = OrderedPMap(edges.items() if isinstance(edges, Mapping) else edges)
            object.__setattr__(self, "edges", edges)
        if self._index is None:
            object.__setattr__(self, "_index", build_index(items, edges))
        object.__setattr__(self, "_stamp", (items._ver, edges._ver))
        _untrack(items, edges, self.index)

    @property
    def index(self) -> GraphIndex:
        idx = self._index
        items: Any = self.items
        edges: Any = self.edges
        now = (items._ver, edges._ver)
        stamp = self.__dict__.get("_stamp")
        if now != stamp:
            if stamp is not None or idx is None:
                # Someone assigned to the maps (as to the seed's dicts): derive anew.
                idx = build_index(items, edges)
                object.__setattr__(self, "_index", idx)
            # (No stamp: a state pickled before maps took assignment; its index holds.)
            object.__setattr__(self, "_stamp", now)
        assert idx is not None  # set by __post_init__
        return idx


def _untrack(
    items: OrderedPMap[str, MemoryItem], edges: OrderedPMap[str, Edge], index: GraphIndex
) -> None:
    """Keep the cyclic GC from walking a state's big vectors (see ``untrack_large``); a
    command makes a few new ones, the rest were untracked with an earlier state."""
    c = index.columns
    untrack_large(
        chain.from_iterable(
            m.vectors()
            for m in (
                items,
                edges,
                index.children,
                index.outgoing,
                index.incoming,
                index.active_by_kind,
                index.stale,
                index.scopes,
            )
        )
    )
    untrack_large((c.authority, c.conviction, c.importance, c.ts))


def _make_state(
    items: OrderedPMap[str, MemoryItem], edges: OrderedPMap[str, Edge], index: GraphIndex
) -> GraphState:
    # Bypasses __post_init__ normalisation: the reducer's maps and index are already right.
    # The maps a state shows are never the shared EMPTY, which must not be assigned to.
    if items is EMPTY:
        items = EMPTY.copy()
    if edges is EMPTY:
        edges = EMPTY.copy()
    _untrack(items, edges, index)
    st = object.__new__(GraphState)
    object.__setattr__(st, "items", items)
    object.__setattr__(st, "edges", edges)
    object.__setattr__(st, "_index", index)
    object.__setattr__(st, "_stamp", (items._ver, edges._ver))
    return st


class CommandResult(NamedTuple):
    """What a command returns; unpacks as ``state, events = apply_command(...)``."""

    state: GraphState
    events: list[MemoryLifecycleEvent]


def create_graph_state() -> GraphState:
    """A new, empty memory graph (its own maps: assigning to them touches no other)."""
    return _make_state(EMPTY.copy(), EMPTY.copy(), EMPTY_INDEX)


def clone_graph_state(state: GraphState) -> GraphState:
    """A new state with new maps holding the same entries and sharing all (immutable)
    structure, O(1): assigning to the clone's maps leaves ``state``'s as they were."""
    items: Any = state.items
    edges: Any = state.edges
    return _make_state(items.copy(), edges.copy(), state.index)


def build_index(items: OrderedPMap[str, MemoryItem], edges: OrderedPMap[str, Edge]) -> GraphIndex:
    """The index of a state built from plain maps (O(n))."""
    children: dict[str, list[str]] = {}
    stale: list[str] = []
    for iid, item in items.items():
        parents = item.parents
        if parents:
            missing = False
            for p in dict.fromkeys(parents):
                children.setdefault(p, []).append(iid)
                if p not in items:
                    missing = True
            if missing:
                stale.append(iid)
    outgoing: dict[str, list[str]] = {}
    incoming: dict[str, list[str]] = {}
    by_kind: dict[str, list[str]] = {}
    for eid, edge in edges.items():
        outgoing.setdefault(edge.from_, []).append(eid)
        incoming.setdefault(edge.to, []).append(eid)
        if edge.active:
            by_kind.setdefault(edge.kind, []).append(eid)
    return GraphIndex(
        children=_sets(children),
        outgoing=_sets(outgoing),
        incoming=_sets(incoming),
        active_by_kind=_sets(by_kind),
        stale=OrderedPMap((i, True) for i in stale),
        scopes=build_scopes(items),
        columns=build_columns(items),
    )


def build_scopes(items: OrderedPMap[str, MemoryItem]) -> OrderedPMap[str, Any]:
    """The scope index of ``items`` from scratch (O(n)): scope -> ascending slots."""
    groups: dict[str, list[int]] = {}
    for slot, item in enumerate(items.slot_values()):
        if item is HOLE:
            continue
        g = groups.get(item.scope)
        if g is None:
            groups[item.scope] = [slot]
        else:
            g.append(slot)
    vecs = {k: pvector(v) for k, v in groups.items()}
    untrack_large(vecs.values())
    return OrderedPMap(vecs)


def _sets(groups: dict[str, list[str]]) -> OrderedPMap[str, SmallSet]:
    out: list[tuple[str, SmallSet]] = []
    for key, members in groups.items():
        s: SmallSet | None = None
        for m in members:
            s = sset_add(s, m)
        assert s is not None
        out.append((key, s))
    return OrderedPMap(out)


# -- index reads (for queries and for the other graphs' code) ---------------------------------


def in_item_order(state: GraphState, ids: Iterable[str]) -> list[str]:
    """Existing ids among ``ids``, deduplicated, in the items' insertion order."""
    items: Any = state.items
    if isinstance(ids, tuple) and len(ids) == 1:  # the common index set: one member
        return [ids[0]] if ids[0] in items else []
    present = {i for i in ids if i in items}
    if len(present) < 2:
        return list(present)
    return sorted(present, key=items.position)


def in_edge_order(state: GraphState, ids: Iterable[str]) -> list[str]:
    edges: Any = state.edges
    if isinstance(ids, tuple) and len(ids) == 1:
        return [ids[0]] if ids[0] in edges else []
    present = {i for i in ids if i in edges}
    if len(present) < 2:
        return list(present)
    return sorted(present, key=edges.position)


def child_ids(state: GraphState, item_id: str) -> list[str]:
    """Ids of items listing ``item_id`` among their parents, in insertion order."""
    return in_item_order(state, sset_iter(state.index.children.get(item_id)))


def outgoing_edge_ids(state: GraphState, item_id: str) -> list[str]:
    return in_edge_order(state, sset_iter(state.index.outgoing.get(item_id)))


def incoming_edge_ids(state: GraphState, item_id: str) -> list[str]:
    return in_edge_order(state, sset_iter(state.index.incoming.get(item_id)))


def active_edge_ids(state: GraphState, kind: str) -> list[str]:
    """Ids of the active edges of ``kind``, in insertion order."""
    return in_edge_order(state, sset_iter(state.index.active_by_kind.get(kind)))


def stale_ids(state: GraphState) -> list[str]:
    return in_item_order(state, state.index.stale)


__all__ = [
    "Columns",
    "CommandResult",
    "GraphIndex",
    "GraphState",
    "active_edge_ids",
    "build_columns",
    "COLUMN_NAMES",
    "dense_column",
    "build_index",
    "build_scopes",
    "child_ids",
    "clone_graph_state",
    "create_graph_state",
    "in_edge_order",
    "in_item_order",
    "incoming_edge_ids",
    "outgoing_edge_ids",
    "sset_add",
    "sset_remove",
    "stale_ids",
]
