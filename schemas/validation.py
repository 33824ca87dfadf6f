"""Validation entry point (parity with ``@ai2070/memex/schemas``): the models are the schema.

Each ``validate_*`` takes a raw dict (or an already-built model) and returns the typed model,
raising ``pydantic.ValidationError`` on a bad shape or an out-of-range score.
"""

from __future__ import annotations

from typing import Any

from schemas.graph.commands import MemoryCommand, MemoryCommandAdapter
from schemas.graph.intents import Intent, IntentCommand, IntentCommandAdapter
from schemas.graph.items import Edge, MemoryItem
from schemas.graph.tasks import Task, TaskCommand, TaskCommandAdapter

__all__ = [
    "validate_command",
    "validate_intent_command",
    "validate_task_command",
    "validate_memory_item",
    "validate_edge",
    "MemoryItemSchema",
    "EdgeSchema",
    "IntentSchema",
    "TaskSchema",
    "MemoryCommandAdapter",
    "IntentCommandAdapter",
    "TaskCommandAdapter",
]

# The model is the schema: these aliases exist for code ported from the TS library.
MemoryItemSchema = MemoryItem
EdgeSchema = Edge
IntentSchema = Intent
TaskSchema = Task


def validate_command(raw: Any) -> MemoryCommand:
    """A memory-graph command from ``raw``, discriminated on ``type``."""
    return MemoryCommandAdapter.validate_python(raw)


def validate_intent_command(raw: Any) -> IntentCommand:
    """An intent-graph command from ``raw``, discriminated on ``type``."""
    return IntentCommandAdapter.validate_python(raw)


def validate_task_command(raw: Any) -> TaskCommand:
    """A task-graph command from ``raw``, discriminated on ``type``."""
    return TaskCommandAdapter.validate_python(raw)


def validate_memory_item(raw: Any) -> MemoryItem:
    """A MemoryItem from ``raw``; scores must be within 0..1."""
    return MemoryItem.model_validate(raw)


def validate_edge(raw: Any) -> Edge:
    """An Edge from ``raw`` (``from`` or ``from_`` accepted); scores within 0..1."""
    return Edge.model_validate(raw)
