"""The wire format: Avro single-object records resolved by fingerprint, JSON envelopes."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from fastavro import schemaless_writer

from schemas.audit import Deletion, Document, Message, Recall, utc_now
from schemas.codec import (
    LATEST,
    MAGIC,
    REGISTRY,
    decode_record,
    encode_envelope_json,
    encode_record,
    record_kind,
)
from schemas.errors import DecodeError, MemstreamError
from schemas.records import GraphEnvelope


def _events() -> list[object]:
    target = uuid.uuid4()
    return [
        Message(speaker="ana", content="hello", session_id="s", actor="a", retain_until=utc_now()),
        Document(name="n.txt", text="body", sha256="ab" * 32),
        Recall(query="q", recalled=(target, uuid.uuid4())),
        Deletion(targets=(target,), reason="gdpr", requested_by="ana"),
    ]


@pytest.mark.parametrize("index", range(4))
def test_audit_events_round_trip_with_the_seq_the_log_gives(index: int) -> None:
    event = _events()[index]
    data = encode_record(event)  # type: ignore[arg-type]
    assert data[:2] == MAGIC
    assert REGISTRY[data[2:10]].kind == event.kind  # type: ignore[attr-defined]
    assert decode_record(data) == event
    assert decode_record(data, 7) == event.with_seq(7)  # type: ignore[attr-defined]


def test_seq_is_never_written() -> None:
    message = Message(speaker="a", content="b")
    assert encode_record(message) == encode_record(message.with_seq(42))


def test_envelopes_round_trip_in_avro_and_in_typescript_json() -> None:
    env = GraphEnvelope(
        id="0190a1b2-0000-7000-8000-000000000000",
        namespace="memory",
        type="memory.create",
        ts="2024-07-01T12:00:00.000Z",
        payload={"type": "memory.create", "item": {"id": "x", "content": {"k": [1, None]}}},
    )
    assert record_kind(env) == "envelope"
    assert decode_record(encode_record(env)) == env
    text = encode_envelope_json(env)
    assert json.loads(text) == {
        "id": env.id,
        "namespace": "memory",
        "type": "memory.create",
        "ts": env.ts,
        "payload": env.payload,
    }
    assert decode_record(text) == env


def test_a_record_written_with_an_older_schema_version_is_resolved() -> None:
    # A record whose writer schema is registered but is not the newest still decodes:
    # the registry is keyed by fingerprint, not by kind.
    entry = LATEST["message"]
    out = io.BytesIO()
    out.write(MAGIC + entry.fingerprint)
    message = Message(speaker="a", content="b")
    body = {k: v for k, v in message.__dict__.items() if k not in ("kind", "seq")}
    schemaless_writer(out, entry.schema, body)
    assert decode_record(out.getvalue()) == message


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "marker missing"),
        (b"garbage bytes", "marker"),
        (MAGIC + b"\x00" * 8 + b"body", "unknown schema fingerprint"),
        (b"{not json", "not JSON"),
        (b'{"id": 1}', "'id' must be a string"),
        (b"[]", "marker"),
    ],
)
def test_undecodable_bytes_raise_a_decode_error_naming_why(data: bytes, why: str) -> None:
    with pytest.raises(DecodeError, match=why) as info:
        decode_record(data)
    assert isinstance(info.value, MemstreamError)


def test_truncated_trailing_and_invalid_bodies_are_decode_errors() -> None:
    data = encode_record(Message(speaker="a", content="hello"))
    for bad in (data[:-3], data + b"\x00"):
        with pytest.raises(DecodeError):
            decode_record(bad)
    empty_content = encode_record(
        Message.model_construct(
            id=uuid.uuid4(),
            timestamp=utc_now(),
            seq=None,
            session_id=None,
            source="x",
            actor=None,
            kind="message",
            speaker="a",
            content="",
            retain_until=None,
        )
    )
    with pytest.raises(DecodeError, match="content"):
        decode_record(empty_content)
