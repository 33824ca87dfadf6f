"""Issue 11, item 2: the fold is total. Any bytes become a rejection, never an exception.

Attacked with the 4 KB record that nests 2,000 levels (RecursionError in `json` before),
hostile Avro bodies, and hypothesis: arbitrary bytes and mutations of valid records.
"""

from __future__ import annotations

import json
import sys
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projector.graph.intents import create_intent
from projector.lifecycle import encode_lifecycle
from projector.record_fold import (
    LogState,
    apply_record,
    empty_state,
    fold_decoded,
    fold_log,
    fold_record,
)
from schemas.audit import Deletion, Document, Message, Recall
from schemas.codec import (
    LATEST,
    MAGIC,
    MAX_DECODE_BYTES,
    MAX_JSON_DEPTH,
    decode_record,
    encode_envelope_fields,
    encode_envelope_json,
    encode_record,
    json_depth,
)
from schemas.errors import DecodeError, RecordTooDeepError, RecordTooLargeError
from schemas.graph.items import create_edge, create_memory_item
from schemas.records import GraphEnvelope

TS = "2026-01-01T00:00:00.000Z"


def _item(id: str, content: Any = None, **kw: Any) -> dict[str, Any]:
    made = create_memory_item(
        id=id,
        scope="user:x",
        kind="observation",
        content={"v": 1} if content is None else content,
        author="agent:a",
        source_kind="observed",
        authority=0.5,
        **kw,
    )
    return made.model_dump(mode="json", by_alias=True, exclude_none=True)


def _env(payload: Any, type: str, namespace: str | None = None) -> GraphEnvelope:
    return GraphEnvelope(
        id=str(uuid.uuid4()),
        namespace=namespace or type.split(".")[0],
        type=type,
        ts=TS,
        payload=payload,
    )


def _nested(depth: int) -> Any:
    """A JSON value nesting `depth` levels of objects and arrays."""
    value: Any = 1
    for level in range(depth):
        value = {"k": value} if (depth - level) % 2 else [value]  # an object on top
    return value


def _deep_text(depth: int) -> str:
    return "[" * depth + "]" * depth


# --- the attack of the issue --------------------------------------------------------------------


def _memex_envelope_nesting(levels: int) -> bytes:
    """A JSON memex envelope, as the TypeScript library writes one, whose payload nests
    `levels` deep: the issue's 4 KB record at 2,000."""
    head = json.dumps(
        {"id": str(uuid.uuid4()), "namespace": "memory", "type": "memory.create", "ts": TS}
    )[:-1]
    return f'{head}, "payload": {_deep_text(levels)}}}'.encode()


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(_memex_envelope_nesting(2000), id="json-envelope"),
        pytest.param(
            encode_envelope_fields(
                str(uuid.uuid4()), "memory", "memory.create", TS, None, _deep_text(2000)
            ),
            id="avro-envelope",
        ),
        pytest.param(
            encode_envelope_fields(
                str(uuid.uuid4()),
                "memory",
                "memory.create",
                TS,
                None,
                json.dumps(
                    {"type": "memory.create", "item": {**_item("i9"), "content": "X"}}
                ).replace('"X"', '{"a":' + _deep_text(1990) + "}"),
            ),
            id="item-content",
        ),
        pytest.param(
            encode_envelope_fields(
                str(uuid.uuid4()), "memory", "memory.create", TS, None, "[" * 100_000
            ),
            id="unclosed",
        ),
    ],
)
def test_a_record_nesting_two_thousand_levels_is_a_rejection(record: bytes) -> None:
    before = fold_log([(0, encode_record(Message(speaker="a", content="kept")))])
    result = fold_record(before, 1, record)
    assert result.state.last_seq == 1
    [rejection] = result.state.rejections
    assert rejection.seq == 1 and rejection.error == "DecodeError"
    assert "levels deep" in rejection.reason and f"at most {MAX_JSON_DEPTH}" in rejection.reason
    assert result.state.memory is before.memory and result.state.graph is before.graph
    [event] = result.lifecycle
    assert event.type == "record.rejected"
    # The rejection's own lifecycle event is a record too: it encodes and decodes.
    assert decode_record(encode_lifecycle(event, 0)).payload["seq"] == 1  # type: ignore[union-attr]
    # And a fresh reader folds past it.
    after = fold_record(result.state, 2, encode_record(Message(speaker="a", content="next")))
    assert after.state.last_seq == 2 and len(after.state.memory) == 2


def test_the_issue_record_is_four_kilobytes() -> None:
    assert 4000 <= len(_memex_envelope_nesting(2000)) <= 4200


def test_payloads_up_to_the_bound_are_read_and_deeper_ones_are_not() -> None:
    for depth, readable in ((MAX_JSON_DEPTH, True), (MAX_JSON_DEPTH + 1, False)):
        payload = {"type": "memory.create", "item": _item("i1", content=_nested(depth - 2))}
        assert json_depth(json.dumps(payload).encode()) == depth
        avro = encode_envelope_fields(
            str(uuid.uuid4()), "memory", "memory.create", TS, None, json.dumps(payload)
        )
        as_json = encode_envelope_json(_env(payload, "memory.create"))
        for data in (avro, as_json):
            state = fold_record(empty_state(), 0, data).state
            assert (not state.rejections) is readable, state.rejections
            assert ("i1" in state.graph.items) is readable


def test_writers_refuse_what_readers_would_reject() -> None:
    fits = _env(
        {"type": "memory.create", "item": _item("i1", content=_nested(MAX_JSON_DEPTH - 2))},
        "memory.create",
    )
    assert decode_record(encode_record(fits)) == fits
    deeper = _env(
        {"type": "memory.create", "item": _item("i1", content=_nested(MAX_JSON_DEPTH))},
        "memory.create",
    )
    with pytest.raises(
        RecordTooDeepError, match=f"{MAX_JSON_DEPTH + 2} levels deep.*at most {MAX_JSON_DEPTH}"
    ) as info:
        encode_record(deeper)
    assert deeper.id in str(info.value)
    beyond_python = _env(_nested(5000), "memory.create")
    with pytest.raises(RecordTooDeepError, match=beyond_python.id):
        encode_record(beyond_python)


def test_lifecycle_events_of_a_record_at_the_bound_still_decode() -> None:
    # mark_contradiction's meta travels one level deeper in the edge.created lifecycle
    # event than in the operation: derived records get a margin on the way back in.
    state = fold_log(
        [
            (
                0,
                encode_record(_env({"type": "memory.create", "item": _item("a")}, "memory.create")),
            ),
            (
                1,
                encode_record(_env({"type": "memory.create", "item": _item("b")}, "memory.create")),
            ),
        ]
    )
    meta = _nested(MAX_JSON_DEPTH - 1)
    op = _env(
        {"item_id_a": "a", "item_id_b": "b", "author": "x", "meta": meta},
        "memstream.mark_contradiction",
        "memstream",
    )
    result = fold_record(state, 2, encode_record(op))
    assert not result.state.rejections
    for index, event in enumerate(result.lifecycle):
        assert decode_record(encode_lifecycle(event, index)) is not None


# --- Avro bodies --------------------------------------------------------------------------------


def _zigzag(value: int) -> bytes:
    n, out = (value << 1) ^ (value >> 63), bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _string(text: str) -> bytes:
    data = text.encode()
    return _zigzag(len(data)) + data


def _header(kind: str) -> bytes:
    return MAGIC + LATEST[kind].fingerprint


_ID = _string(str(uuid.uuid4()))
_HOSTILE_AVRO = {
    "length-2GB": _header("message") + _zigzag(2**31) + b"abc",
    "length-negative": _header("message") + _zigzag(-5) + b"abc" * 20,
    "content-length-1TB": _header("message")
    + _ID
    + _zigzag(1)
    + b"\x00"
    + _string("s")
    + b"\x00"
    + _string("sp")
    + _zigzag(2**40)
    + b"xx",
    "array-count-2^60": _header("recall")
    + _ID
    + _zigzag(1)
    + b"\x00"
    + _string("s")
    + b"\x00"
    + _string("q")
    + _zigzag(2**60)
    + _ID,
    "array-count-negative": _header("recall")
    + _ID
    + _zigzag(1)
    + b"\x00"
    + _string("s")
    + b"\x00"
    + _string("q")
    + _zigzag(-(2**60))
    + _zigzag(2**40)
    + _ID,
    "varint-too-long": _header("message") + b"\xff" * 20 + b"\x01",
    "timestamp-out-of-range": _header("message")
    + _ID
    + _zigzag(2**62)
    + b"\x00"
    + _string("s")
    + b"\x00"
    + _string("sp")
    + _string("c")
    + b"\x00",
    "union-branch-7": _header("message")
    + _ID
    + _zigzag(1)
    + b"\x0e"
    + _string("s")
    + b"\x00"
    + _string("sp")
    + _string("c")
    + b"\x00",
    "envelope-payload-2GB": _header("envelope")
    + _string("i")
    + _string("memory")
    + _string("memory.create")
    + _string(TS)
    + b"\x00"
    + _zigzag(2**31)
    + b"{}",
    "envelope-payload-negative": _header("envelope")
    + _string("i")
    + _string("memory")
    + _string("memory.create")
    + _string(TS)
    + b"\x00"
    + _zigzag(-3)
    + b"{}",
    "envelope-payload-not-utf8": _header("envelope")
    + _string("i")
    + _string("memory")
    + _string("memory.create")
    + _string(TS)
    + b"\x00"
    + _zigzag(2)
    + b"\xff\xfe",
    "truncated": encode_record(Message(speaker="a", content="hello"))[:-3],
    "json-envelope-utf16": '{"id":"a","namespace":"m","type":"t","ts":"x"}'.encode("utf-16-le"),
    "json-huge-integer": b'{"id":"a","namespace":"m","type":"t","ts":"x","payload":'
    + b"9" * 5000
    + b"}",
}


@pytest.mark.parametrize("name", sorted(_HOSTILE_AVRO))
def test_hostile_bodies_are_rejections(name: str) -> None:
    data = _HOSTILE_AVRO[name]
    with pytest.raises(DecodeError):
        decode_record(data)
    state = fold_record(empty_state(), 0, data).state
    assert [r.seq for r in state.rejections] == [0] and state.rejections[0].reason


def test_writers_refuse_records_readers_would_not_read() -> None:
    big = Document(name="big", text="x" * MAX_DECODE_BYTES)
    with pytest.raises(RecordTooLargeError, match=f"document {big.id}: .*up to {MAX_DECODE_BYTES}"):
        encode_record(big)


def test_a_record_over_the_size_bound_is_refused_unread() -> None:
    huge = b"{" + b" " * MAX_DECODE_BYTES + b"}"
    with pytest.raises(DecodeError, match=f"read up to {MAX_DECODE_BYTES} bytes"):
        decode_record(huge)
    assert fold_record(empty_state(), 0, huge).state.rejections[0].seq == 0


# --- json_depth is exact --------------------------------------------------------------------


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(alphabet=st.sampled_from('[]{}"\\ab\n\u00e9\u2028'), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(alphabet=st.sampled_from('[]{}"\\k'), max_size=4), inner, max_size=4
        )
    ),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_JSON, st.booleans())
def test_json_depth_is_the_nesting_of_the_parsed_value(value: Any, ascii: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii).encode()
    assert json_depth(text) == _depth(value)


def _stack_depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


_TOKENS = st.sampled_from(
    ["[", "]", "{", "}", '"', "\\", '\\"', '"k":', "1", ",", ":", " ", "[[[["]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TOKENS, max_size=300))
def test_json_depth_bounds_what_json_reaches_in_invalid_text(tokens: list[str]) -> None:
    # With Python's recursion limit 60 levels above here, json.loads raises
    # RecursionError past about 55 levels: text measured at 50 or less never gets there.
    text = "".join(tokens)
    if json_depth(text.encode()) > 50:
        return
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_stack_depth() + 60)
    try:
        json.loads(text)
    except ValueError:
        pass
    finally:
        sys.setrecursionlimit(limit)


def test_the_recursion_guard_of_that_test_bites() -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(_stack_depth() + 60)
    try:
        with pytest.raises(RecursionError):
            json.loads("[" * 80 + "]" * 80)
    finally:
        sys.setrecursionlimit(limit)


# --- any bytes, and mutations of valid records ------------------------------------------------


def _base() -> tuple[LogState, list[bytes]]:
    """A state with something in every part, and valid records that could follow it."""
    m = Message(speaker="ana", content="my cat is Tom", session_id="s1")
    state = fold_log(
        enumerate(
            [
                encode_record(m),
                encode_record(_env({"type": "memory.create", "item": _item("a")}, "memory.create")),
                encode_record(_env({"type": "memory.create", "item": _item("b")}, "memory.create")),
                encode_record(
                    _env(
                        {
                            "type": "intent.create",
                            "intent": create_intent(
                                id="in1", label="ship", priority=0.5, owner="agent:a"
                            ).model_dump(mode="json"),
                        },
                        "intent.create",
                    )
                ),
            ]
        )
    )
    edge = create_edge(
        from_="a", to="b", kind="SUPPORTS", author="x", source_kind="observed", authority=0.5
    ).model_dump(mode="json", by_alias=True, exclude_none=True)
    nested = {"deep": _nested(MAX_JSON_DEPTH - 4), "list": [1, 2.5, None, True, "é"]}
    valid = [
        Message(speaker="bob", content="hello\nworld é", session_id="s2", actor="agent"),
        Document(name="d.txt", text="body", sha256="ab" * 32),
        Recall(query="q", recalled=(m.id,)),
        Deletion(targets=(m.id,), reason="gdpr", requested_by="ana"),
        _env({"type": "memory.create", "item": _item("c", content=nested)}, "memory.create"),
        _env(
            {
                "type": "memory.update",
                "item_id": "a",
                "partial": {"content": {"v": 2}},
                "author": "x",
            },
            "memory.update",
        ),
        _env({"type": "edge.create", "edge": edge}, "edge.create"),
        _env({"type": "intent.pause", "intent_id": "in1", "author": "x"}, "intent.pause"),
        _env({"item_id": "a", "author": "x"}, "memstream.cascade_retract", "memstream"),
        _env(
            {"item_id_a": "a", "item_id_b": "b", "author": "x", "meta": nested},
            "memstream.mark_contradiction",
            "memstream",
        ),
        _env(
            {
                "graph_seq": "any",
                "commands": [
                    {"type": "memory.create", "item": _item("d")},
                    {"type": "memory.retract", "item_id": "b", "author": "x"},
                ],
            },
            "memstream.batch",
            "memstream",
        ),
    ]
    encoded = [encode_record(r) for r in valid]
    encoded += [encode_envelope_json(r) for r in valid if isinstance(r, GraphEnvelope)]
    return state, encoded


BASE, VALID = _base()


def _check_total(state: LogState, data: bytes) -> None:
    """fold_record(state, seq, data) returns; its result is a rejection changing nothing
    else, or the strict fold of what the bytes decode to; its lifecycle events encode and
    decode again."""
    seq = state.next_seq
    result = fold_record(state, seq, data)  # must not raise
    new = result.state
    assert new.last_seq == seq
    if len(new.rejections) == len(state.rejections) + 1:
        assert new.rejections[-1].seq == seq and new.rejections[-1].reason
        assert new.memory is state.memory and new.graph is state.graph
        assert new.intents is state.intents and new.tasks is state.tasks
        assert [e.type for e in result.lifecycle] == ["record.rejected"]
    else:
        assert len(new.rejections) == len(state.rejections)
        record = decode_record(data, max_depth=MAX_JSON_DEPTH)
        assert new == apply_record(state, seq, record).state
    for index, event in enumerate(result.lifecycle):
        assert decode_record(encode_lifecycle(event, index)) is not None


def test_every_valid_record_folds_without_rejection() -> None:
    for data in VALID:
        result = fold_decoded(BASE, BASE.next_seq, decode_record(data))
        assert not result.state.rejections, (data[:60], result.state.rejections)
        _check_total(BASE, data)


_SETTINGS = settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@_SETTINGS
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_fold_to_a_rejection_or_a_valid_state(data: bytes) -> None:
    _check_total(BASE, data)


@_SETTINGS
@given(
    st.sampled_from(
        [
            b"{",
            b"\xc3\x01",
            MAGIC + LATEST["envelope"].fingerprint,
            MAGIC + LATEST["message"].fingerprint,
        ]
    ),
    st.binary(max_size=2048),
)
def test_arbitrary_bodies_behind_a_valid_header_fold_totally(head: bytes, body: bytes) -> None:
    _check_total(BASE, head + body)


def _mutate(data: bytes, draw: Any) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                ["flip", "set", "insert", "delete", "truncate", "splice", "nest", "varint"]
            )
        )
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        if op == "flip" and out:
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and out:
            out[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF, 0x22, 0x5C, 0x5B, 0x7B]))
        elif op == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del out[at : at + draw(st.integers(1, 16))]
        elif op == "truncate":
            del out[at:]
        elif op == "splice":
            other = draw(st.sampled_from(VALID))
            start = draw(st.integers(0, len(other)))
            out[at:at] = other[start : start + draw(st.integers(1, 64))]
        elif op == "nest":  # arrays and objects, closed or not, at any byte or after a ':'
            depth = draw(st.one_of(st.integers(1, 100), st.integers(900, 3000)))
            opening = draw(st.sampled_from([b"[", b'{"k":', b'[{"k":']))
            closing = {b"[": b"]", b'{"k":': b"}", b'[{"k":': b"}]"}[opening]
            values = [i + 1 for i, byte in enumerate(out) if byte in b":,["]
            if values and draw(st.booleans()):
                at = draw(st.sampled_from(values))
            out[at:at] = opening * depth + (closing * depth if draw(st.booleans()) else b"")
        elif op == "varint":  # a length prefix claiming anything, negative ones included
            out[at:at] = _zigzag(draw(st.integers(-(2**62), 2**62)))
    return bytes(out)


@_SETTINGS
@given(st.data())
def test_mutations_of_valid_records_fold_to_a_rejection_or_a_valid_state(data: Any) -> None:
    record = data.draw(st.sampled_from(VALID))
    _check_total(BASE, _mutate(record, data.draw))


ENVELOPES = [decode_record(data) for data in VALID if data[:1] != b"{"]
ENVELOPES = [e for e in ENVELOPES if isinstance(e, GraphEnvelope)]


def _framed(envelope: GraphEnvelope, payload: bytes, form: str) -> bytes:
    """An envelope record around payload bytes as they are: the frame itself is valid."""
    if form == "json":
        head = json.dumps(
            {
                "id": envelope.id,
                "namespace": envelope.namespace,
                "type": envelope.type,
                "ts": envelope.ts,
            }
        )[:-1]
        return head.encode() + b', "payload": ' + payload + b"}"
    return (
        _header("envelope")
        + _string(envelope.id)
        + _string(envelope.namespace)
        + _string(envelope.type)
        + _string(envelope.ts)
        + b"\x00"
        + _zigzag(len(payload))
        + payload
    )


@_SETTINGS
@given(st.data(), st.sampled_from(["avro", "json"]))
def test_mutated_payloads_in_valid_frames_fold_to_a_rejection_or_a_valid_state(
    data: Any, form: str
) -> None:
    # Behind a valid frame (Avro lengths right, JSON envelope fields right), so the
    # mutated JSON reaches the payload's parser and the fold.
    envelope = data.draw(st.sampled_from(ENVELOPES))
    payload = json.dumps(envelope.payload, ensure_ascii=False).encode()
    _check_total(BASE, _framed(envelope, _mutate(payload, data.draw), form))


def test_a_mutated_length_prefix_cannot_make_the_reader_allocate() -> None:
    # A length claiming 2 GB inside a real message: refused from the record's own size.
    data = encode_record(Message(speaker="a", content="hello"))
    at = data.index(b"\x0ahello")  # the content's length (5, zigzag 10) and bytes
    bad = data[:at] + _zigzag(2**31) + data[at + 1 :]
    with pytest.raises(DecodeError, match="Expected 2147483648 bytes"):
        decode_record(bad)


# --- the issue's record on the real Kafka log --------------------------------------------------


@pytest.mark.kafka
def test_the_projector_and_a_fresh_reader_get_past_the_record_on_kafka(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    from confluent_kafka import Producer

    from producers.memory import Memory
    from projector.service import Projector

    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    deep = [
        _memex_envelope_nesting(2000),
        encode_envelope_fields(
            str(uuid.uuid4()), "memory", "memory.create", TS, None, _deep_text(2000)
        ),
    ]
    with Memory(location) as writer:
        writer.add_message(Message(speaker="a", content="before"))
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": "all"})
        for value in deep:  # as a TypeScript service or anyone else may produce them
            producer.produce(unique_name, value, partition=0)
        assert producer.flush(30) == 0
        # The writer folds them on its way to its next append.
        assert writer.add_message(Message(speaker="a", content="after")).seq == 3
    projector = Projector(location)
    state = projector.run(until_caught_up=True)
    assert [(r.seq, r.error) for r in state.rejections] == [(1, "DecodeError"), (2, "DecodeError")]
    assert all("2000 levels deep" in r.reason for r in state.rejections)
    assert [e.content for e in state.memory.events] == ["before", "after"]
    with Memory(location, create=False) as reader:
        fresh = reader.log.state()
        assert fresh.last_seq == 3 and len(reader) == 2
        assert [(r.seq, r.reason) for r in fresh.rejections] == [
            (r.seq, r.reason) for r in state.rejections
        ]
        rejected = [
            (r.seq, r.envelope.payload["reason"])  # type: ignore[index]
            for r in reader.lifecycle(0, timeout=5)
            if r.envelope.type == "record.rejected"
        ]
        assert rejected == [(r.seq, r.reason) for r in state.rejections]


def test_a_lifecycle_event_over_the_readers_bound_is_published_as_its_stand_in() -> None:
    """An event whose encoding is over `MAX_LIFECYCLE_BYTES` (an operation's value here)
    becomes a stand-in naming its seq and size; one at the bound is published whole."""
    from projector.lifecycle import MAX_LIFECYCLE_BYTES, Lifecycle, encode_full_lifecycle

    cause = {"cause_id": "c", "cause_ts": "2026-12-03T10:00:00.000Z"}

    def event(size: int) -> Lifecycle:
        extra = {"operation": "memory.bulk_adjust_scores", **cause, "value": "x" * size}
        return Lifecycle(7, "memstream", "operation.applied", None, extra)

    small = event(MAX_LIFECYCLE_BYTES - 1000)
    assert len(encode_full_lifecycle(small, 0)) <= MAX_LIFECYCLE_BYTES
    assert encode_lifecycle(small, 0) == encode_full_lifecycle(small, 0)
    big = event(MAX_LIFECYCLE_BYTES)
    full = encode_full_lifecycle(big, 2)
    stand_in = encode_lifecycle(big, 2)
    assert len(stand_in) < 1000
    whole, short = decode_record(full), decode_record(stand_in)
    assert (short.id, short.namespace, short.type, short.ts) == (  # type: ignore[union-attr]
        whole.id,
        whole.namespace,
        whole.type,
        whole.ts,
    )  # type: ignore[union-attr]
    assert short.payload == {  # type: ignore[union-attr]
        "omitted": {"bytes": len(full), "limit": MAX_LIFECYCLE_BYTES},
        "seq": 7,
    }
    # The same event gives the same bytes (a refold finds it published).
    assert encode_lifecycle(big, 2) == stand_in


def test_a_lifecycle_ts_is_the_fields_written_out_to_the_millisecond() -> None:
    """`_ms_iso` (isoformat, cut) equals the datetime's own fields written out, whatever
    its offset (dropped, as the envelopes always did) and year."""
    import random
    from datetime import UTC, datetime, timedelta, timezone

    from projector.lifecycle import _ms_iso

    def written_out(when: datetime) -> str:
        return (
            f"{when.year:04d}-{when.month:02d}-{when.day:02d}T{when.hour:02d}:"
            f"{when.minute:02d}:{when.second:02d}.{when.microsecond // 1000:03d}Z"
        )

    rng = random.Random(7)
    zones = [None, UTC, timezone(timedelta(hours=5, minutes=30))]
    zones.append(timezone(timedelta(hours=-8, seconds=7)))
    for _ in range(5000):
        when = datetime(
            rng.randint(1000, 9999),
            rng.randint(1, 12),
            rng.randint(1, 28),
            rng.randint(0, 23),
            rng.randint(0, 59),
            rng.randint(0, 59),
            rng.choice([0, 999, 1000, 999_999, rng.randint(0, 999_999)]),
            tzinfo=rng.choice(zones),
        )
        assert _ms_iso(when) == written_out(when), when
    # Years below 1000 keep strftime's form (unpadded here, as before).
    early = datetime(999, 1, 2, 3, 4, 5, 6_789)
    assert _ms_iso(early) == early.strftime("%Y-%m-%dT%H:%M:%S.") + "006Z"
