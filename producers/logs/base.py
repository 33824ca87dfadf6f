"""What the facades need of a log: its folded state, checked appends, and its records.

Every log (the embedded SQLite file, a Kafka topic) stores record bytes at dense seqs and
folds them with the one total fold, `projector.record_fold.fold_record`, so the embedded
default and the distributed mode cannot drift apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import NamedTuple, Protocol, TypeVar, runtime_checkable

from projector.authorship import LOG_SIGNED, AuthorshipError
from projector.lifecycle import Lifecycle, lifecycle_envelope
from projector.record_fold import LogState, check_records, empty_state, fold_record
from schemas.audit import BaseEvent, Deletion, Document, Message, Recall
from schemas.codec import encode_record
from schemas.evidence.note import NoteSigner
from schemas.limits import MAX_RECORD_BYTES, check_record_size, check_record_sizes
from schemas.records import GraphEnvelope, Record
from schemas.signing import sign_record

__all__ = [
    "Log",
    "PipelinedLog",
    "AuditLog",
    "Appended",
    "Transaction",
    "AnyEvent",
    "prepare",
    "encode_records",
    "stamp_actor",
    "sign_encoded",
    "StopFlag",
    "LifecycleRecord",
    "fold_lifecycle",
]

AnyEvent = Message | Document | Recall | Deletion
T = TypeVar("T")
R = TypeVar("R")

# Given the state at the log's end, the records to append and a value to hand back.
Transaction = Callable[[LogState], tuple[Sequence[Record], T]]
StopFlag = threading.Event


class Appended(NamedTuple):
    """One record a transaction appended: its seq, the stored record, what it caused.

    An audit event comes back with its seq set. `lifecycle` are the record's lifecycle
    events as the fold gave them (for an operation, its ``operation.applied`` carries the
    operation's value).
    """

    seq: int
    record: Record
    lifecycle: list[Lifecycle]


class LifecycleRecord(NamedTuple):
    """A lifecycle event as subscribers see it: its offset in the lifecycle stream, the seq
    of the log record that caused it, and its envelope (namespace, type, payload)."""

    offset: int
    seq: int
    envelope: GraphEnvelope


class Log(Protocol):
    location: str

    def state(self, min_seq: int | None = None) -> LogState:
        """The state folded up to the log's current end, this process's writes included.

        With `min_seq`, a state that reflects at least that seq is enough: a log that has
        already folded it may answer without looking for newer records.
        """
        ...

    def head(self) -> int | None:
        """The seq of the last record in the log, whether this process folded it yet or not
        (None: an empty log). Readers use it to report how far behind they are."""
        ...

    def transact(
        self, build: Transaction[T], *, agent: NoteSigner | None = None, ask_end: bool = True
    ) -> tuple[list[Appended], T]:
        """Run `build` on the state at the log's end, check its records and append them.

        `agent`: sign this transaction's records with that agent key rather than the one
        this writer holds (`use_agent_key`); how a service that appends for several agents
        (queryd's recall) signs each as its own. `ask_end=False`: the state is brought to
        the end this reader knows of without asking the log where it ends (on Kafka: its
        consumer's last fetch; the embedded log always knows its end). Raises what the
        fold would refuse (nothing is appended then). Returns the appended records,
        folded, and `build`'s value.
        """
        ...

    def append(self, records: Sequence[Record]) -> list[Appended]:
        """Append records that need no state to build (audit appends); checked as the fold
        would, all or none on the embedded log."""
        ...

    def records(
        self, from_seq: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """(seq, bytes) from `from_seq` on, then new ones as they arrive.

        Ends when nothing new arrived for `timeout` seconds (None: never) or `stop` is set.
        """
        ...

    def lifecycle(
        self, from_offset: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[LifecycleRecord]:
        """The lifecycle stream from `from_offset` on, then new events as they arrive."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PipelinedLog(Protocol):
    """A log whose appends can be in flight together (Kafka): `submit` produces and returns
    at once; the future resolves when the records are durable. Logs without it (the
    embedded file) get asynchronous appends by group commit (`batching.GroupCommitter`)."""

    def submit(self, records: Sequence[Record], then: Callable[[list[Appended]], R]) -> Future[R]:
        """Check audit events as `append` does and publish them; a future of `then(appended)`
        (or of the error that refused them)."""
        ...

    def drain(self) -> None:
        """Wait until every submitted append is durable or failed."""
        ...


AuditLog = Log  # the name the embedded log had first


def encode_records(records: Sequence[Record]) -> list[bytes]:
    """The records' bytes, every one checked against `MAX_RECORD_BYTES` before any is
    appended: `RecordTooLargeError` (naming the record) refuses the whole batch."""
    encoded = [encode_record(r) for r in records]
    check_record_sizes(records, encoded)
    return encoded


def stamp_actor(records: Sequence[Record], agent: NoteSigner | None) -> list[Record]:
    """The records a writer holding an agent key appends: an audit event without an actor
    gets the agent's name (on a signed log a record's actor is its signer)."""
    if agent is None:
        return list(records)
    name = agent.name
    return [
        r.model_copy(update={"actor": name}) if isinstance(r, BaseEvent) and r.actor is None else r
        for r in records
    ]


def sign_encoded(
    agent: NoteSigner | None, state: LogState, records: Sequence[Record], encoded: list[bytes]
) -> list[bytes]:
    """The stored bytes of `records` (`encoded`), each signed by `agent` for the log; as
    they are without an agent. The log id is the signed log's (or the id of the record in
    this batch that makes the log signed)."""
    if agent is None:
        return encoded
    log_id = None if state.authorship is None else state.authorship.log_id
    out = []
    for record, data in zip(records, encoded, strict=True):
        if isinstance(record, GraphEnvelope) and record.type == LOG_SIGNED:
            log_id = record.id
        if log_id is None:
            raise AuthorshipError(
                "this log does not require signatures (created without them): open it "
                "without an agent key, or write to a log created signed"
            )
        signed = sign_record(agent, log_id, data)
        if len(signed) > MAX_RECORD_BYTES:
            check_record_size(record, signed)
        out.append(signed)
    return out


def prepare(
    state: LogState,
    build: Transaction[T],
    *,
    erasable: bool = False,
    agent: NoteSigner | None = None,
    seal: Callable[[list[Record]], list[bytes]] | None = None,
) -> tuple[list[Record], list[bytes], T]:
    """Run `build`, check its records against `state` and encode them (shared by logs);
    with an `agent` key, the records are stamped with its name and checked as signed by it
    (their bytes are signed by `sign_encoded`, after any sealing). `seal`: an encrypted
    log's sealing (`producers.keys.cipher.encode_sealed`): the bytes are the sealed records'.

    Raises what the fold would refuse, or `RecordTooLargeError`; nothing is appended then.
    """
    records, value = build(state)
    records = stamp_actor(records, agent)
    check_records(
        state,
        records,
        erasable=erasable,
        signer=None if agent is None else agent.name,
        signer_key=None if agent is None else agent.verifier.key_id,
    )
    return records, encode_records(records) if seal is None else seal(records), value


def fold_lifecycle(
    records: Iterator[tuple[int, bytes]], from_offset: int = 0
) -> Iterator[LifecycleRecord]:
    """The lifecycle stream of a log, derived by folding it from seq 0.

    The projector publishes exactly this stream to the lifecycle topic; a log without one
    (the embedded file) derives it here, so both modes give the same offsets.
    """
    state = empty_state()
    offset = 0
    for seq, data in records:
        state, events = fold_record(state, seq, data)
        for index, event in enumerate(events):
            if offset >= from_offset:
                yield LifecycleRecord(offset, seq, lifecycle_envelope(event, index))
            offset += 1
