"""What the intent and task graphs share: indexes of nodes by a field, insertion order,
and the shallow merge of an update.

An intent is filed under its ``parent_id``; a task under its ``intent_id`` and its
``parent_id``. An index holds only hashable keys other than None: an unvalidated update
can give those fields any value (as the seed's may), and such a value names no node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from projector.graph.pmap import EMPTY, Index, OrderedPMap, index_add, index_remove

__all__ = ["Index", "build_index", "reindex", "in_insertion_order", "merge_partial"]

Node = TypeVar("Node")

_IMMUTABLE_KEYS = frozenset({"id", "status"})


def _indexable(key: object) -> bool:
    if key is None:
        return False
    try:
        hash(key)
    except TypeError:
        return False
    return True


def build_index(nodes: Mapping[str, Any], field: str) -> Index:
    """Each node's id filed under its `field`."""
    index: Index = EMPTY
    for node in nodes.values():
        key = getattr(node, field)
        if _indexable(key):
            index = index_add(index, key, node.id)
    return index


def reindex(index: Index, field: str, old: Any | None, new: Any) -> Index:
    """`index` after `old` (None: a new node) became `new`, filed by `field`."""
    key = getattr(new, field)
    if old is not None:
        old_key = getattr(old, field)
        if old_key == key:
            return index
        if _indexable(old_key):
            index = index_remove(index, old_key, old.id)
    return index_add(index, key, new.id) if _indexable(key) else index


def in_insertion_order(nodes: Mapping[str, Node], ids: Iterable[str]) -> list[Node]:
    """The nodes with these ids, in the graph's insertion order (index buckets are
    unordered sets). `nodes` is the graph's OrderedPMap, as its state guarantees."""
    assert isinstance(nodes, OrderedPMap)
    return [nodes[i] for i in sorted(ids, key=nodes.position)]


def merge_partial(existing: Any, partial: Mapping[str, Any]) -> dict[str, Any]:
    """The field updates ``partial`` makes to ``existing`` (an Intent or a Task), as the
    seed's ``intent.update`` / ``task.update``: a shallow merge at the top level. Every key
    but ``id``/``status`` replaces the old value (``context`` and ``meta`` included: they
    are replaced, not merged; unknown keys are set as ``model_copy(update=)`` sets them).
    Like the memory graph's updates, the values are not re-validated.
    """
    return {k: v for k, v in partial.items() if k not in _IMMUTABLE_KEYS}
