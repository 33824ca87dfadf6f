"""`Memory`: the audit-memory API of seed 001 over any log a location string names."""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike
from types import TracebackType
from typing import Any, TypeVar, get_args
from uuid import UUID

from producers.logs import AuditLog, Transaction, open_log
from projector.audit import MemoryState
from queryd.audit import search
from schemas.audit import Deletion, Document, EventKind, Message, Recall

__all__ = ["Memory"]

AnyEvent = Message | Document | Recall | Deletion
T = TypeVar("T")
_KINDS = get_args(EventKind)


def _as_uuid(value: UUID | str, field: str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValueError(f"{field}: {value!r} is not a UUID") from None


class Memory:
    """An append-only memory log: a directory path (embedded SQLite) or a kafka:// URL."""

    def __init__(self, path: str | PathLike[str]) -> None:
        self.location = str(path)
        self._log: AuditLog = open_log(path)

    # Writing

    def _append_one(self, event: AnyEvent, expected: type) -> Any:
        if not isinstance(event, expected):
            raise ValueError(
                f"expected a {expected.__name__}, got {type(event).__name__}"
            )
        stored, _ = self._log.transact(lambda state: ([event], None))
        return stored[0]

    def add_message(self, message: Message) -> Message:
        """Append a message; returns the stored copy with its seq."""
        return self._append_one(message, Message)

    def add_document(self, document: Document) -> Document:
        """Append a document; returns the stored copy with its seq."""
        return self._append_one(document, Document)

    def record_recall(self, recall: Recall) -> Recall:
        """Append a recall; every recalled id must be an existing message or document."""
        return self._append_one(recall, Recall)

    def delete(
        self,
        targets: Iterable[UUID | str] | UUID | str,
        reason: str,
        *,
        requested_by: str | None = None,
        session_id: str | None = None,
    ) -> Deletion:
        """Append a tombstone for existing messages or documents."""
        if isinstance(targets, UUID | str):
            targets = (targets,)
        deletion = Deletion(
            targets=tuple(_as_uuid(t, "targets") for t in targets),
            reason=reason,
            requested_by=requested_by,
            session_id=session_id,
        )
        return self._append_one(deletion, Deletion)

    def transact(self, build: Transaction[T]) -> tuple[list[AnyEvent], T]:
        """Read and append atomically: `build(state)` gives the events and a value.

        `state` is the memory at the log's end; the events are checked and appended
        right after it, all or none. This is how `recall` and `Assistant` keep the
        audit record equal to what was read.
        """
        return self._log.transact(build)

    # Reading

    def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        session_id: str | None = None,
        source: str = "unknown",
        actor: str | None = None,
    ) -> tuple[Recall, list[Message | Document]]:
        """Search visible memory and append a Recall naming exactly what it returned.

        The search runs on the state at the log's end, in the same transaction as the
        append, so the state at `recall.seq - 1` reproduces the answer exactly.
        """
        if limit < 0:
            raise ValueError(f"limit: expected a non-negative integer, got {limit}")

        def build(state: MemoryState) -> tuple[list[Recall], list[Message | Document]]:
            found = search(state, query, limit=limit)
            recall = Recall(
                query=query,
                recalled=tuple(item.id for item in found),
                session_id=session_id,
                source=source,
                actor=actor,
            )
            return [recall], found

        stored, found = self.transact(build)
        return stored[0], found

    def get(self, event_id: UUID | str) -> AnyEvent | None:
        """One event by id, deleted or not; None if unknown."""
        return self._log.state().get(_as_uuid(event_id, "event_id"))

    def events(
        self,
        *,
        kind: str | None = None,
        session_id: str | None = None,
        after_seq: int | None = None,
        up_to_seq: int | None = None,
    ) -> list[AnyEvent]:
        """The log in ascending seq order, filtered."""
        if kind is not None and kind not in _KINDS:
            raise ValueError(f"kind: expected one of {', '.join(_KINDS)}, got {kind!r}")
        state = self._log.state()
        if up_to_seq is not None:
            state = state.at(up_to_seq)
        selected = state.events
        if after_seq is not None:
            selected = [e for e in selected if e.seq > after_seq]  # type: ignore[operator]
        if kind is not None:
            selected = [e for e in selected if e.kind == kind]
        if session_id is not None:
            selected = [e for e in selected if e.session_id == session_id]
        return selected

    def replay(self, *, up_to_seq: int | None = None) -> MemoryState:
        """The state of the log, or as it stood after event `up_to_seq`."""
        return self._log.state().at(up_to_seq)

    def __len__(self) -> int:
        return len(self._log.state())

    # Lifetime

    def close(self) -> None:
        self._log.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory({self.location!r})"
