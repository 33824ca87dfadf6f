"""Domain errors of seed 003 (memory, intent and task graphs). All derive from MemexError."""

from __future__ import annotations


class MemexError(Exception):
    """Base class of every domain error raised by the graphs."""


class MemoryNotFoundError(MemexError):
    def __init__(self, item_id: str) -> None:
        super().__init__(f"memory item not found: {item_id}")
        self.item_id = item_id


class EdgeNotFoundError(MemexError):
    def __init__(self, edge_id: str) -> None:
        super().__init__(f"edge not found: {edge_id}")
        self.edge_id = edge_id


class DuplicateMemoryError(MemexError):
    def __init__(self, item_id: str) -> None:
        super().__init__(f"memory item already exists: {item_id}")
        self.item_id = item_id


class DuplicateEdgeError(MemexError):
    def __init__(self, edge_id: str) -> None:
        super().__init__(f"edge already exists: {edge_id}")
        self.edge_id = edge_id


class InvalidTimestampError(MemexError):
    """A value is not a UUIDv7 or not a strict ISO-8601 envelope timestamp."""

    def __init__(self, value: object, reason: str = "invalid timestamp") -> None:
        super().__init__(f"{reason}: {value!r}")
        self.value = value


class IntentNotFoundError(MemexError):
    def __init__(self, intent_id: str) -> None:
        super().__init__(f"intent not found: {intent_id}")
        self.intent_id = intent_id


class DuplicateIntentError(MemexError):
    def __init__(self, intent_id: str) -> None:
        super().__init__(f"intent already exists: {intent_id}")
        self.intent_id = intent_id


class InvalidIntentTransitionError(MemexError):
    def __init__(self, intent_id: str, from_status: str, to_status: str) -> None:
        super().__init__(f"invalid intent transition for {intent_id}: {from_status} -> {to_status}")
        self.intent_id = intent_id
        self.from_status = from_status
        self.to_status = to_status


class TaskNotFoundError(MemexError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task not found: {task_id}")
        self.task_id = task_id


class DuplicateTaskError(MemexError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"task already exists: {task_id}")
        self.task_id = task_id


class InvalidTaskTransitionError(MemexError):
    def __init__(self, task_id: str, from_status: str, to_status: str) -> None:
        super().__init__(f"invalid task transition for {task_id}: {from_status} -> {to_status}")
        self.task_id = task_id
        self.from_status = from_status
        self.to_status = to_status


__all__ = [
    "DuplicateEdgeError",
    "DuplicateIntentError",
    "DuplicateMemoryError",
    "DuplicateTaskError",
    "EdgeNotFoundError",
    "IntentNotFoundError",
    "InvalidIntentTransitionError",
    "InvalidTaskTransitionError",
    "InvalidTimestampError",
    "MemexError",
    "MemoryNotFoundError",
    "TaskNotFoundError",
]
