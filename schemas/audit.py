"""The audit-memory events of seeds 000/001: frozen models, the wire contract's first half.

Every event carries id, timestamp (aware, normalized to UTC), seq (None until the store
assigns it), session_id, source and actor. The four kinds are told apart by `kind`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, Self
from uuid import UUID, uuid4

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    model_validator,
)

from schemas.fields import shared_fields_set

__all__ = [
    "BaseEvent",
    "Message",
    "Document",
    "Recall",
    "Deletion",
    "Erasure",
    "check_leaf_hashes",
    "ERASED",
    "AnyAuditEvent",
    "Event",
    "ContentEvent",
    "EventKind",
    "EVENT_KINDS",
    "event_to_dict",
    "event_from_dict",
    "utc_now",
]

EventKind = Literal["message", "document", "recall", "deletion", "erasure"]
EVENT_KINDS: tuple[str, ...] = ("message", "document", "recall", "deletion", "erasure")
# What an erased event's content (a message's `content`, a document's `text`) reads as.
ERASED = "[erased]"

NonEmpty = Annotated[str, Field(min_length=1)]
# Naive datetimes are refused: a timestamp without a zone cannot be normalized honestly.
UtcDatetime = Annotated[AwareDatetime, AfterValidator(lambda value: value.astimezone(UTC))]


def utc_now() -> datetime:
    return datetime.now(UTC)


class BaseEvent(BaseModel):
    """Fields every audit event carries."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: UUID = Field(default_factory=uuid4)
    timestamp: UtcDatetime = Field(default_factory=utc_now)
    seq: int | None = Field(default=None, ge=0)
    session_id: str | None = None
    source: str = "unknown"
    actor: str | None = None

    def with_seq(self, seq: int) -> BaseEvent:
        """The stored copy: the same event with the position the store gave it.

        What `model_copy(update={"seq": seq})` gives, built directly: it runs once per
        appended and per folded event, where model_copy's generic path costs several µs.
        """
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ValueError(f"seq: expected a non-negative integer, got {seq!r}")
        return self.with_field("seq", seq)

    def with_field(self, name: str, value: object) -> Self:
        """The same event with field `name` set to `value`, unvalidated: what
        `model_copy(update={name: value})` gives, built directly (see `with_seq`)."""
        values = self.__dict__.copy()
        if name not in values:  # every field has a value in __dict__
            raise ValueError(f"{type(self).__name__} has no field {name!r}")
        values[name] = value
        fields = self.__pydantic_fields_set__
        if name not in fields:
            fields = shared_fields_set(fields, name)
        copy = object.__new__(type(self))
        object.__setattr__(copy, "__dict__", values)
        object.__setattr__(copy, "__pydantic_fields_set__", fields)
        object.__setattr__(copy, "__pydantic_extra__", None)
        object.__setattr__(copy, "__pydantic_private__", None)
        return copy


class Message(BaseEvent):
    """One conversational turn."""

    kind: Literal["message"] = "message"
    speaker: NonEmpty
    content: NonEmpty
    retain_until: UtcDatetime | None = None


class Document(BaseEvent):
    """Data someone brought: extracted plain text, with a digest linking to the bytes."""

    kind: Literal["document"] = "document"
    name: NonEmpty
    text: NonEmpty
    media_type: str = "text/plain"
    sha256: str | None = None
    retain_until: UtcDatetime | None = None


class Recall(BaseEvent):
    """A read: the ids that entered a model's context."""

    kind: Literal["recall"] = "recall"
    query: NonEmpty
    recalled: tuple[UUID, ...] = ()


class Deletion(BaseEvent):
    """A tombstone. Targets stay in the log; reads stop returning them."""

    kind: Literal["deletion"] = "deletion"
    targets: tuple[UUID, ...] = Field(min_length=1)
    reason: NonEmpty
    requested_by: str | None = None


_LEAF_HASH = re.compile(r"^[0-9a-f]{64}$")


class Erasure(BaseEvent):
    """A receipt of crypto-shredding: `subject`'s key was destroyed with this event, which
    made the content of `erased` unreadable. `leaf_hashes[i]` is the Merkle leaf hash (hex,
    `schemas.evidence.merkle.leaf_hash`) of the stored record of `erased[i]`, so a receipt
    is checkable against the log's tree. It names ids and hashes only, never content."""

    kind: Literal["erasure"] = "erasure"
    subject: NonEmpty
    erased: tuple[UUID, ...] = Field(min_length=1)
    leaf_hashes: tuple[str, ...] = Field(min_length=1)
    reason: NonEmpty
    requested_by: str | None = None

    @model_validator(mode="after")
    def _hashes_match(self) -> Erasure:
        check_leaf_hashes(self.leaf_hashes, len(self.erased), "erased events")
        return self


def check_leaf_hashes(leaf_hashes: Sequence[str], count: int, of: str) -> None:
    """ValueError unless `leaf_hashes` are `count` Merkle leaf hashes (64 lowercase hex
    digits each), one for each of `of` (a receipt's check of its own shape)."""
    if len(leaf_hashes) != count:
        raise ValueError(f"leaf_hashes: {len(leaf_hashes)} given for {count} {of}")
    for value in leaf_hashes:
        if not _LEAF_HASH.match(value):
            raise ValueError(f"leaf_hashes: {value!r} is not 64 lowercase hex digits")


ContentEvent = Message | Document
AnyAuditEvent = Message | Document | Recall | Deletion | Erasure
# The seed's four kinds (its validation errors name this union; Erasure is read apart).
Event = Annotated[Message | Document | Recall | Deletion, Field(discriminator="kind")]

_EVENT_ADAPTER: TypeAdapter[Message | Document | Recall | Deletion] = TypeAdapter(Event)


def event_to_dict(event: BaseEvent) -> dict[str, Any]:
    """A JSON-compatible dict of the event, `kind` included."""
    return event.model_dump(mode="json")


def event_from_dict(data: dict[str, Any]) -> AnyAuditEvent:
    """The event a dict describes, dispatching on its `kind`."""
    if isinstance(data, dict) and data.get("kind") == "erasure":
        return Erasure.model_validate(data)
    return _EVENT_ADAPTER.validate_python(data)
