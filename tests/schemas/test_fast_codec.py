"""The direct envelope codec and lifecycle encoder give exactly the generic paths' bytes."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st

from projector.lifecycle import Lifecycle, _lifecycle_id, encode_lifecycle, lifecycle_envelope
from projector.record_fold import empty_state, fold_decoded, fold_record
from schemas.audit import Deletion, Document, Message, Recall
from schemas.codec import (
    _AUDIT_READERS,
    HEADER_LEN,
    LATEST,
    MAGIC,
    MAX_DECODE_DEPTH,
    REGISTRY,
    _decode_avro,
    _direct_audit,
    _write_str,
    decode_record,
    encode_envelope_fields,
    encode_record,
)
from schemas.errors import DecodeError
from schemas.records import GraphEnvelope

# Any text a Python str may hold that UTF-8 can carry (no lone surrogates).
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
nonempty = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)


def _fastavro(body: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(MAGIC + LATEST["envelope"].fingerprint)
    schemaless_writer(out, LATEST["envelope"].schema, body)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(text, text, text, text, st.none() | text, text)
def test_envelope_bytes_equal_fastavros(
    id: str, namespace: str, type: str, ts: str, trace_id: str | None, payload: str
) -> None:
    body = {
        "id": id,
        "namespace": namespace,
        "type": type,
        "ts": ts,
        "trace_id": trace_id,
        "payload": payload,
    }
    data = encode_envelope_fields(id, namespace, type, ts, trace_id, payload)
    assert data == _fastavro(body)
    stream = io.BytesIO(data[HEADER_LEN:])
    assert schemaless_reader(stream, LATEST["envelope"].schema) == body


def _audit_event(
    kind: str,
    a: str,
    b: str,
    session: str | None,
    actor: str | None,
    when: datetime,
    until: datetime | None,
    ids: list[uuid.UUID],
) -> Any:
    common: dict[str, Any] = {"session_id": session, "actor": actor, "timestamp": when, "source": b}
    if kind == "message":
        return Message(speaker=a, content=b, retain_until=until, **common)
    if kind == "document":
        return Document(name=a, text=b, media_type=b, sha256=session, retain_until=until, **common)
    if kind == "recall":
        return Recall(query=a, recalled=tuple(ids), **common)
    return Deletion(targets=(uuid.uuid4(), *ids), reason=a, requested_by=actor, **common)


# Every kind of audit event, with and without each optional field.
audit_events = st.builds(
    _audit_event,
    st.sampled_from(["message", "document", "recall", "deletion"]),
    nonempty,
    nonempty,
    st.none() | text,
    st.none() | text,
    times,
    st.none() | times,
    st.lists(st.uuids(), max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(audit_events)
def test_audit_event_bytes_equal_fastavros(event: Any) -> None:
    body = dict(event.__dict__)
    del body["seq"], body["kind"]
    out = io.BytesIO()
    out.write(MAGIC + LATEST[event.kind].fingerprint)
    schemaless_writer(out, LATEST[event.kind].schema, body)
    data = encode_record(event)
    assert data == out.getvalue()
    assert decode_record(data, 5) == event.with_seq(5)


@settings(max_examples=200, deadline=None)
@given(audit_events, nonempty)
def test_a_replaced_field_encodes_as_the_copy_with_that_field(event: Any, value: str) -> None:
    """An encrypted log writes a message's or document's content sealed without building
    the sealed copy (`encode_record`'s `replaced`): the bytes must be the copy's."""
    field = {"message": "content", "document": "text", "recall": "query"}.get(event.kind, "reason")
    data = encode_record(event, (field, value))
    assert data == encode_record(event.with_field(field, value))
    assert getattr(decode_record(data), field) == value


def test_replacing_a_field_an_event_does_not_have_is_refused() -> None:
    message = Message(speaker="a", content="x")
    with pytest.raises(ValueError, match="Message has no field 'text'"):
        encode_record(message, ("text", "y"))
    envelope = GraphEnvelope(id="e", namespace="memory", type="memory.create", ts="t")
    with pytest.raises(ValueError, match="GraphEnvelope has no replaceable field 'type'"):
        encode_record(envelope, ("type", "y"))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(text, st.none() | st.integers() | text), st.lists(text, max_size=3))
def test_a_replaced_payload_encodes_as_the_copy_with_that_payload(
    payload: dict[str, Any], other: list[str]
) -> None:
    envelope = GraphEnvelope(id="e", namespace="memory", type="x", ts="t", payload=payload)
    data = encode_record(envelope, ("payload", other))
    assert data == encode_record(envelope.model_copy(update={"payload": other}))
    assert decode_record(data).payload == other  # type: ignore[union-attr]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(text, st.none() | st.integers() | text | st.lists(text)), st.none() | text)
def test_envelopes_round_trip(payload: dict[str, Any], trace_id: str | None) -> None:
    envelope = GraphEnvelope(
        id=str(uuid.uuid4()),
        namespace="memory",
        type="memory.create",
        ts="2024-01-01T00:00:00.000Z",
        trace_id=trace_id,
        payload=payload,
    )
    assert decode_record(encode_record(envelope)) == envelope


def test_truncated_or_padded_envelopes_are_decode_errors() -> None:
    data = encode_envelope_fields("i", "n", "t", "ts", "trace", '{"a":1}')
    for end in range(HEADER_LEN, len(data)):
        with pytest.raises(DecodeError):
            decode_record(data[:end])
    with pytest.raises(DecodeError, match="trailing"):
        decode_record(data + b"\x00")
    bad_branch = bytearray(encode_envelope_fields("i", "n", "t", "ts", None, "{}"))
    bad_branch[HEADER_LEN + 2 + 2 + 2 + 3] = 4  # trace_id's union index: 2
    with pytest.raises(DecodeError):
        decode_record(bytes(bad_branch))
    with pytest.raises(DecodeError):
        decode_record(MAGIC + LATEST["envelope"].fingerprint + b"\xff" * 12)


@given(st.integers(min_value=0, max_value=2**62), st.integers(min_value=0, max_value=1000))
def test_lifecycle_ids_are_uuid5(seq: int, index: int) -> None:
    ns = uuid.UUID("6d656d73-7472-6561-6d2e-6c6966656379")
    assert _lifecycle_id(seq, index) == str(uuid.uuid5(ns, f"{seq}:{index}"))


def _assert_same(event: Lifecycle, index: int) -> None:
    fast = encode_lifecycle(event, index)
    assert fast == encode_record(lifecycle_envelope(event, index))
    assert decode_record(fast) == lifecycle_envelope(event, index)


@settings(max_examples=300, deadline=None)
@given(audit_events, st.integers(min_value=0, max_value=2**40))
def test_audit_lifecycle_bytes_equal_the_generic_path(event: Any, seq: int) -> None:
    stored = event.with_seq(seq)
    _assert_same(Lifecycle(seq, "audit", f"{event.kind}.appended", stored), 0)


def test_timestamps_on_whole_seconds_and_early_years() -> None:
    for when in (
        datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC),
        datetime(999, 1, 1, 0, 0, 0, 999, tzinfo=UTC),
        datetime(1, 1, 1, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 5, 1, tzinfo=UTC) + timedelta(microseconds=1),
    ):
        stored = Message(speaker="s", content='c\n"\\\u2028é\x00\x7f', timestamp=when).with_seq(3)
        _assert_same(Lifecycle(3, "audit", "message.appended", stored), 2)


def test_graph_operation_and_rejection_lifecycles_equal_the_generic_path() -> None:
    item = {
        "id": str(uuid.uuid4()),
        "scope": "s",
        "kind": "observation",
        "content": {"v": "é"},
        "author": "a",
        "source_kind": "observed",
        "authority": 0.5,
    }
    create = GraphEnvelope(
        id=str(uuid.uuid4()),
        namespace="memory",
        type="memory.create",
        ts="2024-01-01T00:00:00.000Z",
        payload={"type": "memory.create", "item": item},
    )
    state, events = fold_decoded(empty_state(), 0, create)
    cascade = GraphEnvelope(
        id=str(uuid.uuid4()),
        namespace="memstream",
        type="memstream.cascade_retract",
        ts="2024-01-01T00:00:01.000Z",
        payload={"item_id": item["id"], "author": "a"},
    )
    state, more = fold_decoded(state, 1, cascade)
    state, rejected = fold_record(state, 2, b"garbage")
    assert events and more and rejected
    for index, event in enumerate([*events, *more, *rejected]):
        _assert_same(event, index)
    payload = decode_record(encode_lifecycle(rejected[0], 0)).payload  # type: ignore[union-attr]
    assert payload["seq"] == 2 and "not an Avro" in payload["reason"]


# --- audit events read directly (`_direct_audit`) against the general path -------------


def _general(data: bytes, seq: int | None) -> Any:
    """What the general path (fastavro, then pydantic) reads from `data`."""
    return _decode_avro(REGISTRY[data[2:HEADER_LEN]], data, seq, MAX_DECODE_DEPTH)


def _assert_identical(direct: Any, general: Any) -> None:
    assert type(direct) is type(general)
    assert direct == general
    assert list(direct.__dict__) == list(general.__dict__)  # the model's field order
    assert direct.__pydantic_fields_set__ == general.__pydantic_fields_set__
    assert repr(direct) == repr(general)
    for name, value in general.__dict__.items():
        assert type(direct.__dict__[name]) is type(value), name


def test_every_kind_without_a_check_across_fields_is_read_directly() -> None:
    assert {reader.kind for reader in _AUDIT_READERS.values()} == {
        "message",
        "document",
        "recall",
        "deletion",
    }


@settings(max_examples=400, deadline=None)
@given(audit_events, st.none() | st.integers(min_value=0, max_value=2**62))
def test_audit_events_read_directly_equal_the_general_path(event: Any, seq: int | None) -> None:
    data = encode_record(event)
    direct = _direct_audit(_AUDIT_READERS[data[2:HEADER_LEN]], data, seq)
    _assert_identical(direct, _general(data, seq))
    _assert_identical(decode_record(data, seq), direct)


def _mangled(data: bytes, how: str, at: int, byte: int) -> bytes:
    at = HEADER_LEN + at % max(1, len(data) - HEADER_LEN)
    if how == "cut":
        return data[:at]
    if how == "set":
        return data[:at] + bytes([byte]) + data[at + 1 :]
    return data[:at] + bytes([byte]) + data[at:]  # "insert"


@settings(max_examples=1500, deadline=None)
@given(
    audit_events,
    st.sampled_from(["cut", "set", "insert"]),
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=0, max_value=255),
)
def test_mangled_audit_records_are_read_directly_only_as_the_general_path_reads_them(
    event: Any, how: str, at: int, byte: int
) -> None:
    """Whatever the bytes, the direct reader accepts only what the general path accepts,
    and reads it alike; whatever it refuses, `decode_record` says as the general path does."""
    data = _mangled(encode_record(event), how, at, byte)
    reader = _AUDIT_READERS[data[2:HEADER_LEN]]
    try:
        general = _general(data, 7)
    except DecodeError as exc:
        with pytest.raises(Exception):  # noqa: B017 - any error: decode_record reports it
            _direct_audit(reader, data, 7)
        with pytest.raises(DecodeError) as raised:
            decode_record(data, 7)
        assert str(raised.value) == str(exc)
        return
    try:
        direct = _direct_audit(reader, data, 7)
    except Exception:  # refused here, read by the general path: decode_record falls back
        _assert_identical(decode_record(data, 7), general)
        return
    _assert_identical(direct, general)


def _with_id(event: Any, text: str) -> bytes:
    """`event`'s record bytes with its id field written as `text` (any form)."""
    data = encode_record(event)
    out = bytearray(data[:HEADER_LEN])
    _write_str(out, text)
    return bytes(out) + data[HEADER_LEN + 1 + 36 :]  # the canonical id: 1 + 36 bytes


@pytest.mark.parametrize(
    "form",
    [
        "{0123abcd-0000-4000-8000-0000000000ff}",
        "urn:uuid:0123abcd-0000-4000-8000-0000000000ff",
        "0123ABCD-0000-4000-8000-0000000000FF",
        "0123abcd000040008000-0000000000ff",
        "0123abcd00004000800000000000-00ff",
        " 123abcd00004000800000000000000ff",
        "0_23abcd00004000800000000000000ff",
        "+123abcd00004000800000000000000ff",
        "0123abcd00004000800000000000000",
        "0123abcd-0000-4000-8000-0000000000fg",
        "",
    ],
)
def test_ids_in_any_form_are_read_as_uuid_reads_them(form: str) -> None:
    data = _with_id(Message(speaker="s", content="c"), form)
    try:
        expected = uuid.UUID(form)
    except ValueError:
        with pytest.raises(DecodeError):
            decode_record(data)
        with pytest.raises(ValueError):
            _direct_audit(_AUDIT_READERS[data[2:HEADER_LEN]], data, None)
        return
    _assert_identical(decode_record(data), _general(data, None))
    assert decode_record(data).id == expected


def test_bodies_pydantic_refuses_are_refused_in_its_words() -> None:
    def written(kind: str, **fields: Any) -> bytes:
        out = io.BytesIO()
        out.write(MAGIC + LATEST[kind].fingerprint)
        schemaless_writer(out, LATEST[kind].schema, fields)
        return out.getvalue()

    common: dict[str, Any] = {
        "id": uuid.uuid4(),
        "timestamp": datetime(2024, 1, 1, tzinfo=UTC),
        "session_id": None,
        "source": "x",
        "actor": None,
    }
    cases = [
        (written("message", speaker="", content="c", retain_until=None, **common), "speaker"),
        (written("message", speaker="s", content="", retain_until=None, **common), "content"),
        (written("deletion", targets=[], reason="r", requested_by=None, **common), "targets"),
        (written("recall", query="", recalled=[], **common), "query"),
    ]
    for data, field in cases:
        with pytest.raises(DecodeError, match=f"record: {field}: "):
            decode_record(data)
    message = written("message", speaker="s", content="c", retain_until=None, **common)
    with pytest.raises(DecodeError, match="seq: Input should be greater than or equal to 0"):
        decode_record(message, -1)
