"""Erasure inside an append-only log (crypto-shredding), and retention by erasure.

`erase_subject` destroys a data subject's keys and appends an `Erasure` receipt in ONE
transaction of the log: the receipt names the subject, the events made unreadable and the
Merkle leaf hashes of their stored records (`schemas.evidence.merkle.leaf_hash`), never
their content. The stored records (ciphertext) do not change, so the Merkle tree and every
proof over them still verify. The fold reads the receipt and drops the erased content and
its words from the state (`projector.audit.state`), so what an erasure did is in the log.

`sweep_retention` erases, as audited Erasures with the reason ``retention period
elapsed``, every content event whose `retain_until` has passed at `now` (a clock the
caller gives): each such event was sealed under a key of its own, so it is erased alone.
A sweep runs in one log transaction (the log's write lock), so sweeps from several
processes at once erase each event once, and a sweep that finds nothing appends nothing.

Only an encrypted log can erase (`Memory(location, encrypt=True)`; `memstream reencrypt`
copies an older log into one): the embedded log keeps its keys in its own file
(`producers.keys.sqlite_keys`), a Kafka log in the compacted topic ``LOG.keys``
(`producers.keys.kafka_keys`). The embedded log destroys the keys and appends the receipt in
one transaction; Kafka has no transaction across the two topics, so there the keys are
destroyed first (acknowledged): the subject's shared key before the log is read for the
receipt (so that writers in other processes stop sealing under it before the receipt's
state is taken), its events' own keys with the receipt's build; then the receipt is
appended. An erase that fails in between leaves the content unreadable without its
receipt, and the next `erase` of the subject appends the receipt (events not named by any
receipt are erased again, their keys gone already).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from typing import Protocol

from producers.keys.cipher import (
    KeyStore,
    erased_items,
    sealed_key_id,
    sealed_values,
    stored_record,
)
from producers.logs.base import Log
from projector.record_fold import LogState
from schemas.audit import Document, Erasure, Message, utc_now
from schemas.codec import decode_record
from schemas.crypto.envelope import SealedError, is_sealed, parse
from schemas.crypto.graph_content import ERASE_CONTENT, subject_of_item
from schemas.crypto.graph_erasure import GraphErasure
from schemas.crypto.subjects import subject_of
from schemas.errors import EncryptionError, UnknownSubjectError
from schemas.evidence.merkle import leaf_hash
from schemas.graph.ids import uuid7
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope, Record

__all__ = [
    "RETENTION_REASON",
    "RETENTION_REQUESTER",
    "ErasingLog",
    "erasing_log",
    "erase_subject",
    "sweep_retention",
]

log = logging.getLogger("memstream.producers.erasure")

RETENTION_REASON = "retention period elapsed"
RETENTION_REQUESTER = "memstream retention"


class SubjectKeys(KeyStore, Protocol):
    """What erasure needs of a log's key store (the SQLite table, the Kafka topic)."""

    def shared_key_id(self, subject: str) -> str | None: ...

    def existing(self, key_ids: Iterable[str]) -> list[str]: ...

    def shared_key_ids(self, key_ids: Iterable[str]) -> set[str]: ...

    def delete(self, key_ids: Iterable[str]) -> int: ...


class ErasingLog(Log, Protocol):
    """A log that encrypts: its key store, its stored bytes, and a purge of old copies."""

    keys: SubjectKeys | None

    def stored_records(self, seqs: list[int]) -> dict[int, bytes]: ...

    def purge(self) -> bool: ...


def erasing_log(target: Log) -> ErasingLog:
    """`target` as a log that can erase; `EncryptionError` naming why it cannot."""
    location = getattr(target, "location", "?")
    if not hasattr(target, "stored_records") or not hasattr(target, "keys"):
        raise EncryptionError(
            f"log {location}: erasure needs an encrypted log (an embedded or Kafka log "
            "opened with encrypt=True)"
        )
    if target.keys is None:
        raise EncryptionError(
            f"log {location}: written without encryption, so its content cannot be erased; "
            "copy it into a new encrypted log with `memstream reencrypt SRC DST`"
        )
    return target  # type: ignore[return-value]


def _exclusive(target: ErasingLog, what: str) -> AbstractContextManager[None]:
    """The log's erasure lock where it needs one (Kafka: erases and sweeps of several
    processes one after the other); the embedded log's transaction is one already."""
    exclusive = getattr(target, "exclusive", None)
    return nullcontext() if exclusive is None else exclusive(what)


def _content(state: LogState) -> Iterator[Message | Document]:
    memory = state.memory
    erased = memory.erased_ids
    content: list[Message | Document] = [*memory.messages, *memory.documents]
    for event in sorted(content, key=lambda e: e.seq or 0):
        if event.id not in erased:
            yield event


def _receipt(
    subject: str,
    events: list[Message | Document],
    reason: str,
    requested_by: str | None,
    actor: str | None,
    timestamp: datetime,
    stored: dict[int, bytes],
) -> Erasure:
    """The receipt of erasing `events`, whose stored records are `stored` (by seq)."""
    return Erasure(
        timestamp=timestamp,
        subject=subject,
        erased=tuple(e.id for e in events),
        leaf_hashes=tuple(leaf_hash(stored[e.seq]).hex() for e in events),  # type: ignore[index]
        reason=reason,
        requested_by=requested_by,
        actor=actor,
        source="memstream",
    )


def _unreadable_keys(state: LogState, subject: str, keys: KeyStore) -> set[str]:
    """The keys, destroyed already, of values that `subject`'s items still hold sealed: no
    receipt named them (a Kafka erase that failed between destroying the key and appending
    the receipt). A reader folds a value sealed when its key is gone, so they show here.
    A value that only looks sealed (a user's text, or a copy of a sealed value whose key
    lives) names no key here."""
    found: set[str] = set()
    for item in state.graph.items.values():
        if subject_of_item(item) != subject:
            continue
        for value in item.content.values():
            if isinstance(value, str) and is_sealed(value):
                try:
                    key_id = parse(value).key_id
                except SealedError:
                    continue
                if key_id not in found and keys.key(key_id) is None:
                    found.add(key_id)
    return found


def _graph_content(
    erasing: ErasingLog, key_ids: set[str], state: LogState
) -> tuple[list[int], dict[int, bytes], list[str]]:
    """The seqs and stored bytes of the graph records of `state`'s log holding content
    sealed under one of `key_ids`, and the items whose content it is (in log order, each once):
    the items the records name, and the copies of imported ones an import made under new
    ids (`erased_items`) that `state` holds.

    A scan of the log: a graph item's content is found by the key that sealed it, whatever
    its item's subject became since, so an erasure never misses content of its subject. The
    key id is in a sealed value's text, so only records holding one are decoded (0.3 s for
    100,000 records of an embedded log, measured); a log without graph records is not
    scanned."""
    seqs: list[int] = []
    stored: dict[int, bytes] = {}
    items: dict[str, None] = {}
    last_seq = state.last_seq
    if last_seq is None or state.graph_seq is None:  # no record ever changed the graph
        return seqs, stored, []
    needles = [k.encode() for k in key_ids]
    held = state.graph.items
    for seq, data in erasing.records(0, timeout=30.0):
        if data is not None and any(needle in data for needle in needles):
            record = stored_record(data)
            if type(record) is GraphEnvelope:
                named = {slot.item_id for slot, _, k in sealed_values(record) if k in key_ids}
                found = erased_items(record, key_ids.__contains__)
                if found:
                    seqs.append(seq)
                    stored[seq] = data
                    items.update(dict.fromkeys(i for i in found if i in named or i in held))
        if seq >= last_seq:
            break
    return seqs, stored, list(items)


def _graph_receipt(
    subject: str,
    found: tuple[list[int], dict[int, bytes], list[str]],
    reason: str,
    requested_by: str | None,
    erasure: Erasure | None,
    timestamp: datetime,
) -> tuple[GraphEnvelope, GraphErasure]:
    seqs, stored, items = found
    receipt = GraphErasure(
        subject=subject,
        items=tuple(items),
        seqs=tuple(seqs),
        leaf_hashes=tuple(leaf_hash(stored[seq]).hex() for seq in seqs),
        reason=reason,
        requested_by=requested_by,
        erasure_id=erasure.id if erasure is not None else None,
    )
    ts = timestamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    envelope = GraphEnvelope(
        id=uuid7(),
        namespace=OPERATION_NAMESPACE,
        type=ERASE_CONTENT,
        ts=ts,
        payload=receipt.to_payload(),
    )
    return envelope, receipt


def erase_subject(
    target: Log,
    subject: str,
    reason: str,
    *,
    requested_by: str | None = None,
    actor: str | None = None,
    now: datetime | None = None,
) -> Erasure | GraphErasure:
    """Destroy `subject`'s keys and append its receipt, atomically: an `Erasure` naming
    its audit events, and with it a ``memstream.erase_content`` envelope (`GraphErasure`)
    naming the graph items whose content its key sealed. The stored `Erasure`, or the
    `GraphErasure` when the subject had graph content only.

    `UnknownSubjectError` when the log holds no readable content of `subject` (unknown, or
    erased already) and `EncryptionError` for a log that does not encrypt: nothing is
    appended.
    """
    erasing = erasing_log(target)
    keys = erasing.keys
    assert keys is not None
    if not isinstance(subject, str) or not subject:
        raise ValueError(f"subject: expected a non-empty string, got {subject!r}")
    if not isinstance(reason, str) or not reason:
        raise ValueError(f"reason: expected a non-empty string, got {reason!r}")

    # Kafka: no transaction across the log and its key store (see the module docstring).
    apart = hasattr(erasing, "exclusive")

    shared_before: str | None = None

    def build(state: LogState) -> tuple[list[Record], Erasure | GraphErasure]:
        at = now or utc_now()
        # The graph's content of the subject: sealed under its shared key (on Kafka
        # destroyed already, before this state was read).
        graph_keys = _unreadable_keys(state, subject, keys)
        graph_key = shared_before if apart else keys.shared_key_id(subject)
        if graph_key is not None:
            graph_keys.add(graph_key)
        graph = _graph_content(erasing, graph_keys, state) if graph_keys else ([], {}, [])
        events = [e for e in _content(state) if subject_of(e) == subject]
        seqs: list[int] = [e.seq for e in events]  # type: ignore[misc]
        stored = erasing.stored_records(seqs) if events else {}
        # The keys the subject's records are sealed under (its shared key, and the keys of
        # its events that have one of their own), and its shared key if no record names it.
        named = [sealed_key_id(decode_record(stored[seq])) for seq in seqs]
        if apart:
            # The shared key this erase destroyed is gone; a shared key alive now was made
            # after, by a writer that read the tombstone: its events came after the erase
            # and stay readable, so they are neither named nor their key destroyed.
            alive = keys.existing([k for k in named if k is not None])
            newer = keys.shared_key_ids(alive)
            kept = [i for i, k in enumerate(named) if k not in newer]
            events = [events[i] for i in kept]
            key_ids = [k for k in alive if k not in newer]
        else:
            shared = keys.shared_key_id(subject)
            key_ids = keys.existing([k for k in (*named, shared) if k is not None])
        # Events whose keys are gone already and that no receipt names (an erase on Kafka
        # that failed between destroying the keys and appending the receipt) are named by
        # this receipt: it tells the truth, they are unreadable.
        if not events and not graph[0]:
            raise UnknownSubjectError(
                f"log {erasing.location}: erase refused: no readable content of data subject "
                f"{subject!r} (unknown, or erased already); nothing was appended"
            )
        records: list[Record] = []
        erasure = None
        if events:
            erasure = _receipt(subject, events, reason, requested_by, actor, at, stored)
            records.append(erasure)
        if graph[0]:
            if not apart and graph_key not in key_ids:
                key_ids.append(graph_key)  # type: ignore[arg-type]
            envelope, graph_receipt = _graph_receipt(
                subject, graph, reason, requested_by, erasure, at
            )
            records.append(envelope)
        keys.delete(key_ids)  # in this transaction: undone if the append fails
        return records, erasure if erasure is not None else graph_receipt

    with _exclusive(erasing, "erase"):
        if apart:
            # Kafka: the subject's shared key is destroyed BEFORE the state the receipt is
            # built from is read. Destroyed inside `build` (after that read), every record
            # another process appended meanwhile, sealed under the live key, became
            # unreadable without being named by the receipt (5-10 per erase in the racing
            # test). Now a writer's next append reads the tombstone and seals under a new
            # key; what it appended before lands before the receipt's state is read, and is
            # named. Left: a record already in flight when the tombstone lands.
            shared_before = keys.shared_key_id(subject)
            if shared_before is not None:
                keys.delete([shared_before])
        appended, receipt = erasing.transact(build)
    erasing.purge()
    first = appended[0].record
    return first if isinstance(first, Erasure) else receipt


def sweep_retention(target: Log, now: datetime | None = None) -> list[Erasure]:
    """Erase every content event whose `retain_until` is at or before `now` (default: the
    clock), one Erasure per subject; the stored Erasures (none: nothing was due)."""
    erasing = erasing_log(target)
    keys = erasing.keys
    assert keys is not None
    at = now or utc_now()

    def build(state: LogState) -> tuple[list[Erasure], list[Erasure]]:
        due = [e for e in _content(state) if e.retain_until is not None and e.retain_until <= at]
        if not due:
            return [], []
        stored = erasing.stored_records([e.seq for e in due])  # type: ignore[misc]
        key_of: dict[int, str] = {}
        for event in due:
            key_id = sealed_key_id(decode_record(stored[event.seq]))  # type: ignore[index]
            if key_id is None:
                log.warning("retention: event %s is not sealed; it cannot be erased", event.id)
                continue
            key_of[event.seq] = key_id  # type: ignore[index]
        shared = keys.shared_key_ids(key_of.values())
        by_subject: dict[str, list[Message | Document]] = {}
        for event in due:
            key_id = key_of.get(event.seq)  # type: ignore[arg-type]
            if key_id is None or key_id in shared:
                if key_id in shared:
                    log.warning("retention: event %s shares its subject's key", event.id)
                continue
            by_subject.setdefault(subject_of(event), []).append(event)
        receipts = [
            _receipt(subject, events, RETENTION_REASON, RETENTION_REQUESTER, None, at, stored)
            for subject, events in by_subject.items()
        ]
        keys.delete(key_of[e.seq] for events in by_subject.values() for e in events)  # type: ignore[index]
        return receipts, receipts

    with _exclusive(erasing, "retention sweep"):
        appended, _ = erasing.transact(build)
    if appended:
        erasing.purge()
    return [a.record for a in appended]  # type: ignore[misc]
