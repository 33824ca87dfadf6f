"""Lifecycle events: what each folded record caused, and the bytes they are published as.

The fold (`projector.record_fold`) returns a record's lifecycle events beside the new state.
Their order and content are a function of the log alone, and so is their encoding here: the
envelope's id derives from (seq, index) and its ts from the cause's own time, so publishing
the same event twice gives the same bytes, and every reader can publish exactly once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from pydantic import BaseModel

from schemas.audit import BaseEvent, event_to_dict
from schemas.codec import MAX_DECODE_BYTES, encode_envelope_fields, json_text
from schemas.records import GraphEnvelope

__all__ = [
    "Lifecycle",
    "MAX_LIFECYCLE_BYTES",
    "lifecycle_envelope",
    "lifecycle_payload",
    "encode_lifecycle",
    "encode_full_lifecycle",
    "oversize_lifecycle",
]


class Lifecycle(NamedTuple):
    """One lifecycle event: the record (seq) that caused it, what happened, to what.

    ``subject`` is the event model (a graph lifecycle event, an audit event) or None;
    ``extra`` holds fields added beside it. `lifecycle_payload` makes the JSON payload.
    """

    seq: int
    namespace: str
    type: str
    subject: Any
    extra: Mapping[str, Any] | None = None


_EPOCH_TS = "1970-01-01T00:00:00.000Z"


def lifecycle_envelope(event: Lifecycle, index: int) -> GraphEnvelope:
    """The envelope a lifecycle event is published as: a function of the log alone.

    `index` is its position among its record's lifecycle events. The id is a UUID derived
    from (seq, index) and ts is the cause's own time, so publishing the same event twice
    gives the same bytes.
    """
    subject = event.subject
    if isinstance(subject, BaseEvent):
        ts = _ms_iso(subject.timestamp)
    else:
        ts = (event.extra or {}).get("cause_ts") or _EPOCH_TS
    return GraphEnvelope.model_construct(
        id=_lifecycle_id(event.seq, index),
        namespace=event.namespace,
        type=event.type,
        ts=ts,
        trace_id=None,
        payload=lifecycle_payload(event),
    )


_LIFECYCLE_NS = UUID("6d656d73-7472-6561-6d2e-6c6966656379")
_LIFECYCLE_NS_BYTES = _LIFECYCLE_NS.bytes


def _lifecycle_id(seq: int, index: int) -> str:
    """`str(uuid5(_LIFECYCLE_NS, f"{seq}:{index}"))` without building UUID objects."""
    digest = bytearray(hashlib.sha1(_LIFECYCLE_NS_BYTES + f"{seq}:{index}".encode()).digest())
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _ms_iso(when: datetime) -> str:
    """ISO-8601 in UTC to the millisecond, as the memex envelopes write `ts`."""
    if when.year < 1000:  # strftime's %Y does not pad those; keep its exact form
        return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    # The first 23 characters of isoformat: the fields as written, the offset dropped
    # (milliseconds truncated, as `// 1000` does).
    return when.isoformat(timespec="milliseconds")[:23] + "Z"


# A lifecycle event's encoding may be several times its record's (an audit event's Avro
# strings become JSON, where a control character takes six bytes). Over this bound, which
# every reader decodes, the event is published as `oversize_lifecycle` says.
MAX_LIFECYCLE_BYTES = MAX_DECODE_BYTES - 64 * 1024


def encode_lifecycle(event: Lifecycle, index: int) -> bytes:
    """The bytes the lifecycle event is published as: `encode_full_lifecycle`'s, or, when
    those are over `MAX_LIFECYCLE_BYTES`, `oversize_lifecycle`'s (the same id, namespace,
    type and ts; its payload says the event was left out, and names the record's seq, from
    which a reader of the log can fold it)."""
    data = encode_full_lifecycle(event, index)
    if len(data) > MAX_LIFECYCLE_BYTES:
        return oversize_lifecycle(event, index, len(data))
    return data


def oversize_lifecycle(event: Lifecycle, index: int, size: int) -> bytes:
    """The stand-in for a lifecycle event encoded in `size` bytes, too many to publish."""
    envelope = lifecycle_envelope(
        Lifecycle(event.seq, event.namespace, event.type, None, _cause_ts(event)), index
    )
    payload = {"omitted": {"bytes": size, "limit": MAX_LIFECYCLE_BYTES}, "seq": event.seq}
    return encode_envelope_fields(
        envelope.id, envelope.namespace, envelope.type, envelope.ts, None, json_text(payload)
    )


def _cause_ts(event: Lifecycle) -> dict[str, Any] | None:
    subject = event.subject
    if isinstance(subject, BaseEvent):
        return {"cause_ts": _ms_iso(subject.timestamp)}
    ts = (event.extra or {}).get("cause_ts")
    return {"cause_ts": ts} if ts else None


def encode_full_lifecycle(event: Lifecycle, index: int) -> bytes:
    """`encode_record(lifecycle_envelope(event, index))`, byte for byte, made directly.

    The projector publishes one of these per record; building the envelope model and the
    payload dict first, then JSON and Avro through the generic paths, costs several times
    more. Audit subjects are serialized by pydantic's JSON serializer (the same output as
    `json.dumps` of `model_dump(mode="json")`, compact, non-ASCII kept); the tests check
    both forms agree.
    """
    subject = event.subject
    if isinstance(subject, BaseEvent) and not event.extra:
        payload = f'{{"event":{subject.model_dump_json()},"seq":{event.seq}}}'
        ts = _ms_iso(subject.timestamp)
    else:
        envelope = lifecycle_envelope(event, index)
        return encode_envelope_fields(
            envelope.id,
            envelope.namespace,
            envelope.type,
            envelope.ts,
            None,
            json_text(envelope.payload),
        )
    return encode_envelope_fields(
        _lifecycle_id(event.seq, index), event.namespace, event.type, ts, None, payload
    )


def lifecycle_payload(event: Lifecycle) -> dict[str, Any]:
    """The JSON payload of a lifecycle event: the subject's fields, then the extras."""
    subject = event.subject
    payload: dict[str, Any]
    if subject is None:
        payload = {}
    elif isinstance(subject, BaseEvent):
        payload = {"event": event_to_dict(subject)}
    elif isinstance(subject, BaseModel):
        payload = subject.model_dump(mode="json", by_alias=True, exclude_none=True)
    else:
        payload = {"value": subject}
    if event.extra:
        for key, value in event.extra.items():
            if key == "cause_ts":
                continue
            if isinstance(value, BaseModel):
                value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
            elif is_dataclass(value) and not isinstance(value, type):
                value = asdict(value)  # an import report
            payload[key] = value
    payload["seq"] = event.seq
    return payload
