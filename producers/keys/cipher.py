"""Sealing and opening the content of records, with a log's key store.

`encode_sealed` gives the bytes of a record to store:

- a message or document: its content field sealed (`schemas.crypto.envelope.seal`)
  under its subject's shared key (the subject by `schemas.crypto.subjects.subject_of`),
  or under a key of its own when it is its own subject or has a `retain_until` (so
  retention can erase it alone);
- a graph envelope: each value of each item's ``content`` it carries
  (`schemas.crypto.graph_content`) sealed, as canonical JSON, under the shared key of the
  item's subject (`item_subject`; an update: the subject of the item it updates), with
  `seal_convergent`, so that a fold without keys compares items as a reader does. An item
  that holds values in the wrapped form (logs written before 7 December; the key store
  notes each such item as its values are opened, `wrapped_items`) gets its new values in
  that form too (`seal_wrapped`): equal plaintexts of the item then still seal alike,
  which is what the comparison needs;
- any other record as it is.

The sealed copy is never built: its bytes are encoded with the sealed values in place
(`schemas.codec.encode_record`'s ``replaced``).

`open_record` gives back the readable record: the plaintext, or `ERASED` when the key is
gone. Other records pass unchanged; an Erasure read from the log makes this process forget
its subject's cached keys. `check_receipt` refuses a receipt (either half) that does not
tell the truth.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from json.encoder import encode_basestring
from typing import Any, Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESGCMSIV

from projector.graph.state import GraphState
from projector.graph.transplant import reid_candidates
from projector.record_fold import LogState
from schemas.audit import ERASED, Document, Erasure, Message
from schemas.codec import decode_record, encode_record
from schemas.crypto.envelope import (
    CONVERGENT_PREFIX,
    WRAPPED_PREFIX,
    SealedError,
    is_sealed,
    open_convergent,
    open_sealed,
    parse,
    seal,
    seal_convergent,
    seal_wrapped,
)
from schemas.crypto.graph_content import (
    ContentSlot,
    binding,
    binding_prefix,
    content_binding,
    content_slots,
    is_erase_content,
    item_subject,
    map_content,
    map_payload,
    subject_of_item,
    value_at,
)
from schemas.crypto.graph_erasure import GraphErasure
from schemas.crypto.subjects import CONTENT_FIELD, EVENT_SUBJECT_PREFIX
from schemas.errors import DecodeError
from schemas.evidence.merkle import leaf_hash
from schemas.limits import check_record_sizes
from schemas.records import GraphEnvelope, Record
from schemas.signing import is_signed, split_signed

__all__ = [
    "KeyStore",
    "encode_sealed",
    "open_record",
    "sealed_key_id",
    "sealed_values",
    "erased_items",
    "stored_record",
    "check_receipt",
]


class KeyStore(Protocol):
    def key(self, key_id: str) -> bytes | None: ...

    def key_for(self, subject: str, event_id: str | None = None) -> tuple[str, bytes]: ...

    def own_key(self) -> tuple[str, bytes, AESGCM]: ...

    def sealer(self, subject: str) -> tuple[str, bytes, AESGCM]: ...

    def siv_sealer(self, subject: str) -> tuple[str, bytes, AESGCMSIV]: ...

    def context(self, key_id: str, key: bytes) -> AESGCM: ...

    def siv_context(self, key_id: str, key: bytes) -> AESGCMSIV: ...

    @property
    def wrapped_items(self) -> set[str]: ...

    def forget_subject(self, subject: str) -> None: ...


def _canonical(value: Any) -> str:
    # A string or an int (most values) as json.dumps writes it, without setting up an
    # encoder for each value.
    if type(value) is str:
        return encode_basestring(value)
    if type(value) is int:
        return int.__repr__(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class _Subjects:
    """The subject of each item a graph envelope's content belongs to, at the seal: a
    create's or an imported item's from the item itself; an update's from the item it
    updates, created earlier in the same append or found in the state."""

    def __init__(self, graph: GraphState | None) -> None:
        self.graph = graph
        self.created: dict[str, str] = {}

    def of(self, slot: ContentSlot) -> str:
        if slot.subject is not None:
            if slot.item_id is not None:
                self.created.setdefault(slot.item_id, slot.subject)
            return slot.subject
        item_id = slot.item_id or ""
        subject = self.created.get(item_id)
        if subject is not None:
            return subject
        item = self.graph.items.get(item_id) if self.graph is not None else None
        if item is None:  # the fold refuses an update of an unknown item: any key will do
            return item_subject({"id": item_id})
        return subject_of_item(item)


def _sealed_payload(keys: KeyStore, envelope: GraphEnvelope, subjects: _Subjects) -> Any:
    """`envelope`'s payload with each content value sealed (the payload itself when it
    carries none): each content object's key and form taken once for all its values."""

    def sealer(slot: ContentSlot) -> Callable[[str, Any], str]:
        subject = subjects.of(slot)
        if slot.item_id is not None and slot.item_id in keys.wrapped_items:
            key_id, subject_key, context = keys.sealer(subject)

            def wrapped(key: str, value: Any) -> str:
                event_id, field = binding(slot, key)
                return seal_wrapped(
                    _canonical(value),
                    event_id=event_id,
                    field=field,
                    key_id=key_id,
                    key=subject_key,
                    context=context,
                )

            return wrapped
        key_id, subject_key, siv = keys.siv_sealer(subject)
        prefix = binding_prefix(slot)  # `content_binding`, the item's part made once
        return lambda key, value: seal_convergent(
            _canonical(value),
            binding=prefix + key.encode(),
            key_id=key_id,
            key=subject_key,
            context=siv,
        )

    return map_payload(envelope, sealer)


# A tuple, not the union: `isinstance` with `Message | Document` builds the union at each
# call and checks it more slowly (this runs on every encrypted append).
_CONTENT_EVENTS = (Message, Document)


def _sealed_content(keys: KeyStore, record: Message | Document) -> tuple[str, str]:
    """(field, sealed value) of a message's or document's content."""
    field = CONTENT_FIELD[record.kind]
    session = record.session_id
    if (
        record.retain_until is not None
        or session is None
        or session.startswith(EVENT_SUBJECT_PREFIX)
    ):
        # A key of its own (`key_for`'s rule, without building the subject's name).
        key_id, key, context = keys.own_key()
    else:
        key_id, key, context = keys.sealer(session)
    token = seal(
        getattr(record, field),
        event_id=record.id,
        field=field,
        key_id=key_id,
        key=key,
        context=context,
    )
    return field, token


def encode_sealed(
    keys: KeyStore,
    records: Sequence[Record],
    check_erasure: Callable[[Record], None],
    graph: GraphState | None = None,
) -> list[bytes]:
    """The bytes an encrypted log stores for `records` (see the module's docstring;
    `graph`: the graph at the seal, for an update's subject), each checked against the
    record size limit; each receipt (an Erasure, or its graph half) first passed to
    `check_erasure`, which raises unless it tells the truth. Shared by both logs."""
    subjects: _Subjects | None = None  # made for the first graph envelope
    out = []
    for record in records:
        if isinstance(record, _CONTENT_EVENTS):
            out.append(encode_record(record, _sealed_content(keys, record)))
            continue
        if type(record) is Erasure or is_erase_content(record):
            check_erasure(record)
        if type(record) is GraphEnvelope:
            if subjects is None:
                subjects = _Subjects(graph)
            out.append(encode_record(record, ("payload", _sealed_payload(keys, record, subjects))))
        else:
            out.append(encode_record(record))
    check_record_sizes(records, out)
    return out


def sealed_key_id(record: Record) -> str | None:
    """The id of the key a stored record's content is sealed under (None: not sealed)."""
    if not isinstance(record, _CONTENT_EVENTS):
        return None
    value = getattr(record, CONTENT_FIELD[record.kind])
    if not is_sealed(value):
        return None
    return parse(value).key_id


def sealed_values(envelope: GraphEnvelope) -> Iterator[tuple[ContentSlot, str, str]]:
    """(slot, content key, key id) of each sealed content value `envelope` carries."""
    for slot in content_slots(envelope):
        for key, value in value_at(envelope.payload, slot.path).items():
            if isinstance(value, str) and is_sealed(value):
                yield slot, key, parse(value).key_id


# How many of the ids an import could mint for a re-id'd item a receipt may name: the
# first is minted unless taken, the next ones only after clashes of 74 hashed bits.
REID_CANDIDATES = 4


def erased_items(
    envelope: GraphEnvelope, erased: Callable[[str], bool], reids: int = REID_CANDIDATES
) -> list[str]:
    """The items whose content `envelope` holds sealed under a key `erased` says is gone:
    each slot's item, and for an imported item the first `reids` ids an import re-id'ing
    it would mint (`reid_candidates`: the import decided at fold time whether it did, and
    the copy holds the same content)."""
    found: dict[str, None] = {}
    for slot, _, key_id in sealed_values(envelope):
        if slot.item_id is None or not erased(key_id):
            continue
        found[slot.item_id] = None
        if slot.path[:2] == ("slice", "memories") and reids:
            created_at = value_at(envelope.payload, slot.path[:-1]).get("created_at")
            try:
                candidates = reid_candidates(
                    slot.item_id, created_at if isinstance(created_at, int) else None
                )
                found.update(dict.fromkeys(islice(candidates, reids)))
            except ValueError:  # neither created_at nor a UUIDv7 id: never re-id'd
                pass
    return list(found)


def _open_value(keys: KeyStore, slot: ContentSlot, key: str, value: Any) -> Any:
    if not (isinstance(value, str) and is_sealed(value)):
        return value  # written before the log was encrypted
    sealed = parse(value)
    if sealed.form == WRAPPED_PREFIX and slot.item_id is not None:
        keys.wrapped_items.add(slot.item_id)  # its new values are sealed alike
    subject_key = keys.key(sealed.key_id)
    if subject_key is None:
        # Its key is destroyed: folded sealed, as the projector folds it. An import that
        # compares this item then decides as it did before the erasure (sealed values are
        # convergent: equal plaintexts, equal sealed texts), so a reader folding the log
        # after an erasure reaches the state readers reached before it. The erasure's
        # receipt, later in the log, turns the item's values into ERASED.
        return value
    if sealed.form == CONVERGENT_PREFIX:
        plain = open_convergent(
            sealed,
            binding=content_binding(slot, key),
            key=subject_key,
            context=keys.siv_context(sealed.key_id, subject_key),
        )
    else:
        event_id, field = binding(slot, key)
        plain = open_sealed(
            sealed,
            event_id=event_id,
            field=field,
            key=subject_key,
            context=keys.context(sealed.key_id, subject_key),
        )
    try:
        return json.loads(plain)
    except ValueError:
        raise SealedError(f"sealed content {key!r} of item {slot.item_id}: not JSON") from None


def open_record(keys: KeyStore, record: Record) -> Record:
    """The readable record; SealedError when a sealed value is malformed or does not open
    with the key it names (the stored bytes were changed)."""
    if isinstance(record, Erasure):
        keys.forget_subject(record.subject)
        return record
    if type(record) is GraphEnvelope:
        if is_erase_content(record) and isinstance(record.payload, Mapping):
            subject = record.payload.get("subject")
            if isinstance(subject, str):
                keys.forget_subject(subject)
            return record
        return map_content(record, lambda slot, key, value: _open_value(keys, slot, key, value))
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
        plain = open_sealed(
            sealed,
            event_id=record.id,
            field=field,
            key=key,
            context=keys.context(sealed.key_id, key),
        )
    return record.with_field(field, plain)


def stored_record(data: bytes) -> Record:
    """The record a stored record holds (a signed one's inner record)."""
    return decode_record(split_signed(data).inner if is_signed(data) else data)


def check_receipt(
    keys: KeyStore,
    state: LogState,
    receipt: Record,
    stored_records: Callable[[Sequence[int]], dict[int, bytes]],
) -> None:
    """Refuse (ValueError) a receipt that does not tell the truth, before it is appended
    (every log runs this check on every receipt it is given to append, `Memory.erase`'s
    own included).

    An `Erasure`: each event it names must be in `state`, its leaf hash that of its stored
    record, and the key its content is sealed under destroyed already. Its graph half
    (`GraphErasure`): each record it names must be a stored graph record with that leaf
    hash holding content sealed under a destroyed key, and each item it names must have
    such content in those records."""
    if type(receipt) is GraphEnvelope:
        _check_graph_receipt(keys, receipt, stored_records)
        return
    assert type(receipt) is Erasure
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
        key_id = sealed_key_id(stored_record(data))
        if key_id is not None and keys.key(key_id) is not None:
            raise ValueError(
                f"erasure {receipt.id}: the key of event {target} is not destroyed; "
                "erase with Memory.erase, which destroys it in the same transaction"
            )


def _check_graph_receipt(
    keys: KeyStore,
    envelope: GraphEnvelope,
    stored_records: Callable[[Sequence[int]], dict[int, bytes]],
) -> None:
    what = f"erasure {envelope.id} (graph content)"
    receipt = GraphErasure.model_validate(envelope.payload)  # a ValidationError is a ValueError
    stored = stored_records(receipt.seqs)
    erased: set[str | None] = set()
    for seq, claimed in zip(receipt.seqs, receipt.leaf_hashes, strict=True):
        data = stored.get(seq)
        if data is None:
            raise ValueError(f"{what}: seq {seq} is not in the log")
        if leaf_hash(data).hex() != claimed:
            raise ValueError(f"{what}: leaf_hashes: {claimed} is not the leaf hash of seq {seq}")
        try:
            record = stored_record(data)
        except DecodeError as exc:
            raise ValueError(f"{what}: seq {seq} does not decode: {exc}") from None
        if type(record) is not GraphEnvelope:
            raise ValueError(f"{what}: seq {seq} is not a graph record")
        gone = erased_items(record, lambda key_id: keys.key(key_id) is None)
        if not gone:
            raise ValueError(
                f"{what}: seq {seq} holds no content sealed under a destroyed key; erase with "
                "Memory.erase, which destroys it in the same transaction"
            )
        erased.update(gone)
    for item_id in receipt.items:
        if item_id not in erased:
            raise ValueError(
                f"{what}: item {item_id} has no content sealed under a destroyed key in the "
                "records named"
            )


__all__ += ["SealedError"]
