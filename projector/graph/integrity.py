"""Integrity mutations: contradictions, aliases and cascade retraction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from projector.graph.pmap import SmallSet, sset_iter
from projector.graph.reducer import Tx
from projector.graph.state import CommandResult, GraphState, child_ids, in_edge_order
from schemas.gc_guard import cyclic_gc_paused, no_cyclic_gc
from schemas.graph.commands import MemoryLifecycleEvent
from schemas.graph.items import Edge, create_edge

# The seed leaves the provenance of system-made edges open: they are deterministic
# consequences of the caller's decision, fully trusted as records of that decision.
_SYSTEM_SOURCE = "derived_deterministic"
_SYSTEM_AUTHORITY = 1.0


def _system_edge(from_: str, to: str, kind: str, author: str, meta: dict[str, Any] | None) -> Edge:
    """An edge the integrity operations mint: derived deterministically, full authority."""
    return create_edge(
        from_=from_,
        to=to,
        kind=kind,
        author=author,
        source_kind=_SYSTEM_SOURCE,
        authority=_SYSTEM_AUTHORITY,
        meta=meta,
    )


LOSER_AUTHORITY_FACTOR = 0.1


class CascadeResult(NamedTuple):
    """Unpacks as ``state, events, retracted = cascade_retract(...)``, as the seed's does."""

    state: GraphState
    events: list[MemoryLifecycleEvent]
    retracted: list[str]  # ids in retraction order (leaves first)


@cyclic_gc_paused
def mark_contradiction(
    state: GraphState,
    item_id_a: str,
    item_id_b: str,
    author: str,
    meta: dict[str, Any] | None = None,
) -> CommandResult:
    """Add a CONTRADICTS edge a -> b, whether or not the items exist (as the seed does)."""
    tx = Tx(state)
    tx.create_edge(_system_edge(item_id_a, item_id_b, "CONTRADICTS", author, meta))
    return tx.result()


def _pair_edge_ids(state: GraphState, a: str, b: str, kind: str) -> list[str]:
    idx, edges = state.index, state.edges
    found = []
    for eid in sset_iter(idx.outgoing.get(a)):
        e = edges[eid]
        if e.to == b and e.kind == kind and e.active:
            found.append(eid)
    for eid in sset_iter(idx.incoming.get(a)):
        e = edges[eid]
        if e.from_ == b and e.kind == kind and e.active:
            found.append(eid)
    return in_edge_order(state, found)


@cyclic_gc_paused
def resolve_contradiction(
    state: GraphState,
    winner_id: str,
    loser_id: str,
    author: str,
    reason: str | None = None,
) -> CommandResult:
    """Retract the active CONTRADICTS edge(s) between the pair, add SUPERSEDES winner ->
    loser and multiply the loser's authority by 0.1. No matching edge: a no-op."""
    contradicts = _pair_edge_ids(state, winner_id, loser_id, "CONTRADICTS")
    if not contradicts:
        return CommandResult(state, [])
    tx = Tx(state)
    for eid in contradicts:
        tx.retract_edge(eid)
    meta = None if reason is None else {"reason": reason}
    tx.create_edge(_system_edge(winner_id, loser_id, "SUPERSEDES", author, meta))
    loser = tx.items.get(loser_id)
    if loser is not None:
        tx.update_item(loser_id, {"authority": loser.authority * LOSER_AUTHORITY_FACTOR})
    return tx.result()


@cyclic_gc_paused
def mark_alias(
    state: GraphState,
    item_id_a: str,
    item_id_b: str,
    author: str,
    meta: dict[str, Any] | None = None,
) -> CommandResult:
    """Add ALIAS edges a -> b and b -> a, whether or not the items exist (as the seed
    does). Self-alias is a no-op."""
    if item_id_a == item_id_b:
        return CommandResult(state, [])
    tx = Tx(state)
    for src, dst in ((item_id_a, item_id_b), (item_id_b, item_id_a)):
        tx.create_edge(_system_edge(src, dst, "ALIAS", author, meta))
    return tx.result()


def cascade_order(state: GraphState, item_id: str) -> list[str]:
    """The item and its transitive dependents in depth-first post-order (leaves first), as
    the seed orders them: each item's dependents are visited most recently created first,
    an item is entered once (cycles and shared descendants are cut at the second visit),
    and the root comes last. An absent root is not listed: only the items that still name
    it as a parent, and theirs. Iterative: no recursion limit on deep chains."""
    children = state.index.children
    lookup: Callable[[str], SmallSet | None] = children.get
    # Each persistent lookup is a Python call; once the walk has covered a good share of
    # the index, one C-level dict copy of it makes the remaining lookups cheap.
    switch_at = max(256, len(children) >> 3)
    seen = {item_id}
    order: list[str] = []
    append = order.append

    def kids(node: str, s: Any) -> Iterator[str]:
        if type(s) is tuple and len(s) == 1:
            return iter(s)  # the common case: no order to restore
        return reversed(child_ids(state, node))

    root = lookup(item_id)
    if root is None:
        return [item_id] if item_id in state.items else []
    stack = [(item_id, kids(item_id, root))]
    while stack:
        node, it = stack[-1]
        for c in it:
            if c not in seen:
                seen.add(c)
                s = lookup(c)
                if s is None:
                    append(c)  # a leaf: visited and done
                    continue
                stack.append((c, kids(c, s)))
                if len(seen) == switch_at:
                    lookup = children.to_dict().get
                break
        else:
            stack.pop()
            append(node)
    if item_id not in state.items:
        order.pop()  # the absent root itself
    return order


def cascade_retract(
    state: GraphState, item_id: str, author: str, reason: str | None = None
) -> CascadeResult:
    """Retract an item and all its transitive dependents, leaves first, with their edges.

    An absent item raises nothing (as in the seed): the items still naming it as a parent
    are retracted with their dependents. Nothing to retract returns ``state`` itself.
    """
    with no_cyclic_gc():
        order = cascade_order(state, item_id)
        if not order:
            return CascadeResult(state, [], [])
        tx = Tx(state)
        tx.retract_many(order)
        return CascadeResult(tx.freeze(), tx.events, order)


__all__ = [
    "CascadeResult",
    "cascade_order",
    "cascade_retract",
    "mark_alias",
    "mark_contradiction",
    "resolve_contradiction",
]
