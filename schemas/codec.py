"""The wire format: Avro single-object encoding, schemas resolved by fingerprint.

A record is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the writer
schema's parsing canonical form + the schemaless Avro body (the Avro specification's
"single object encoding"). Schemas are the ``.avsc`` files in ``schemas/avro/``; every one
is loaded at import and registered under its fingerprint, so several versions of a kind
can coexist on one log: a record is read with the schema it was written with and
resolved to the newest version of its kind.

Bytes that start with ``{`` are read as a JSON memex envelope as the TypeScript library
writes it, so a TypeScript service can share the log. Anything else raises `DecodeError`.

Decoding is bounded, so any bytes become a `DecodeError` and never an exception of
another kind (the fold is total): records over `MAX_DECODE_BYTES` are refused
unread, and JSON (an envelope's payload, or a whole TypeScript envelope) is measured for
nesting before `json` parses it (`json` recurses once a level and would raise
RecursionError). Avro bodies are read within the record's own bytes: fastavro refuses a
length past the end, a negative one or a truncated body itself. Audit events written with
the newest schema of their kind are read directly (`_direct_audit`), as fastavro and
pydantic would read them; whatever that reader refuses is read again by those two, so an
error names what is wrong in the same words whichever reader met it first. Writers refuse what
readers would refuse (`RecordTooDeepError`), so every record a log accepted decodes.

The bytes of a record are kept as written by the logs (never re-encoded), so a hash chain
over them stays verifiable.
"""

from __future__ import annotations

import io
import json
import re
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar, cast
from uuid import UUID, SafeUUID

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import ValidationError

from schemas.audit import BaseEvent, Deletion, Document, Erasure, Message, Recall
from schemas.errors import DecodeError, RecordTooDeepError, RecordTooLargeError
from schemas.fields import shared_fields_set
from schemas.records import AuditEvent, GraphEnvelope, Record
from schemas.signing import SIGNED_MAGIC, split_signed

__all__ = [
    "MAGIC",
    "KIND_HEADER",
    "MAX_DECODE_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_DECODE_DEPTH",
    "SCHEMA_DIR",
    "SchemaEntry",
    "REGISTRY",
    "LATEST",
    "encode_record",
    "decode_record",
    "record_kind",
    "record_id",
    "encode_event",
    "decode_event",
    "encode_envelope_json",
    "encode_envelope_fields",
    "json_text",
    "json_depth",
]

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
# The Kafka header that names a record's kind ("message", ..., "envelope").
KIND_HEADER = "memstream.kind"
SCHEMA_DIR = Path(__file__).with_name("avro")
_FILE_NAME = re.compile(r"^(?P<kind>[a-z_]+)\.v(?P<version>\d+)\.avsc$")

# No record is read past this size. It is far above what any log accepts (the append
# limit both logs share, `RecordTooLargeError`; Kafka's own default is 1 MB), so every
# record a log accepted decodes; it bounds the work a hostile record can cause.
MAX_DECODE_BYTES = 16 * 1024 * 1024
# The deepest nesting of arrays and objects in a record's JSON payload (an envelope's
# payload counts from 1; a TypeScript JSON envelope's own object is not counted). Writers
# refuse deeper payloads and the fold rejects them. 64 is far beyond real memory content
# and far below Python's recursion limit, which `json`, pydantic and the snapshot
# formats all meet on the way.
MAX_JSON_DEPTH = 64
# `decode_record`'s default: records derived by the fold (lifecycle events) wrap what
# their cause carried a level or two deeper, and must still decode.
MAX_DECODE_DEPTH = MAX_JSON_DEPTH + 8

_AUDIT_MODELS: dict[str, type[BaseEvent]] = {
    "message": Message,
    "document": Document,
    "recall": Recall,
    "deletion": Deletion,
    "erasure": Erasure,
}
KINDS: tuple[str, ...] = (*_AUDIT_MODELS, "envelope")


@dataclass(frozen=True)
class SchemaEntry:
    kind: str
    version: int
    schema: Any  # parsed (fastavro) schema
    fingerprint: bytes  # 8 bytes, little-endian, as written after the marker


def _load_registry() -> tuple[dict[bytes, SchemaEntry], dict[str, SchemaEntry]]:
    registry: dict[bytes, SchemaEntry] = {}
    latest: dict[str, SchemaEntry] = {}
    for path in sorted(SCHEMA_DIR.glob("*.avsc")):
        match = _FILE_NAME.match(path.name)
        if match is None:
            raise RuntimeError(f"{path}: expected a name like message.v1.avsc")
        kind, version = match["kind"], int(match["version"])
        parsed = parse_schema(json.loads(path.read_text()))
        # fastavro gives CRC-64-AVRO as the hex of the little-endian bytes.
        fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
        entry = SchemaEntry(kind, version, parsed, fp)
        if fp in registry:
            raise RuntimeError(f"{path}: same canonical form as {registry[fp].kind}")
        registry[fp] = entry
        if kind not in latest or latest[kind].version < version:
            latest[kind] = entry
    missing = set(KINDS) - latest.keys()
    if missing:
        raise RuntimeError(f"no Avro schema for {sorted(missing)} in {SCHEMA_DIR}")
    return registry, latest


REGISTRY, LATEST = _load_registry()


def record_kind(record: Record) -> str:
    """The kind a record is written as, also carried in the Kafka header `KIND_HEADER`."""
    if isinstance(record, GraphEnvelope):
        return "envelope"
    return record.kind


def record_id(record: Record) -> str:
    return str(record.id)


def json_text(value: Any) -> str:
    """JSON as the records carry it: compact, non-ASCII kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# The bytes JSON nests with, and the quotes that tell strings apart; all others go.
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'"[{]}')))
_BRACKET_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_PASSES = 16


def json_depth(text: bytes) -> int:
    """The deepest nesting of arrays and objects in UTF-8 JSON text, without parsing it.

    Exact for valid JSON. For invalid JSON it is at least the depth a parser reaches
    before it stops at the first error (the prefix it read is valid, and tokenized here
    the same way), so bounding it bounds `json.loads`. Every loop runs in C: escapes are
    dropped (backslashes pair left to right, as in a string), then all but quotes and
    brackets, then the strings: as adjacent quotes when none holds a bracket (the common
    case), else what lies between a quote and the next.
    """
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    skeleton = text.translate(None, _NOT_STRUCTURE)
    if b'"' in skeleton:
        # Left to right, '""' pairs each string's quotes unless one holds a bracket, and
        # then a quote is left over.
        bare = skeleton.replace(b'""', b"")
        skeleton = bare if b'"' not in bare else b"".join(skeleton.split(b'"')[::2])
    steps = skeleton.translate(_BRACKET_STEPS)  # +1 per opening, -1 per closing
    # Balanced and shallow (nearly all text): each pass drops every innermost pair, one
    # level, so the passes that empty it are its depth. Else the running sum's maximum.
    rest = steps
    for depth in range(_PASSES):
        if not rest:
            return depth
        shorter = rest.replace(b"\x01\xff", b"")
        if len(shorter) == len(rest):
            break
        rest = shorter
    return max(0, max(accumulate(array("b", steps)), default=0))


def _check_depth(raw: bytes, limit: int, what: str, outer: int = 0) -> None:
    """DecodeError when the JSON in `raw` nests deeper than `limit` below its `outer`
    levels (1 for a whole JSON envelope, whose payload sits in its object)."""
    # Counting brackets is enough for nearly every record: no more than `limit` in all
    # cannot nest deeper. Only records with more get measured exactly.
    if raw.count(b"[") + raw.count(b"{") > limit + outer:
        depth = json_depth(raw) - outer
        if depth > limit:
            raise DecodeError(
                f"{what} nests arrays and objects {depth} levels deep; records are read "
                f"to at most {limit} levels"
            )


def _payload_json(envelope_id: str, payload: Any) -> str:
    """An envelope's payload as JSON text for a log record: RecordTooDeepError when it
    nests deeper than readers read (`MAX_JSON_DEPTH`)."""
    try:
        text = json_text(payload)
    except RecursionError:  # deeper than Python's recursion limit, far past the bound
        raise RecordTooDeepError(
            f"envelope {envelope_id}: payload nests too deep to encode; records hold JSON "
            f"nested at most {MAX_JSON_DEPTH} levels"
        ) from None
    if text.count("[") + text.count("{") > MAX_JSON_DEPTH:
        depth = json_depth(text.encode())
        if depth > MAX_JSON_DEPTH:
            raise RecordTooDeepError(
                f"envelope {envelope_id}: payload nests arrays and objects {depth} levels "
                f"deep; records hold JSON nested at most {MAX_JSON_DEPTH} levels"
            )
    return text


_json_text = json_text


# The envelope schema is six strings (trace_id nullable), the record on every lifecycle
# event and graph command: it is written and read here directly, byte for byte what
# fastavro gives (tests check both ways), since fastavro's per-call set-up costs more than
# the encoding itself. A future envelope schema of another shape goes through fastavro.
_ENVELOPE_FIELDS = ["id", "namespace", "type", "ts", "trace_id", "payload"]
_FAST_ENVELOPE: SchemaEntry | None = (
    LATEST["envelope"]
    if [f["name"] for f in LATEST["envelope"].schema["fields"]] == _ENVELOPE_FIELDS
    and [f["type"] for f in LATEST["envelope"].schema["fields"]]
    == ["string"] * 4 + [["null", "string"], "string"]
    else None
)


def _write_str(out: bytearray, text: str) -> None:
    data = text.encode()
    n = len(data) << 1  # zigzag of a non-negative length
    if n <= 0x7F:  # most strings: a length of one byte
        out.append(n)
        out += data
        return
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    out += data


def encode_envelope_fields(
    id: str, namespace: str, type: str, ts: str, trace_id: str | None, payload_json: str
) -> bytes:
    """The record bytes of an envelope given its fields, the payload as JSON text."""
    entry = _FAST_ENVELOPE
    if entry is None:
        body = {
            "id": id,
            "namespace": namespace,
            "type": type,
            "ts": ts,
            "trace_id": trace_id,
            "payload": payload_json,
        }
        return _fastavro_bytes(LATEST["envelope"], body)
    out = bytearray(MAGIC)
    out += entry.fingerprint
    _write_str(out, id)
    _write_str(out, namespace)
    _write_str(out, type)
    _write_str(out, ts)
    if trace_id is None:
        out.append(0)
    else:
        out.append(2)  # union branch 1, zigzag
        _write_str(out, trace_id)
    _write_str(out, payload_json)
    return bytes(out)


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[pos]  # IndexError when truncated
        pos += 1
        n |= (b & 0x7F) << shift
        if b < 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def _read_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    size, pos = _read_long(data, pos)
    end = pos + size
    if size < 0 or end > len(data):
        raise ValueError(f"string of {size} bytes at {pos} past the end ({len(data)})")
    return data[pos:end], end


def _read_str(data: bytes, pos: int) -> tuple[str, int]:
    size = data[pos]  # IndexError when truncated
    if size < 0x80 and not size & 1:  # most strings: a length of one byte, even (zigzag)
        end = pos + 1 + (size >> 1)
        if end <= len(data):
            return data[pos + 1 : end].decode(), end
    raw, pos = _read_bytes(data, pos)
    return raw.decode(), pos


def _decode_envelope_fast(data: bytes) -> dict[str, Any]:
    """The envelope's fields; its payload still as the UTF-8 bytes of its JSON text."""
    id_, pos = _read_str(data, HEADER_LEN)
    namespace, pos = _read_str(data, pos)
    type_, pos = _read_str(data, pos)
    ts, pos = _read_str(data, pos)
    branch, pos = _read_long(data, pos)
    if branch == 0:
        trace_id = None
    elif branch == 1:
        trace_id, pos = _read_str(data, pos)
    else:
        raise ValueError(f"union branch {branch} of ['null', 'string']")
    payload, pos = _read_bytes(data, pos)
    if pos != len(data):
        raise DecodeError(f"envelope v{_FAST_ENVELOPE.version}: {len(data) - pos} trailing bytes")  # type: ignore[union-attr]
    return {
        "id": id_,
        "namespace": namespace,
        "type": type_,
        "ts": ts,
        "trace_id": trace_id,
        "payload": payload,
    }


def _fastavro_bytes(entry: SchemaEntry, body: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(entry.fingerprint)
    schemaless_writer(out, entry.schema, body)
    return out.getvalue()


# Audit events are written directly too, by writers compiled from their schemas at import:
# fastavro's per-call set-up (and the body dict it needs) cost more than the encoding, on
# every append. Only the field types the audit models hold are compiled, each as fastavro
# writes it (tests compare the bytes); a schema with any other type goes through fastavro.
_Writer = Callable[[bytearray, Any], None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _write_long(out: bytearray, value: int) -> None:
    n = (value << 1) ^ (value >> 63)  # zigzag (int64)
    while n > 0x7F:  # 7 bits a byte, low first, high bit set on all but the last
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_uuid(out: bytearray, value: Any) -> None:
    _write_str(out, str(value))  # fastavro's uuid logical type: str() of a UUID


def _write_micros(out: bytearray, value: datetime) -> None:
    # The models hold aware datetimes only; fastavro computes the same exact integer.
    _write_long(out, (value - _EPOCH) // _MICROSECOND)


def _optional(write: _Writer) -> _Writer:
    def write_optional(out: bytearray, value: Any) -> None:
        if value is None:
            out.append(0)
        else:
            out.append(2)  # union branch 1, zigzag
            write(out, value)

    return write_optional


def _array(write: _Writer) -> _Writer:
    def write_array(out: bytearray, values: Any) -> None:
        if values:
            _write_long(out, len(values))
            for value in values:
                write(out, value)
        out.append(0)  # the end of the (only) block

    return write_array


F = TypeVar("F")  # a field's writer or reader


class _FieldCodec(NamedTuple, Generic[F]):
    """How one direction (writing, reading) handles each field type the audit models use."""

    string: F
    uuid: F
    micros: F
    array: Callable[[F], F]
    optional: Callable[[F], F]


def _compile_field(schema: Any, codec: _FieldCodec[F]) -> F | None:
    """`codec`'s writer or reader for one field type, or None when it is not one the audit
    models use (shared by the writers and the readers, which must agree on the types)."""
    if schema == "string":
        return codec.string
    if isinstance(schema, dict):
        if schema == {"type": "string", "logicalType": "uuid"}:
            return codec.uuid
        if schema == {"type": "long", "logicalType": "timestamp-micros"}:
            return codec.micros
        if schema.get("type") == "array" and schema.keys() == {"type", "items"}:
            items = _compile_field(schema["items"], codec)
            return None if items is None else codec.array(items)
        return None
    if isinstance(schema, list) and len(schema) == 2 and schema[0] == "null":
        inner = _compile_field(schema[1], codec)
        return None if inner is None else codec.optional(inner)
    return None


_WRITING: _FieldCodec[_Writer] = _FieldCodec(
    _write_str, _write_uuid, _write_micros, _array, _optional
)


def _compile(schema: Any) -> _Writer | None:
    """A writer for one field type, or None when it is not one the audit models use."""
    return _compile_field(schema, _WRITING)


def _compile_record(entry: SchemaEntry) -> tuple[tuple[str, _Writer], ...] | None:
    fields = []
    for f in entry.schema["fields"]:
        write = _compile(f["type"])
        if write is None:
            return None
        fields.append((f["name"], write))
    return tuple(fields)


_FAST_AUDIT: dict[str, tuple[bytes, tuple[tuple[str, _Writer], ...]]] = {
    kind: (MAGIC + LATEST[kind].fingerprint, fields)
    for kind in _AUDIT_MODELS
    if (fields := _compile_record(LATEST[kind])) is not None
}


# Audit events are read directly too, for the same reason, by readers compiled from the
# newest schema of each kind (a record written with an older schema goes through fastavro,
# which resolves it). Each field is read into the type fastavro gives (a UUID, an aware
# datetime in UTC, a str), an array into the tuple pydantic makes of fastavro's list. The
# event is built without pydantic's validation when the only checks it would make hold
# (non-empty text and lists: `_AuditReader.need`), as validation with these types changes
# nothing; otherwise `model_validate` decides, and raises what it raised before. Tests
# compare both paths on valid and invalid bodies.
_Reader = Callable[[bytes, int], tuple[Any, int]]
_new_object = object.__new__
_set_attribute = object.__setattr__
_SAFE_UNKNOWN = SafeUUID.unknown


def _read_uuid(data: bytes, pos: int) -> tuple[UUID, int]:
    text, pos = _read_str(data, pos)
    # `UUID(text)` for the 32 hex digits it keeps once hyphens are dropped, built without
    # its checks (they find nothing more when int() reads those digits); any other form
    # through UUID itself.
    digits = text.replace("-", "")
    if len(digits) == 32:
        try:
            value = int(digits, 16)
        except ValueError:
            return UUID(text), pos
        made = _new_object(UUID)
        _set_attribute(made, "int", value)
        _set_attribute(made, "is_safe", _SAFE_UNKNOWN)
        return made, pos
    return UUID(text), pos


def _read_micros(data: bytes, pos: int) -> tuple[datetime, int]:
    micros, pos = _read_long(data, pos)
    return _EPOCH + timedelta(0, 0, micros), pos  # as fastavro reads it (microseconds=)


def _optional_reader(read: _Reader) -> _Reader:
    def read_optional(data: bytes, pos: int) -> tuple[Any, int]:
        branch = data[pos]
        if branch == 0:
            return None, pos + 1
        if branch == 2:  # union branch 1, zigzag
            return read(data, pos + 1)
        branch, pos = _read_long(data, pos)  # the same numbers, written in more bytes
        if branch == 0:
            return None, pos
        if branch == 1:
            return read(data, pos)
        raise ValueError(f"union branch {branch} of a two-branch union")

    return read_optional


def _array_reader(read: _Reader) -> _Reader:
    # A tuple: what pydantic makes of the list fastavro reads (the models hold tuples).
    def read_array(data: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
        items: list[Any] = []
        while True:
            count, pos = _read_long(data, pos)
            if count == 0:
                return tuple(items), pos
            if count < 0:  # a block that gives its size in bytes too
                count = -count
                _, pos = _read_long(data, pos)
            if count > len(data) - pos:  # every item takes a byte at least
                raise ValueError(f"array block of {count} items past the end")
            for _ in range(count):
                item, pos = read(data, pos)
                items.append(item)

    return read_array


_READING: _FieldCodec[_Reader] = _FieldCodec(
    _read_str, _read_uuid, _read_micros, _array_reader, _optional_reader
)


def _compile_reader(schema: Any) -> _Reader | None:
    """A reader for one field type (`_compile`'s types), or None for any other."""
    return _compile_field(schema, _READING)


@dataclass(frozen=True)
class _AuditReader:
    """How to read one kind's newest schema directly (`_direct_audit`)."""

    kind: str
    model: type[BaseEvent]
    fields: tuple[tuple[str, _Reader], ...]
    # The fields pydantic requires non-empty (min_length 1): text, and some tuples.
    need: tuple[str, ...]
    order: tuple[str, ...]  # the model's fields, in its order (its __dict__'s)
    fields_set: set[str]  # shared (`schemas.fields`): every field is given


def _min_length(info: Any) -> int:
    return max((getattr(m, "min_length", 0) or 0 for m in info.metadata), default=0)


def _audit_reader(kind: str) -> _AuditReader | None:
    model = _AUDIT_MODELS[kind]
    if model.__pydantic_decorators__.model_validators:
        return None  # a check across fields (an Erasure's): pydantic runs it
    fields = []
    for f in LATEST[kind].schema["fields"]:
        read = _compile_reader(f["type"])
        if read is None:
            return None
        fields.append((f["name"], read))
    names = [name for name, _ in fields]
    if set(model.model_fields) != {*names, "kind", "seq"}:
        return None
    minimums = {name: _min_length(model.model_fields[name]) for name in names}
    if any(m > 1 for m in minimums.values()):
        return None  # longer minimums are not what `_direct_audit` checks
    return _AuditReader(
        kind,
        model,
        tuple(fields),
        tuple(name for name, m in minimums.items() if m == 1),
        tuple(model.model_fields),
        shared_fields_set(set(model.model_fields)),
    )


# By the fingerprint of the schema each reads (the newest of its kind).
_AUDIT_READERS: dict[bytes, _AuditReader] = {
    LATEST[kind].fingerprint: reader
    for kind in _AUDIT_MODELS
    if (reader := _audit_reader(kind)) is not None
}


def _direct_audit(reader: _AuditReader, data: bytes, seq: int | None) -> BaseEvent:
    """The event `data` holds, read by `reader` (any error: the caller's to report)."""
    body: dict[str, Any] = {"kind": reader.kind, "seq": seq}
    pos = HEADER_LEN
    for name, read in reader.fields:
        body[name], pos = read(data, pos)
    if pos != len(data):
        raise ValueError("trailing bytes")
    if (seq is None or (type(seq) is int and seq >= 0)) and all(body[n] for n in reader.need):
        event = _new_object(reader.model)
        _set_attribute(event, "__dict__", {name: body[name] for name in reader.order})
        _set_attribute(event, "__pydantic_fields_set__", reader.fields_set)
        _set_attribute(event, "__pydantic_extra__", None)
        _set_attribute(event, "__pydantic_private__", None)
        return event
    return reader.model.model_validate(body)


def encode_record(record: Record, replaced: tuple[str, object] | None = None) -> bytes:
    """The record bytes of an event or envelope. An event's `seq` is the log's to give.
    `replaced`: (field, value), the bytes of the record with that field's value replaced
    (an audit event's `with_field`, an envelope's payload), without building that copy:
    an encrypted log writes each record's content sealed this way.

    Raises `RecordTooDeepError` for an envelope whose payload nests deeper than
    `MAX_JSON_DEPTH`, and `RecordTooLargeError` for a record over `MAX_DECODE_BYTES`
    (readers would reject both; the logs' own size limit, checked before, is lower).
    """
    if isinstance(record, GraphEnvelope):
        payload = record.payload
        if replaced is not None:
            if replaced[0] != "payload":
                raise ValueError(f"GraphEnvelope has no replaceable field {replaced[0]!r}")
            payload = replaced[1]
        data = encode_envelope_fields(
            record.id,
            record.namespace,
            record.type,
            record.ts,
            record.trace_id,
            _payload_json(record.id, payload),
        )
    elif (fast := _FAST_AUDIT.get(record.kind)) is not None:
        header, fields = fast
        out = bytearray(header)
        values = record.__dict__
        if replaced is not None:
            name, value = replaced
            if name not in values:  # as with_field refuses it
                raise ValueError(f"{type(record).__name__} has no field {name!r}")
            values = {**values, name: value}
        for name, write in fields:
            write(out, values[name])
        data = bytes(out)
    else:
        if replaced is not None:
            record = record.with_field(*replaced)
        body = dict(record.__dict__)
        body.pop("seq", None)
        body.pop("kind", None)
        data = _fastavro_bytes(LATEST[record.kind], body)
    if len(data) > MAX_DECODE_BYTES:
        raise RecordTooLargeError(
            f"{record_kind(record)} {record_id(record)}: {len(data)} bytes encoded; records "
            f"are read up to {MAX_DECODE_BYTES} bytes"
        )
    return data


def encode_event(event: BaseEvent) -> bytes:
    """`encode_record` for an audit event (the name the embedded log used first)."""
    return encode_record(event)  # type: ignore[arg-type]


def encode_envelope_json(envelope: GraphEnvelope) -> bytes:
    """The envelope as JSON bytes, exactly the form the TypeScript library writes."""
    return _json_text(envelope.to_json_dict()).encode()


def _decode_envelope_json(data: bytes, max_depth: int) -> GraphEnvelope:
    try:
        # Decoded here, not by json: it would guess UTF-16 from a NUL in the second byte.
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise DecodeError(f"record starts with '{{' but is not UTF-8 JSON: {exc}") from None
    _check_depth(data, max_depth, "JSON envelope: payload", outer=1)
    try:
        fields = json.loads(text)
    except ValueError as exc:
        raise DecodeError(f"record starts with '{{' but is not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise DecodeError("JSON record: expected an envelope object")
    for name in ("id", "namespace", "type", "ts"):
        if not isinstance(fields.get(name), str):
            raise DecodeError(f"JSON envelope: field {name!r} must be a string")
    trace_id = fields.get("trace_id")
    if trace_id is not None and not isinstance(trace_id, str):
        raise DecodeError("JSON envelope: field 'trace_id' must be a string or absent")
    unknown = fields.keys() - {"id", "namespace", "type", "ts", "trace_id", "payload"}
    if unknown:
        raise DecodeError(f"JSON envelope: unknown fields {sorted(unknown)}")
    return GraphEnvelope.model_construct(
        id=fields["id"],
        namespace=fields["namespace"],
        type=fields["type"],
        ts=fields["ts"],
        trace_id=trace_id,
        payload=fields.get("payload"),
    )


def decode_record(
    data: bytes, seq: int | None = None, *, max_depth: int = MAX_DECODE_DEPTH
) -> Record:
    """The event or envelope a record holds; audit events get `seq` (the log's position).

    Raises `DecodeError` naming why when the bytes are not a record this version reads,
    and only that, whatever the bytes: a record over `MAX_DECODE_BYTES`, or whose payload
    nests deeper than `max_depth`, is refused before it is parsed. The fold reads log
    records with `max_depth=MAX_JSON_DEPTH`, what writers allow.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError(f"expected record bytes, got {type(data).__name__}")
    if len(data) > MAX_DECODE_BYTES:
        raise DecodeError(
            f"record of {len(data)} bytes; records are read up to {MAX_DECODE_BYTES} bytes"
        )
    data = bytes(data)
    if data[:2] == SIGNED_MAGIC:
        # A signed record: the record it wraps (its signature is the fold's to check).
        data = split_signed(data).inner
    if data[:1] == b"{":
        return _decode_envelope_json(data, max_depth)
    if len(data) < HEADER_LEN or data[:2] != MAGIC:
        raise DecodeError(
            f"not an Avro single-object record (marker {data[:2].hex() or 'missing'}, "
            "expected c301) nor a JSON envelope"
        )
    fp = data[2:HEADER_LEN]
    direct = _AUDIT_READERS.get(fp)
    if direct is not None:
        try:
            return cast(AuditEvent, _direct_audit(direct, data, seq))
        except Exception:
            pass  # read again below: fastavro and pydantic say what is wrong, as before
    entry = REGISTRY.get(fp)
    if entry is None:
        raise DecodeError(f"unknown schema fingerprint {fp.hex()}")
    return _decode_avro(entry, data, seq, max_depth)


def _decode_avro(entry: SchemaEntry, data: bytes, seq: int | None, max_depth: int) -> Record:
    """`decode_record` of an Avro record written with `entry`'s schema, by the general
    path: fastavro (resolving it to the newest schema), then pydantic."""
    reader = LATEST[entry.kind].schema
    try:
        if entry is _FAST_ENVELOPE:
            body = _decode_envelope_fast(data)
            rest = 0
        else:
            stream = io.BytesIO(data)
            stream.seek(HEADER_LEN)
            # fastavro types any datum; a record schema reads a dict
            body = cast(dict[str, Any], schemaless_reader(stream, entry.schema, reader))
            rest = len(data) - stream.tell()
    except DecodeError:
        raise
    except Exception as exc:  # fastavro raises many types on truncated or bad bodies
        raise DecodeError(
            f"{entry.kind} v{entry.version}: Avro body unreadable: {type(exc).__name__}: {exc}"
        ) from None
    if rest:
        raise DecodeError(f"{entry.kind} v{entry.version}: {rest} trailing bytes")
    if entry.kind == "envelope":
        raw = body["payload"]
        try:
            if isinstance(raw, str):  # read by fastavro (an envelope schema of another shape)
                text, raw = raw, raw.encode()
            else:
                text = raw.decode()
            _check_depth(raw, max_depth, f"envelope {body['id']}: payload")
            payload = json.loads(text)
        except DecodeError:
            raise
        except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
            raise DecodeError(f"envelope {body['id']}: payload is not JSON: {exc}") from None
        body["payload"] = payload
        return GraphEnvelope.model_construct(**body)
    body["kind"] = entry.kind
    body["seq"] = seq
    try:
        return _AUDIT_MODELS[entry.kind].model_validate(body)  # type: ignore[return-value]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise DecodeError(f"{entry.kind} record: {where}: {first['msg']}") from None


def decode_event(data: bytes, seq: int) -> AuditEvent:
    """The audit event a record holds, at `seq`; DecodeError for any other record."""
    record = decode_record(data, seq)
    if isinstance(record, GraphEnvelope):
        raise DecodeError(f"seq {seq}: expected an audit event, got an envelope")
    return record
