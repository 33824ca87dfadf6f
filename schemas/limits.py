"""Limits every log shares, so that the embedded file and Kafka accept the same records.

`MAX_RECORD_BYTES` bounds a record's encoded size (`schemas.codec.encode_record`). Both
logs check it before appending anything: a batch holding one record over it is refused
whole with `RecordTooLargeError`, and nothing of it is appended.

Why 960 KiB: every record under it must be one Kafka message the broker takes. librdkafka
refuses at `produce()` a message whose value, headers and record overhead pass the
producer's ``message.max.bytes`` (1,000,000, its default, which memstream sets explicitly),
and never sends a batch larger than that plus the 61-byte batch header (it sends a batch
uncompressed when compression would grow it); the broker's ``message.max.bytes`` and the
topic's ``max.message.bytes`` default to 1,048,588, which memstream sets on the topics it
creates and checks on a log a writer opens. 960 KiB leaves 16,960 bytes for the record's
overhead and the ``memstream.kind`` header (well under 100 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.codec import record_id, record_kind
from schemas.errors import RecordTooLargeError
from schemas.records import Record

__all__ = ["MAX_RECORD_BYTES", "check_record_size", "check_record_sizes"]

MAX_RECORD_BYTES = 960 * 1024


def check_record_size(record: Record, data: bytes) -> None:
    """Raise `RecordTooLargeError` when `data`, the record's encoding, is over the limit."""
    size = len(data)
    if size > MAX_RECORD_BYTES:
        raise RecordTooLargeError(
            f"{record_kind(record)} {record_id(record)}: its encoded size is {size:,} bytes, "
            f"over the limit of {MAX_RECORD_BYTES:,} bytes a record may have on any log; "
            "nothing of its batch was appended"
        )


def check_record_sizes(records: Sequence[Record], encoded: Sequence[bytes]) -> None:
    """`check_record_size` for each record of a batch and its encoding, in one C-level
    pass when none is over the limit."""
    if encoded and max(map(len, encoded)) > MAX_RECORD_BYTES:
        for record, data in zip(records, encoded, strict=True):
            check_record_size(record, data)
