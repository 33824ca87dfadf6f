"""What an append must satisfy against the state it lands on (invariants 2 and 5).

Shared by every store and by the projector, so the embedded log and Kafka refuse alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

from projector.audit.state import MemoryState
from schemas.audit import BaseEvent, Deletion, Document, Erasure, Message, Recall

__all__ = ["check_append", "check_targets"]


_NOTHING_PENDING: Mapping[UUID, BaseEvent] = {}


def check_targets(
    state: MemoryState,
    targets: tuple[UUID, ...],
    field: str,
    pending: Mapping[UUID, BaseEvent] = _NOTHING_PENDING,
) -> None:
    """Every target must be a message or document in the log (or earlier in the batch)."""
    for target in targets:
        event = state.get(target) or pending.get(target)
        if event is None:
            raise ValueError(f"{field}: unknown id {target}; expected a message or document")
        if not isinstance(event, Message | Document):
            raise ValueError(
                f"{field}: id {target} is a {getattr(event, 'kind', type(event).__name__)}; "
                "expected a message or document"
            )


def check_append(
    state: MemoryState, event: BaseEvent, pending: Mapping[UUID, BaseEvent] = _NOTHING_PENDING
) -> None:
    """Raise ValueError when `event` may not be appended onto `state`.

    `pending` holds the events of the same batch before this one, already checked.
    """
    if event.seq is not None:
        raise ValueError(f"event {event.id} already has seq {event.seq}: an event is appended once")
    if state.get(event.id) is not None or event.id in pending:
        raise ValueError(f"event {event.id} is already in the log")
    if isinstance(event, Recall):
        check_targets(state, event.recalled, "recalled", pending)
    elif isinstance(event, Deletion):
        check_targets(state, event.targets, "targets", pending)
    elif isinstance(event, Erasure):
        check_targets(state, event.erased, "erased", pending)
