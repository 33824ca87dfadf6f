"""The audit-memory API of seeds 000/001, as `memstream` exports it."""

from producers.assistant import (
    DEFAULT_SYSTEM_PROMPT,
    OPENROUTER_BASE_URL,
    Assistant,
    MissingAPIKeyError,
    Reply,
)
from producers.memory import Memory
from projector.audit import MemoryState, RecallStats, replay
from queryd.audit import search
from schemas.audit import (
    Deletion,
    Document,
    Event,
    Message,
    Recall,
    event_from_dict,
    event_to_dict,
)
from schemas.errors import LocationError, MemstreamError

__all__ = [
    "Assistant",
    "DEFAULT_SYSTEM_PROMPT",
    "Deletion",
    "Document",
    "Event",
    "LocationError",
    "Memory",
    "MemoryState",
    "MemstreamError",
    "Message",
    "MissingAPIKeyError",
    "OPENROUTER_BASE_URL",
    "Recall",
    "RecallStats",
    "Reply",
    "event_from_dict",
    "event_to_dict",
    "replay",
    "search",
]
