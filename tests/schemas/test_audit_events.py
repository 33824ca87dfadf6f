"""Seed 000/001 events: fields, defaults, validation, UTC, frozen, dict round trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid4

import pytest
from pydantic import ValidationError

from schemas.audit import Deletion, Document, Message, Recall, event_from_dict, event_to_dict


def test_common_fields_and_defaults() -> None:
    message = Message(speaker="ana", content="hello")
    assert isinstance(message.id, UUID)
    assert message.timestamp.tzinfo is not None
    assert message.timestamp.utcoffset() == timedelta(0)
    assert message.seq is None
    assert message.session_id is None
    assert message.source == "unknown"
    assert message.actor is None
    assert message.kind == "message"
    assert message.retain_until is None


def test_document_defaults() -> None:
    document = Document(name="a.txt", text="body")
    assert document.media_type == "text/plain"
    assert document.sha256 is None
    assert document.retain_until is None
    assert document.kind == "document"


def test_recall_and_deletion_defaults() -> None:
    assert Recall(query="q").recalled == ()
    target = uuid4()
    deletion = Deletion(targets=(target,), reason="gdpr")
    assert deletion.targets == (target,)
    assert deletion.requested_by is None


@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda: Message(speaker="", content="x"), "speaker"),
        (lambda: Message(speaker="x", content=""), "content"),
        (lambda: Document(name="", text="x"), "name"),
        (lambda: Document(name="x", text=""), "text"),
        (lambda: Recall(query=""), "query"),
        (lambda: Deletion(targets=(uuid4(),), reason=""), "reason"),
        (lambda: Deletion(targets=(), reason="x"), "targets"),
        (lambda: Message(speaker="x", content="y", timestamp=datetime(2024, 1, 1)), "timestamp"),
        (lambda: Message(speaker="x", content="y", seq=-1), "seq"),
        (lambda: Message(speaker="x", content="y", colour="red"), "colour"),
    ],
)
def test_invalid_fields_are_named(factory, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError) as info:
        factory()
    assert field in str(info.value)


def test_timestamps_are_normalized_to_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    message = Message(
        speaker="x",
        content="y",
        timestamp=datetime(2024, 5, 1, 12, 0, tzinfo=plus_two),
        retain_until=datetime(2025, 5, 1, 12, 0, tzinfo=plus_two),
    )
    assert message.timestamp == datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
    assert message.timestamp.tzinfo == UTC
    assert message.retain_until is not None and message.retain_until.tzinfo == UTC


def test_events_are_frozen() -> None:
    message = Message(speaker="x", content="y")
    with pytest.raises(ValidationError):
        message.content = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    "event",
    [
        Message(
            speaker="ana",
            content="hi",
            session_id="s",
            source="chat",
            actor="a",
            retain_until=datetime(2030, 1, 1, tzinfo=UTC),
        ),
        Document(name="n", text="t", media_type="text/markdown", sha256="ab" * 32),
        Recall(query="q", recalled=(uuid4(), uuid4())),
        Deletion(targets=(uuid4(),), reason="r", requested_by="dpo", seq=7),
    ],
)
def test_dict_round_trip_through_json(event) -> None:  # type: ignore[no-untyped-def]
    data = event_to_dict(event)
    assert data["kind"] == event.kind
    again = event_from_dict(json.loads(json.dumps(data)))
    assert type(again) is type(event)
    assert again == event


def test_event_from_dict_rejects_unknown_kind() -> None:
    with pytest.raises(ValidationError) as info:
        event_from_dict({"kind": "note", "text": "x"})
    assert "kind" in str(info.value) or "note" in str(info.value)
