"""Sealing and opening the content of records, with a log's key store.

`seal_record` gives the copy of a message or document to store: its content field sealed
(`schemas.crypto.envelope`) under a fresh data key wrapped by its subject's key (the
subject by `schemas.crypto.subjects.subject_of`), or by a key of its own when the event has
a `retain_until` (so retention can erase it alone). `open_record` gives back the readable
event: the plaintext, or `ERASED` when the key is gone. Other records pass unchanged; an
Erasure read from the log makes this process forget its subject's cached keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from projector.record_fold import LogState
from schemas.audit import ERASED, Document, Erasure, Message
from schemas.codec import decode_record, encode_record
from schemas.crypto.envelope import SealedError, is_sealed, open_sealed, parse, seal
from schemas.crypto.subjects import CONTENT_FIELD, subject_of
from schemas.evidence.merkle import leaf_hash
from schemas.limits import MAX_RECORD_BYTES, check_record_size
from schemas.records import Record

__all__ = [
    "KeyStore",
    "seal_record",
    "seal_encoded",
    "open_record",
    "sealed_key_id",
    "check_receipt",
]


class KeyStore(Protocol):
    def key(self, key_id: str) -> bytes | None: ...

    def key_for(self, subject: str, event_id: str | None = None) -> tuple[str, bytes]: ...

    def forget_subject(self, subject: str) -> None: ...


def seal_record(keys: KeyStore, record: Record) -> Record:
    """The record as an encrypted log stores it."""
    if not isinstance(record, Message | Document):
        return record
    field = CONTENT_FIELD[record.kind]
    own = str(record.id) if record.retain_until is not None else None
    key_id, key = keys.key_for(subject_of(record), own)
    token = seal(getattr(record, field), event_id=record.id, field=field, key_id=key_id, key=key)
    return record.model_copy(update={field: token})


def seal_encoded(
    keys: KeyStore,
    records: Sequence[Record],
    encoded: list[bytes],
    check_erasure: Callable[[Erasure], None],
) -> list[bytes]:
    """The stored bytes of an encrypted log's `records` (`encoded` as written unsealed):
    content sealed (`seal_record`), each Erasure first passed to `check_erasure` (which
    raises unless the receipt tells the truth). Shared by both logs.
    `RecordTooLargeError` when sealing grows a record past the limit."""
    out = list(encoded)
    for i, record in enumerate(records):
        if type(record) is Erasure:
            check_erasure(record)
        sealed = seal_record(keys, record)
        if sealed is not record:
            data = out[i] = encode_record(sealed)
            if len(data) > MAX_RECORD_BYTES:
                check_record_size(record, data)  # sealed, it grew past the limit
    return out


def sealed_key_id(record: Record) -> str | None:
    """The id of the key a stored record's content is sealed under (None: not sealed)."""
    if not isinstance(record, Message | Document):
        return None
    value = getattr(record, CONTENT_FIELD[record.kind])
    if not is_sealed(value):
        return None
    return parse(value).key_id


def open_record(keys: KeyStore, record: Record) -> Record:
    """The readable record; SealedError when a sealed value is malformed or does not open
    with the key it names (the stored bytes were changed)."""
    if isinstance(record, Erasure):
        keys.forget_subject(record.subject)
        return record
    if not isinstance(record, Message | Document):
        return record
    field = CONTENT_FIELD[record.kind]
    value = getattr(record, field)
    if not is_sealed(value):
        return record  # written before the log was encrypted (reencrypt copies none such)
    sealed = parse(value)
    key = keys.key(sealed.key_id)
    if key is None:
        plain = ERASED
    else:
        plain = open_sealed(sealed, event_id=record.id, field=field, key=key)
    return record.model_copy(update={field: plain})


def check_receipt(
    keys: KeyStore,
    state: LogState,
    receipt: Erasure,
    stored_records: Callable[[Sequence[int]], dict[int, bytes]],
) -> None:
    """Refuse (ValueError) an Erasure that does not tell the truth, before it is appended:
    each event it names must be in `state`, its leaf hash that of its stored record, and
    the key its content is sealed under destroyed already (every log runs this check on
    every Erasure it is given to append, `Memory.erase`'s own included)."""
    seqs = []
    for target in receipt.erased:
        event = state.memory.get(target)
        if event is None or event.seq is None:
            raise ValueError(f"erasure {receipt.id}: unknown event {target}")
        seqs.append(event.seq)
    stored = stored_records(seqs)
    for target, seq, claimed in zip(receipt.erased, seqs, receipt.leaf_hashes, strict=True):
        data = stored.get(seq)
        if data is None:
            raise ValueError(
                f"erasure {receipt.id}: the record of event {target} (seq {seq}) is not in the log"
            )
        if leaf_hash(data).hex() != claimed:
            raise ValueError(
                f"erasure {receipt.id}: leaf_hashes: {claimed} is not the leaf hash of "
                f"event {target} (seq {seq})"
            )
        key_id = sealed_key_id(decode_record(data))
        if key_id is not None and keys.key(key_id) is not None:
            raise ValueError(
                f"erasure {receipt.id}: the key of event {target} is not destroyed; "
                "erase with Memory.erase, which destroys it in the same transaction"
            )


__all__ += ["SealedError"]
