"""Pure queries over the intent graph."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from projector.graph.intents import IntentState, parent_index
from projector.graph.node_index import in_insertion_order
from schemas.graph.intents import Intent, IntentFilter

__all__ = ["get_intents", "get_intent_by_id", "get_child_intents", "matches_intent_filter"]


def matches_intent_filter(intent: Intent, f: IntentFilter) -> bool:
    """True when ``intent`` meets every condition present in ``f``."""
    if f.owner is not None and intent.owner != f.owner:
        return False
    if f.status is not None and intent.status != f.status:
        return False
    if f.statuses is not None and intent.status not in f.statuses:
        return False
    if f.min_priority is not None and not intent.priority >= f.min_priority:
        return False
    if f.has_memory_id is not None and f.has_memory_id not in (intent.root_memory_ids or ()):
        return False
    if f.parent_id is not None and intent.parent_id != f.parent_id:
        return False
    if f.is_root is not None and (intent.parent_id is None) != f.is_root:
        return False
    return True


def get_intents(
    state: IntentState, filter: IntentFilter | Mapping[str, Any] | None = None
) -> list[Intent]:
    """Intents matching ``filter`` (all of them when None), in insertion order."""
    if filter is None:
        return list(state.intents.values())
    f = filter if isinstance(filter, IntentFilter) else IntentFilter.model_validate(filter)
    if f.parent_id is not None:
        candidates = get_child_intents(state, f.parent_id)
    else:
        candidates = list(state.intents.values())
    return [intent for intent in candidates if matches_intent_filter(intent, f)]


def get_intent_by_id(state: IntentState, id: str) -> Intent | None:
    """The intent with this id, or None."""
    return state.intents.get(id)


def get_child_intents(state: IntentState, parent_id: str) -> list[Intent]:
    """Intents whose parent_id is ``parent_id``, in insertion order (indexed, no scan)."""
    return in_insertion_order(state.intents, parent_index(state).get(parent_id, ()))
