"""Whose data an event holds: the rule that names an event's data subject.

The subject of a message or document is its `session_id` (a session is one user's
conversation, so erasing a person erases their sessions); an event without a session is
its own subject, ``event:<id>``. The rule needs no new field, so the seeds' constructors
are unchanged; a writer that wants another grouping sets `session_id` accordingly.
"""

from __future__ import annotations

from schemas.audit import Document, Message

__all__ = ["EVENT_SUBJECT_PREFIX", "subject_of", "CONTENT_FIELD"]

EVENT_SUBJECT_PREFIX = "event:"
# The field of each content kind that is stored sealed.
CONTENT_FIELD: dict[str, str] = {"message": "content", "document": "text"}


def subject_of(event: Message | Document) -> str:
    """The data subject `event`'s content belongs to."""
    if event.session_id is not None:
        return event.session_id
    return f"{EVENT_SUBJECT_PREFIX}{event.id}"
