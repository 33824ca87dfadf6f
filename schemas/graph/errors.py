"""Domain errors of the memory, intent and task graphs. All derive from MemexError.

Messages are memex-python 0.14.0's, word for word: programs match on them.
"""

from __future__ import annotations


class MemexError(Exception):
    """Base class of every domain error raised by the graphs."""


class MemoryNotFoundError(MemexError):
    def __init__(self, item_id: str) -> None:
        super().__init__(f"Memory item not found: {item_id}")
        self.item_id = item_id


class EdgeNotFoundError(MemexError):
    def __init__(self, edge_id: str) -> None:
        super().__init__(f"Edge not found: {edge_id}")
        self.edge_id = edge_id


class DuplicateMemoryError(MemexError):
    def __init__(self, item_id: str) -> None:
        super().__init__(f"Memory item already exists: {item_id}")
        self.item_id = item_id


class DuplicateEdgeError(MemexError):
    def __init__(self, edge_id: str) -> None:
        super().__init__(f"Edge already exists: {edge_id}")
        self.edge_id = edge_id


class InvalidTimestampError(MemexError):
    """A value is not a UUIDv7, an item has no known time, or an envelope's ``ts`` is not a
    strict ISO-8601 timestamp. Carries only its message, as the seed's does."""


class IntentNotFoundError(MemexError):
    def __init__(self, intent_id: str) -> None:
        super().__init__(f"Intent not found: {intent_id}")
        self.intent_id = intent_id


class DuplicateIntentError(MemexError):
    def __init__(self, intent_id: str) -> None:
        super().__init__(f"Intent already exists: {intent_id}")
        self.intent_id = intent_id


class InvalidIntentTransitionError(MemexError):
    def __init__(self, intent_id: str, from_status: str, to_status: str) -> None:
        super().__init__(
            f"Invalid intent transition: {intent_id} from {from_status} to {to_status}"
        )
        self.intent_id = intent_id
        self.from_status = from_status
        self.to_status = to_status


class TaskNotFoundError(MemexError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"Task not found: {task_id}")
        self.task_id = task_id


class DuplicateTaskError(MemexError):
    def __init__(self, task_id: str) -> None:
        super().__init__(f"Task already exists: {task_id}")
        self.task_id = task_id


class InvalidTaskTransitionError(MemexError):
    def __init__(self, task_id: str, from_status: str, to_status: str) -> None:
        super().__init__(f"Invalid task transition: {task_id} from {from_status} to {to_status}")
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
