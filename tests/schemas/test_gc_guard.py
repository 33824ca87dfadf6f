"""untrack_large: big immutable containers leave the cyclic GC's lists, and what they hold
stays alive (the collector counts it as referenced from outside)."""

from __future__ import annotations

import gc
import weakref

from pyrsistent import pvector

from projector.graph.replay import replay_commands
from schemas.gc_guard import UNTRACK_MIN, untrack_large


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic GC could free it


def test_only_large_containers_are_untracked() -> None:
    small, big = pvector([[]] * (UNTRACK_MIN - 1)), pvector([[]] * UNTRACK_MIN)
    untrack_large([small, big])
    assert gc.is_tracked(small) and not gc.is_tracked(big)


def test_what_an_untracked_vector_holds_survives_collection() -> None:
    nodes = [_Node() for _ in range(UNTRACK_MIN)]
    refs = [weakref.ref(n) for n in nodes]
    vec = pvector(nodes)
    untrack_large([vec])
    del nodes
    gc.collect()
    assert all(r() is not None for r in refs)  # held by the vector, not collected
    assert vec[0].me is vec[0]
    del vec  # reference counting still frees the vector and lets go of the nodes
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_replayed_state_keeps_its_big_vectors_out_of_the_gc() -> None:
    item = {
        "scope": "s",
        "kind": "k",
        "content": {},
        "author": "a",
        "source_kind": "observed",
        "authority": 0.5,
    }
    n = 2 * UNTRACK_MIN
    st = replay_commands(
        [{"type": "memory.create", "item": {**item, "id": f"i{k}"}} for k in range(n)]
    ).state
    assert not any(gc.is_tracked(v) for v in st.items.vectors())  # type: ignore[attr-defined]
    assert not gc.is_tracked(st.index.columns.authority)
    assert not gc.is_tracked(st.index.scopes["s"])
    gc.collect()
    assert len(st.items) == n and st.items[f"i{n - 1}"].id == f"i{n - 1}"


def test_a_guard_hands_a_large_batch_of_new_objects_to_the_oldest_generation() -> None:
    from schemas.gc_guard import AGE_MIN, no_cyclic_gc

    if gc.get_freeze_count():
        gc.unfreeze()
    gc.collect()
    with no_cyclic_gc():
        kept = [[] for _ in range(AGE_MIN)]
        assert not gc.isenabled()
    assert gc.isenabled()
    assert gc.get_count()[0] < AGE_MIN  # not left for the next young collection to walk
    gen0 = {id(o) for o in gc.get_objects(0)}
    assert not any(id(o) in gen0 for o in kept[:100])
    assert any(o is kept[0] for o in gc.get_objects(2))
