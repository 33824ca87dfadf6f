"""What `Memory` needs of a log: its folded state, and atomic checked appends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from projector.audit import MemoryState
from schemas.audit import Deletion, Document, Message, Recall

__all__ = ["AuditLog", "Transaction", "AnyEvent"]

AnyEvent = Message | Document | Recall | Deletion
T = TypeVar("T")

# Given the state at the log's end, the events to append and a value to hand back.
Transaction = Callable[[MemoryState], tuple[Sequence[AnyEvent], T]]


class AuditLog(Protocol):
    def state(self) -> MemoryState:
        """The state folded up to the log's current end, this process's writes included."""
        ...

    def transact(self, build: Transaction[T]) -> tuple[list[AnyEvent], T]:
        """Run `build` on the state at the log's end, check its events and append them.

        Either all of them become durable with consecutive seqs, or none does and the
        error is raised. Returns the stored events (with seq) and `build`'s value.
        """
        ...

    def close(self) -> None: ...
