"""Intent graph: state, factories and the pure reducer ``apply_intent_command``.

State is built on persistent structures (the graph's OrderedPMap and small sets), so a
command costs O(log n) and the input state is never modified: the new state shares all
untouched structure with the old.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from projector.graph.pmap import EMPTY, OrderedPMap, SmallSet, sset_add, sset_remove
from schemas.graph.errors import (
    DuplicateIntentError,
    IntentNotFoundError,
    InvalidIntentTransitionError,
)
from schemas.graph.ids import uuid7
from schemas.graph.intents import (
    Intent,
    IntentCommand,
    IntentCommandAdapter,
    IntentCreate,
    IntentLifecycleEvent,
    IntentLifecycleEventType,
    IntentStatus,
    IntentUpdate,
)

__all__ = [
    "IntentState",
    "IntentResult",
    "create_intent_state",
    "create_intent",
    "apply_intent_command",
]


Index = OrderedPMap[str, SmallSet]


def _indexable(key: object) -> bool:
    # An unvalidated update can give parent_id / intent_id any value (as the seed's
    # may): a value that is not hashable names no entity, so it is not indexed.
    if key is None:
        return False
    try:
        hash(key)
    except TypeError:
        return False
    return True


def index_add(index: Index, key: str | None, member: str) -> Index:
    """``index`` with ``member`` added under ``key`` (unchanged when key is None)."""
    if not _indexable(key):
        return index
    return index.set(key, sset_add(index.get(key), member))  # type: ignore[arg-type]


def index_drop(index: Index, key: str | None, member: str) -> Index:
    """``index`` without ``member`` under ``key``; an emptied key disappears."""
    if not _indexable(key) or key not in index:
        return index
    # _indexable: a hashable value other than None (unvalidated updates may hold a non-str)
    rest = sset_remove(index[key], member)  # type: ignore[index]
    return index.set(key, rest) if rest is not None else index.remove(key)  # type: ignore[arg-type]


def _parent_index(intents: Mapping[str, Intent]) -> Index:
    index: Index = EMPTY
    for intent in intents.values():
        index = index_add(index, intent.parent_id, intent.id)
    return index


@dataclass(frozen=True)
class IntentState:
    """The intent graph. ``intents``: read-only, insertion-ordered id -> Intent.

    ``by_parent`` is a derived index (parent_id -> child ids) kept so child lookups do not
    scan; it is rebuilt when omitted, so ``IntentState(intents={...})`` works.
    """

    intents: Mapping[str, Intent] = field(default_factory=OrderedPMap)
    by_parent: Index | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.intents, OrderedPMap) or self.intents is EMPTY:
            object.__setattr__(self, "intents", OrderedPMap(self.intents))
        if self.by_parent is None:
            object.__setattr__(self, "by_parent", _parent_index(self.intents))
        object.__setattr__(self, "_stamp", self.intents.version())  # type: ignore[attr-defined]


def parent_index(state: IntentState) -> Index:
    """``state.by_parent``, rebuilt first if ``state.intents`` was assigned to (as the
    seed's dict may be) since it was made."""
    intents: Any = state.intents
    # (No stamp: a state pickled before maps took assignment; its index holds.)
    if intents.version() != state.__dict__.get("_stamp", intents.version()):
        object.__setattr__(state, "by_parent", _parent_index(intents))
        object.__setattr__(state, "_stamp", intents.version())
    assert state.by_parent is not None
    return state.by_parent


class IntentResult(NamedTuple):
    state: IntentState
    events: list[IntentLifecycleEvent]


def create_intent_state() -> IntentState:
    """A new empty intent graph."""
    return IntentState()


def create_intent(
    *,
    label: str,
    priority: float,
    owner: str,
    id: str | None = None,
    parent_id: str | None = None,
    description: str | None = None,
    status: IntentStatus | None = None,
    context: dict[str, Any] | None = None,
    root_memory_ids: list[str] | None = None,
    meta: dict[str, Any] | None = None,
) -> Intent:
    """A validated Intent; ``id`` defaults to a fresh UUIDv7, ``status`` to "active"."""
    return Intent(
        id=id if id is not None else uuid7(),
        parent_id=parent_id,
        label=label,
        description=description,
        priority=priority,
        owner=owner,
        status=status if status is not None else "active",
        context=context,
        root_memory_ids=root_memory_ids,
        meta=meta,
    )


# command tag -> (statuses it may leave, status it enters, event it emits)
_TRANSITIONS: dict[str, tuple[frozenset[str], IntentStatus, IntentLifecycleEventType]] = {
    "intent.complete": (frozenset({"active", "paused"}), "completed", "intent.completed"),
    "intent.cancel": (frozenset({"active", "paused"}), "cancelled", "intent.cancelled"),
    "intent.pause": (frozenset({"active"}), "paused", "intent.paused"),
    "intent.resume": (frozenset({"paused"}), "active", "intent.resumed"),
}

_IMMUTABLE_KEYS = frozenset({"id", "status"})


def merge_partial(existing: Any, partial: Mapping[str, Any]) -> dict[str, Any]:
    """The field updates ``partial`` makes to ``existing`` (an Intent or a Task), as the
    seed's ``intent.update`` / ``task.update``: a shallow merge at the top level. Every key
    but ``id``/``status`` replaces the old value (``context`` and ``meta`` included: they
    are replaced, not merged; unknown keys are set as ``model_copy(update=)`` sets them).
    Like the memory graph's updates, the values are not re-validated.
    """
    return {k: v for k, v in partial.items() if k not in _IMMUTABLE_KEYS}


def _event(type_: IntentLifecycleEventType, intent: Intent, cause: str) -> IntentLifecycleEvent:
    # model_construct: the intent is already a validated (or deliberately merged) instance.
    return IntentLifecycleEvent.model_construct(
        namespace="intent", type=type_, intent=intent, cause_type=cause
    )


def _with(state: IntentState, old: Intent | None, new: Intent) -> IntentState:
    index = parent_index(state)
    if old is None or old.parent_id != new.parent_id:
        if old is not None:
            index = index_drop(index, old.parent_id, old.id)
        index = index_add(index, new.parent_id, new.id)
    intents = state.intents
    assert isinstance(intents, OrderedPMap)
    return IntentState(intents=intents.set(new.id, new), by_parent=index)


def put_intent(state: IntentState, intent: Intent) -> IntentState:
    """Insert or wholly replace ``intent`` (no checks, no events): for import_slice."""
    return _with(state, state.intents.get(intent.id), intent)


def apply_intent_command(
    state: IntentState, cmd: IntentCommand | Mapping[str, Any]
) -> IntentResult:
    """Apply one intent command; returns the new state and its lifecycle events.

    Raises DuplicateIntentError, IntentNotFoundError or InvalidIntentTransitionError;
    a malformed dict raises pydantic.ValidationError. ``state`` is never modified.
    """
    if isinstance(cmd, Mapping):
        cmd = IntentCommandAdapter.validate_python(cmd)

    if isinstance(cmd, IntentCreate):
        intent = cmd.intent
        if intent.id in state.intents:
            raise DuplicateIntentError(intent.id)
        return IntentResult(
            _with(state, None, intent), [_event("intent.created", intent, cmd.type)]
        )

    existing = state.intents.get(cmd.intent_id)
    if existing is None:
        raise IntentNotFoundError(cmd.intent_id)

    if isinstance(cmd, IntentUpdate):
        updated = existing.model_copy(update=merge_partial(existing, cmd.partial))
        return IntentResult(
            _with(state, existing, updated), [_event("intent.updated", updated, cmd.type)]
        )

    allowed, to_status, event_type = _TRANSITIONS[cmd.type]
    if existing.status not in allowed:
        raise InvalidIntentTransitionError(cmd.intent_id, existing.status, to_status)
    moved = existing.model_copy(update={"status": to_status})
    return IntentResult(_with(state, existing, moved), [_event(event_type, moved, cmd.type)])
