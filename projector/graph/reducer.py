"""The memory-graph reducer: ``apply_command(state, cmd) -> (new_state, events)``.

Every write goes through ``Tx``, a working copy holding references to the state's
persistent maps. Each operation first checks everything that can fail, then rebinds the
references to new maps; the input state is never touched, so a raised error leaves no trace.
Bulk callers (replay, cascade, apply_many) run many commands in one Tx and freeze once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any

from pyrsistent import pvector

from projector.graph.pmap import (
    _SMALL,
    EMPTY,
    OrderedPMap,
    SmallSet,
    sset_add,
    sset_iter,
    sset_remove,
)
from projector.graph.state import (
    Columns,
    CommandResult,
    GraphIndex,
    GraphState,
    _make_state,
    build_columns,
    build_scopes,
    column_values,
)
from schemas.gc_guard import cyclic_gc_paused, untrack_large
from schemas.graph._fast import replace
from schemas.graph.commands import (
    MEMORY_COMMAND_TYPES,
    MemoryCommand,
    MemoryCommandAdapter,
    MemoryLifecycleEvent,
)
from schemas.graph.errors import (
    DuplicateEdgeError,
    DuplicateMemoryError,
    EdgeNotFoundError,
    MemoryNotFoundError,
)
from schemas.graph.items import Edge, MemoryItem

_ITEM_IMMUTABLE = frozenset({"id", "created_at"})
_EDGE_IMMUTABLE = frozenset({"edge_id", "from_", "from", "to"})
_MERGED = frozenset({"content", "meta"})


def merge_item(existing: MemoryItem, partial: Mapping[str, Any]) -> MemoryItem:
    """The seed's update of an item, unvalidated: every key of ``partial`` but id and
    created_at replaces the item's (unknown keys too, as ``model_copy(update=)`` sets
    them); ``content`` and ``meta`` merge keys into the old dicts, so their new value must
    be a mapping (TypeError otherwise: "'NoneType' object is not a mapping")."""
    update: dict[str, Any] = {}
    for key, value in partial.items():
        if key in _ITEM_IMMUTABLE:
            continue
        if key in _MERGED:
            value = {**(getattr(existing, key) or {}), **value}
        update[key] = value
    return replace(existing, update) if update else existing


def merge_edge(existing: Edge, partial: Mapping[str, Any]) -> Edge:
    """The seed's update of an edge, unvalidated: every key of ``partial`` but edge_id and
    the endpoints replaces the edge's; ``meta`` is replaced, not merged."""
    update = {k: v for k, v in partial.items() if k not in _EDGE_IMMUTABLE}
    return replace(existing, update) if update else existing


# One fields set shared by every event built here: events are frozen, so nothing adds to it
# (and a set fewer per event is an allocation and a GC traversal fewer in a 100k fold).
_EVENT_FIELDS = {"namespace", "type", "item", "edge", "cause_type"}
_new = object.__new__
_setattr = object.__setattr__


def _event(
    type_: str, cause: str | None, item: MemoryItem | None = None, edge: Edge | None = None
) -> MemoryLifecycleEvent:
    # Hot path (one per command): construct() specialised to this model's fields.
    ev = _new(MemoryLifecycleEvent)
    _setattr(
        ev,
        "__dict__",
        {"namespace": "memory", "type": type_, "item": item, "edge": edge, "cause_type": cause},
    )
    _setattr(ev, "__pydantic_fields_set__", _EVENT_FIELDS)
    _setattr(ev, "__pydantic_extra__", None)
    _setattr(ev, "__pydantic_private__", None)
    return ev


def coerce_command(cmd: MemoryCommand | Mapping[str, Any]) -> MemoryCommand:
    """A command model as is; anything else validated (pydantic.ValidationError if bad)."""
    if isinstance(cmd, MEMORY_COMMAND_TYPES):
        return cmd
    return MemoryCommandAdapter.validate_python(cmd)


def _idx_add(m: OrderedPMap[str, SmallSet], key: str, member: str) -> OrderedPMap[str, SmallSet]:
    return m.set(key, sset_add(m.get(key), member))


def _idx_remove(m: OrderedPMap[str, SmallSet], key: str, member: str) -> OrderedPMap[str, SmallSet]:
    s = m.get(key)
    if s is None:
        return m
    rest = sset_remove(s, member)
    if rest is None:
        return m.remove(key)
    return m if rest is s else m.set(key, rest)


class Tx:
    """A mutable working copy of a GraphState; ``freeze()`` yields the new state."""

    __slots__ = (
        "items",
        "edges",
        "children",
        "outgoing",
        "incoming",
        "by_kind",
        "stale",
        "scopes",
        "scope_garbage",
        "scope_pending",
        "slots_stale",
        "columns",
        "col_dirty",
        "events",
    )

    def __init__(self, state: GraphState) -> None:
        idx = state.index
        self.items: OrderedPMap[str, MemoryItem] = state.items  # type: ignore[assignment]
        self.edges: OrderedPMap[str, Edge] = state.edges  # type: ignore[assignment]
        self.children = idx.children
        self.outgoing = idx.outgoing
        self.incoming = idx.incoming
        self.by_kind = idx.active_by_kind
        self.stale = idx.stale
        self.scopes = idx.scopes
        self.scope_garbage = idx.scope_garbage
        # Slots added to each scope during this Tx, merged into ``scopes`` at freeze: a plain
        # dict append per create instead of a persistent write. Appended to last in every
        # operation (after all checks), so a failed command never leaves an entry here.
        self.scope_pending: dict[str, list[int]] = {}
        # set when slot numbers changed (compaction): scopes and columns rebuilt at freeze
        self.slots_stale = False
        # Columns cover the slots they had at the Tx start; at freeze the new slots are read
        # from the items (one pass) and the updated old slots (``col_dirty``) are rewritten.
        self.columns = idx.columns
        self.col_dirty: set[int] = set()
        self.events: list[MemoryLifecycleEvent] = []

    def snapshot(self) -> tuple[Any, ...]:
        """For ``restore`` after a failed operation (not across a ``freeze``)."""
        return (
            self.items,
            self.edges,
            self.children,
            self.outgoing,
            self.incoming,
            self.by_kind,
            self.stale,
            self.scope_garbage,
            self.slots_stale,
            len(self.events),
        )

    def restore(self, snap: tuple[Any, ...]) -> None:
        (
            self.items,
            self.edges,
            self.children,
            self.outgoing,
            self.incoming,
            self.by_kind,
            self.stale,
            self.scope_garbage,
            self.slots_stale,
            n,
        ) = snap
        del self.events[n:]

    def _scopes(self) -> OrderedPMap[str, Any]:
        pending = self.scope_pending
        if self.slots_stale or self.scope_garbage > len(self.items):
            self.scopes = build_scopes(self.items)
            self.scope_garbage = 0
            self.slots_stale = False
        elif pending:
            scopes = self.scopes
            for name, slots in pending.items():
                vec = scopes.get(name)
                vec = pvector(slots) if vec is None else vec.extend(slots)
                untrack_large((vec,))
                scopes = scopes.set(name, vec)
            self.scopes = scopes
        pending.clear()
        return self.scopes

    def _columns(self) -> Columns:
        items = self.items
        cols = self.columns
        if self.slots_stale:
            cols = build_columns(items)
        else:
            base, end = len(cols.ts), items.slot_count()
            dirty = [s for s in self.col_dirty if s < base]
            if base < end or dirty:
                vals = items.slot_values()
                vecs = [cols.authority, cols.conviction, cols.importance, cols.ts]
                has_none = cols.ts_has_none
                if dirty:
                    rows = column_values(map(vals.__getitem__, dirty))
                    has_none = has_none or rows[4]
                    for k, column in enumerate(rows[:4]):
                        args: list[Any] = [None] * (2 * len(dirty))
                        args[::2] = dirty
                        args[1::2] = column
                        vecs[k] = vecs[k].mset(*args)
                if base < end:
                    rows = column_values(vals[base:end])
                    has_none = has_none or rows[4]
                    vecs = [v.extend(r) for v, r in zip(vecs, rows[:4], strict=True)]
                authority, conviction, importance, ts = vecs
                cols = Columns(authority, conviction, importance, ts, has_none)
        self.col_dirty.clear()
        self.columns = cols
        return cols

    def freeze(self) -> GraphState:
        # _columns() first: _scopes() resets slots_stale, which both read.
        columns = self._columns()
        scopes = self._scopes()
        return _make_state(
            self.items,
            self.edges,
            GraphIndex(
                self.children,
                self.outgoing,
                self.incoming,
                self.by_kind,
                self.stale,
                scopes,
                self.scope_garbage,
                columns,
            ),
        )

    def result(self) -> CommandResult:
        return CommandResult(self.freeze(), self.events)

    # -- dispatch --------------------------------------------------------------------------

    def apply(self, cmd: MemoryCommand) -> None:
        t = cmd.type
        if t == "memory.create":  # the common case first
            self.create_item(cmd.item, t)  # type: ignore[union-attr]
        elif t == "memory.update":
            self.update_item(cmd.item_id, cmd.partial, t)  # type: ignore[union-attr]
        elif t == "memory.retract":
            self.retract_item(cmd.item_id, t)  # type: ignore[union-attr]
        elif t == "edge.create":
            self.create_edge(cmd.edge, t)  # type: ignore[union-attr]
        elif t == "edge.update":
            self.update_edge(cmd.edge_id, cmd.partial, t)  # type: ignore[union-attr]
        elif t == "edge.retract":
            self.retract_edge(cmd.edge_id, t)  # type: ignore[union-attr]
        else:  # pragma: no cover - the union is closed
            raise ValueError(f"unknown memory command type: {t!r}")

    # -- items -----------------------------------------------------------------------------

    def create_item(self, item: MemoryItem, cause: str | None = "memory.create") -> None:
        iid = item.id
        items = self.items
        slot = items.slot_count()  # where set_new puts it
        try:
            self.items = new_items = items.set_new(iid, item)
        except KeyError:
            raise DuplicateMemoryError(iid) from None
        if new_items.slot_count() != slot + 1:  # growing compacted the holes: renumbered
            self._slots_renumbered()
            slot = new_items.slot_count() - 1
        if item.parents:
            self._link(iid, item.parents)
        if self.children:
            kids = self.children.get(iid)
            if kids is not None:  # items that named this id as a parent may not be stale now
                self._recheck(sset_iter(kids))
        self.events.append(_event("memory.created", cause, item=item))
        group = self.scope_pending.get(item.scope)
        if group is None:
            self.scope_pending[item.scope] = [slot]
        else:
            group.append(slot)

    def create_many(
        self, items: list[MemoryItem], cause: str | None = "memory.create"
    ) -> list[tuple[int, Exception]]:
        """``create_item`` of each item in order, with the same events and resulting state,
        and each failure (a repeated id) returned with its position instead of raised. The
        plain items (no parents, named by no child) are added to the items map in one
        batch; any other item first flushes the batch, then takes ``create_item``."""
        failures: list[tuple[int, Exception]] = []
        keys: list[str] = []
        batch: list[MemoryItem] = []
        # An id is taken if the map had it when we began, or this call added it: a C-level
        # set lookup, and no map lookup at all when folding onto an empty graph.
        before = self.items if self.items else None
        added: set[str] = set()
        for pos, item in enumerate(items):
            iid = item.id
            if iid in added or (before is not None and iid in before):
                failures.append((pos, DuplicateMemoryError(iid)))
                continue
            added.add(iid)
            if item.parents or (self.children and iid in self.children):
                self._create_batch(keys, batch, cause)
                self.create_item(item, cause)
            else:
                keys.append(iid)
                batch.append(item)
        self._create_batch(keys, batch, cause)
        return failures

    def _create_batch(self, keys: list[str], batch: list[MemoryItem], cause: str | None) -> None:
        """Add distinct, absent, parentless items no child names (``create_many``); empties
        both lists."""
        if not keys:
            return
        before = self.items
        first = before.slot_count()
        self.items = after = before.extend_new(keys, batch)
        self.events.extend(map(_event, repeat("memory.created"), repeat(cause), batch))
        if after.slot_count() != first + len(keys):  # growing compacted the holes
            self._slots_renumbered()
        else:
            pending = self.scope_pending
            for slot, item in enumerate(batch, first):
                group = pending.get(item.scope)
                if group is None:
                    pending[item.scope] = [slot]
                else:
                    group.append(slot)
        keys.clear()
        batch.clear()

    def update_item(
        self, iid: str, partial: Mapping[str, Any], cause: str | None = "memory.update"
    ) -> MemoryItem:
        old = self.items.get(iid)
        if old is None:
            raise MemoryNotFoundError(iid)
        new = merge_item(old, partial)
        self.items = self.items.set(iid, new)
        if new.parents != old.parents:
            if old.parents:
                self._unlink(iid, old.parents)
            self.stale = self.stale.discard(iid)
            if new.parents:
                self._link(iid, new.parents)
        self.events.append(_event("memory.updated", cause, item=new))
        if new.scope != old.scope:  # the old group keeps a stale entry, re-checked by readers
            self.scope_garbage += 1
            self.scope_pending.setdefault(new.scope, []).append(self.items.position(iid))
        if (
            new.authority != old.authority
            or new.conviction != old.conviction
            or new.importance != old.importance
            or new.created_at != old.created_at
        ):
            self.col_dirty.add(self.items.position(iid))
        return new

    def retract_item(self, iid: str, cause: str | None = "memory.retract") -> MemoryItem:
        items = self.items
        item = items.get(iid)
        if item is None:
            raise MemoryNotFoundError(iid)
        out_s = self.outgoing.get(iid) if self.outgoing else None
        in_s = self.incoming.get(iid) if self.incoming else None
        incident: list[str] | tuple[str, ...] = ()
        if out_s is not None or in_s is not None:
            incident = sorted(set(sset_iter(out_s)) | set(sset_iter(in_s)), key=self.edges.position)
        self.items = items.remove(iid)
        if self.items.slot_count() != items.slot_count():
            self._slots_renumbered()
        if item.parents:
            self._unlink(iid, item.parents)
        stale = self.stale
        if stale and iid in stale:
            stale = stale.remove(iid)
        kids = self.children.get(iid) if self.children else None
        if kids is not None:
            for kid in sset_iter(kids):
                stale = stale.set(kid, True)  # its parent is gone now
        self.stale = stale
        self.events.append(_event("memory.retracted", cause, item=item))
        for eid in incident:  # each event carries the edge as it was, as the seed's do
            self.events.append(_event("edge.retracted", cause, edge=self._drop_edge(eid)))
        return item

    def retract_many(self, ids: list[str], cause: str | None = "memory.retract") -> None:
        """Retract distinct existing items in order, with the same events and the same
        resulting state as one retract_item each, in one batch: each persistent map is
        edited once for all of them (``pop_many``), not once per item."""
        before = self.items
        if len(ids) == len(before):  # the whole graph (a cascade from its one root)
            lookup = before.to_dict()
            try:
                removed: list[Any] = list(map(lookup.__getitem__, ids))
            except KeyError as exc:
                raise MemoryNotFoundError(exc.args[0]) from None
            items: OrderedPMap[str, MemoryItem] = EMPTY
        else:
            try:
                items, removed = before.pop_many(ids)
            except KeyError as exc:
                raise MemoryNotFoundError(exc.args[0]) from None
        self.items = items
        if items.slot_count() != before.slot_count():
            self._slots_renumbered()
        gone = set(ids)
        events = self.events
        new, setattr_, ev_cls, fields = _new, _setattr, MemoryLifecycleEvent, _EVENT_FIELDS
        with_edges = bool(self.outgoing or self.incoming)
        for iid, item in zip(ids, removed, strict=True):
            # _event inlined: a cascade emits one per item
            ev = new(ev_cls)
            setattr_(
                ev,
                "__dict__",
                {
                    "namespace": "memory",
                    "type": "memory.retracted",
                    "item": item,
                    "edge": None,
                    "cause_type": cause,
                },
            )
            setattr_(ev, "__pydantic_fields_set__", fields)
            setattr_(ev, "__pydantic_extra__", None)
            setattr_(ev, "__pydantic_private__", None)
            events.append(ev)
            if with_edges:
                out_s, in_s = self.outgoing.get(iid), self.incoming.get(iid)
                if out_s is not None or in_s is not None:
                    incident = set(sset_iter(out_s)) | set(sset_iter(in_s))
                    for eid in sorted(incident, key=self.edges.position):
                        events.append(_event("edge.retracted", cause, edge=self._drop_edge(eid)))
        if not items:
            # Nothing stays: no child, nothing stale. The edge indexes were kept above.
            self.children = self.stale = EMPTY
            return
        # Parents that stay lose these children; a retracted item's own entry goes, and
        # its children that stay become stale.
        children = self.children
        for iid, item in zip(ids, removed, strict=True):
            parents = item.parents
            if parents:
                for p in parents if len(parents) == 1 else set(parents):
                    if p not in gone:
                        children = _idx_remove(children, p, iid)
        stale = self.stale
        if stale:
            stale, _ = stale.pop_many(ids, strict=False)
        if children:
            children, kid_sets = children.pop_many(ids, strict=False)
            for iid, kids in zip(ids, kid_sets, strict=True):
                if kids is None:
                    continue
                left = [k for k in sset_iter(kids) if k not in gone]
                if left:
                    children = children.set(
                        iid,
                        tuple(left)
                        if len(left) <= _SMALL
                        else OrderedPMap((k, True) for k in left),
                    )
                    for k in left:
                        stale = stale.set(k, True)  # its parent is gone now
        self.children = children
        self.stale = stale

    def _slots_renumbered(self) -> None:
        # The items map compacted its holes: every slot number changed, so the pending scope
        # entries and dirty column slots are meaningless; both indexes are rebuilt at freeze.
        self.slots_stale = True
        self.scope_pending.clear()
        self.col_dirty.clear()

    def _link(self, iid: str, parents: list[str]) -> None:
        items = self.items
        children = self.children
        missing = False
        for p in parents if len(parents) == 1 else set(parents):
            children = _idx_add(children, p, iid)
            if p not in items:
                missing = True
        self.children = children
        if missing:
            self.stale = self.stale.set(iid, True)

    def _unlink(self, iid: str, parents: list[str]) -> None:
        children = self.children
        for p in parents if len(parents) == 1 else set(parents):
            children = _idx_remove(children, p, iid)
        self.children = children

    def _recheck(self, ids: Iterable[str]) -> None:
        items = self.items
        stale = self.stale
        for c in ids:
            if c in stale:
                parents = items[c].parents or ()
                if all(p in items for p in parents):
                    stale = stale.remove(c)
        self.stale = stale

    # -- edges -----------------------------------------------------------------------------

    def create_edge(self, edge: Edge, cause: str | None = "edge.create") -> None:
        eid = edge.edge_id
        try:
            self.edges = self.edges.set_new(eid, edge)
        except KeyError:
            raise DuplicateEdgeError(eid) from None
        self.outgoing = _idx_add(self.outgoing, edge.from_, eid)
        self.incoming = _idx_add(self.incoming, edge.to, eid)
        if edge.active:
            self.by_kind = _idx_add(self.by_kind, edge.kind, eid)
        self.events.append(_event("edge.created", cause, edge=edge))

    def update_edge(
        self, eid: str, partial: Mapping[str, Any], cause: str | None = "edge.update"
    ) -> Edge:
        old = self.edges.get(eid)
        if old is None:
            raise EdgeNotFoundError(eid)
        new = merge_edge(old, partial)
        self.edges = self.edges.set(eid, new)
        self._reindex_kind(old, new)
        self.events.append(_event("edge.updated", cause, edge=new))
        return new

    def retract_edge(self, eid: str, cause: str | None = "edge.retract") -> Edge:
        """Remove the edge (as the seed does: it leaves ``edges``); the event carries it as
        it was."""
        if eid not in self.edges:
            raise EdgeNotFoundError(eid)
        old = self._drop_edge(eid)
        self.events.append(_event("edge.retracted", cause, edge=old))
        return old

    def _reindex_kind(self, old: Edge, new: Edge) -> None:
        if old.active == bool(new.active) and old.kind == new.kind:
            return
        if old.active:
            self.by_kind = _idx_remove(self.by_kind, old.kind, old.edge_id)
        if new.active:
            self.by_kind = _idx_add(self.by_kind, new.kind, new.edge_id)

    def _drop_edge(self, eid: str) -> Edge:
        edge = self.edges[eid]
        self.edges = self.edges.remove(eid)
        self.outgoing = _idx_remove(self.outgoing, edge.from_, eid)
        self.incoming = _idx_remove(self.incoming, edge.to, eid)
        if edge.active:
            self.by_kind = _idx_remove(self.by_kind, edge.kind, eid)
        return edge


@cyclic_gc_paused
def apply_command(state: GraphState, cmd: MemoryCommand | Mapping[str, Any]) -> CommandResult:
    """Apply one memory command; the input state is never modified.

    Raises DuplicateMemoryError / DuplicateEdgeError on an id clash, MemoryNotFoundError /
    EdgeNotFoundError for an absent target, pydantic.ValidationError for a malformed dict.
    """
    command = coerce_command(cmd)
    tx = Tx(state)
    tx.apply(command)
    return tx.result()


__all__ = ["Tx", "apply_command", "coerce_command", "merge_edge", "merge_item"]
