"""`Memory`: the audit-memory API over any log a location string names."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from os import PathLike
from types import TracebackType
from typing import Any, TypeVar, get_args
from uuid import UUID, uuid4

from producers.erasure import erase_subject, sweep_retention
from producers.logs import Log, open_log
from producers.logs.base import Appended, LifecycleRecord, PipelinedLog
from producers.logs.batching import GroupCommitter
from producers.logs.location import redact
from producers.logs.signing_key import KeySpec, load_signer, load_verifier
from projector.audit import MemoryState
from projector.authorship import (
    Authorship,
    AuthorshipError,
    enrol_record,
    revoke_record,
    rotate_admin_record,
    signed_log_record,
)
from projector.record_fold import LogState
from queryd.audit import search
from schemas.audit import BaseEvent, Deletion, Document, Erasure, EventKind, Message, Recall
from schemas.codec import decode_record
from schemas.crypto.graph_erasure import GraphErasure
from schemas.errors import DecodeError, EncryptionError
from schemas.evidence.note import NoteSigner, NoteVerifier
from schemas.evidence.proof import ConsistencyProof, EvidenceError, InclusionProof
from schemas.records import Record

__all__ = ["Memory", "load_agent_key"]


# An agent's key as a caller gives it: a key file's path, a `NoteSigner`, or None.
AgentKeySpec = str | PathLike[str] | NoteSigner | None


def load_agent_key(spec: AgentKeySpec) -> NoteSigner | None:
    """An agent's key: a `NoteSigner`, or the key file at a path (mode 0600)."""
    if spec is None or isinstance(spec, NoteSigner):
        return spec
    return load_signer(spec)


def _verifier(spec: NoteVerifier | str) -> NoteVerifier:
    if isinstance(spec, NoteVerifier):
        return spec
    return load_verifier(spec)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


AnyEvent = Message | Document | Recall | Deletion | Erasure
T = TypeVar("T")
_KINDS = get_args(EventKind)
# Given the memory at the log's end, the events to append and a value to hand back.
Transaction = Callable[[MemoryState], tuple[Sequence[AnyEvent], T]]


def _as_uuid(value: UUID | str, field: str) -> UUID:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        raise ValueError(f"{field}: {value!r} is not a UUID") from None


def _first_record(appended: list[Appended]) -> AnyEvent:
    return appended[0].record  # type: ignore[return-value]


def _records(appended: list[Appended]) -> list[AnyEvent]:
    return [a.record for a in appended]  # type: ignore[misc]


class Memory:
    """An append-only memory log: a directory path (embedded SQLite) or a kafka:// URL."""

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        create: bool = True,
        key: KeySpec = None,
        encrypt: bool = False,
        agent_key: str | PathLike[str] | NoteSigner | None = None,
        signed: bool = False,
        admins: Iterable[NoteVerifier | str] = (),
    ) -> None:
        """Open the log at `path`, creating it when absent (as seed 001's `Memory` does);
        `create=False` opens an existing log only (readers: queryd, auditors).

        `key`: the signing key of the log's checkpoints, kept outside the log: a key file's
        path (`memstream keys init`), a `NoteSigner`, or False (sign nothing); None looks
        for ``$MEMSTREAM_SIGNING_KEY``, then ``~/.config/memstream/signing.key``. On Kafka
        the projector signs (its ``--key``), and `key` is not used.

        `encrypt=True` makes a new (empty) log store its content encrypted, so it can be
        erased (`erase`): its keys in the log's file, or on Kafka in the topic LOG.keys; a
        log that is encrypted stays so whatever `encrypt` says.
        `EncryptionError` for a log holding unencrypted records.

        `agent_key`: the agent's own key (a key file `memstream agents create` wrote, or a
        `NoteSigner`): every record this writer appends is signed with it, and an audit
        event without an actor gets the key's name. `signed=True` makes a new (empty) log
        require signatures from its first record, with the agent key and `admins`
        (verifier keys ``NAME+KEYID+BASE64``) as its admins, fixed from then on; a log
        that is signed stays so. `AuthorshipError` when `signed` meets a log holding
        unsigned records, or an agent key meets a log that does not require signatures.
        """
        self.location = str(path)
        agent = load_agent_key(agent_key)
        if signed and agent is None:
            raise AuthorshipError("a signed log is created by an admin: give its agent_key")
        self._log: Log = open_log(path, create=create)
        # Encrypted before signed: a new log's first record (signed) must be sealed too.
        if encrypt:
            try:
                enable = self._log.enable_encryption  # type: ignore[attr-defined]
            except AttributeError:
                self._log.close()
                raise EncryptionError(
                    f"log {redact(self.location)}: this kind of log cannot encrypt"
                ) from None
            try:
                enable()
            except BaseException:
                self._log.close()
                raise
        if agent is not None:
            try:
                self._use_agent(agent, signed, [_verifier(a) for a in admins])
            except BaseException:
                self._log.close()
                raise
        if key is not None and hasattr(self._log, "use_signing_key"):
            try:
                self._evidence().use_signing_key(key)
            except BaseException:
                self._log.close()
                raise
        # Kafka pipelines asynchronous appends itself; the embedded log group-commits them.
        self._pipelined: PipelinedLog | None = (
            self._log if isinstance(self._log, PipelinedLog) else None
        )
        self._committer: GroupCommitter | None = None
        self._committer_lock = threading.Lock()

    def _use_agent(self, agent: NoteSigner, signed: bool, admins: list[NoteVerifier]) -> None:
        use = getattr(self._log, "use_agent_key", None)
        if use is None:
            raise AuthorshipError(f"log {redact(self.location)}: this log cannot sign records")
        use(agent)
        if not signed:
            return

        def build(state: LogState) -> tuple[list[Record], None]:
            if state.authorship is not None:
                return [], None  # signed already: its admins are fixed
            if state.last_seq is not None:
                raise AuthorshipError(
                    f"log {redact(self.location)} holds {state.next_seq} unsigned record(s): "
                    "signatures can be required only from a log's first record"
                )
            everyone = [agent.verifier, *(a for a in admins if a != agent.verifier)]
            return [signed_log_record(everyone, str(uuid4()), _now_iso())], None

        self._log.transact(build)

    @property
    def authorship(self) -> Authorship | None:
        """Who may sign this log's records as of its end (None: an unsigned log)."""
        return self._log.state().authorship

    def enrol(self, agent: NoteVerifier | str, *, may: Sequence[str] | None = None) -> int:
        """Enrol an agent (its verifier key) on a signed log: it may append records of the
        kinds `may` lists (default all: message, document, recall, deletion, erasure,
        graph). Only an admin's key may; `AuthorshipError` otherwise. Returns the seq."""
        record = enrol_record(
            _verifier(agent), None if may is None else list(may), str(uuid4()), _now_iso()
        )
        return self._log.transact(lambda state: ([record], None))[0][0].seq

    def revoke(self, name: str, reason: str = "revoked") -> int:
        """Revoke an agent: records it signs from the next seq on are refused. Admins only."""
        record = revoke_record(name, reason, str(uuid4()), _now_iso())
        return self._log.transact(lambda state: ([record], None))[0][0].seq

    def rotate_admin(self, new_key: NoteVerifier | str) -> int:
        """Replace an admin's key with `new_key` (a verifier key, or its file; its name is
        the admin's). Signed by this memory's admin key, with the key it holds now: from
        the next seq on, what the old key signs is refused. Returns the seq."""
        record = rotate_admin_record(_verifier(new_key), str(uuid4()), _now_iso())
        return self._log.transact(lambda state: ([record], None))[0][0].seq

    @property
    def log(self) -> Log:
        """The log this memory folds (shared with a `MemexStore` on the same location)."""
        return self._log

    # Writing

    def _append_one(self, event: AnyEvent, expected: type) -> Any:
        if not isinstance(event, expected):
            raise ValueError(f"expected a {expected.__name__}, got {type(event).__name__}")
        return self._log.append([event])[0].record

    def add_message(self, message: Message) -> Message:
        """Append a message; returns the stored copy with its seq."""
        return self._append_one(message, Message)

    def add_document(self, document: Document) -> Document:
        """Append a document; returns the stored copy with its seq."""
        return self._append_one(document, Document)

    def record_recall(self, recall: Recall) -> Recall:
        """Append a recall; every recalled id must be an existing message or document."""
        return self._append_one(recall, Recall)

    def delete(
        self,
        targets: Iterable[UUID | str] | UUID | str,
        reason: str,
        *,
        requested_by: str | None = None,
        session_id: str | None = None,
    ) -> Deletion:
        """Append a tombstone for existing messages or documents."""
        if isinstance(targets, UUID | str):
            targets = (targets,)
        deletion = Deletion(
            targets=tuple(_as_uuid(t, "targets") for t in targets),
            reason=reason,
            requested_by=requested_by,
            session_id=session_id,
        )
        return self._append_one(deletion, Deletion)

    # Erasure (producers.erasure): only an encrypted log erases.

    def erase(
        self,
        subject: str,
        reason: str,
        *,
        requested_by: str | None = None,
        actor: str | None = None,
    ) -> Erasure | GraphErasure:
        """Make every message and document of data `subject`, and the content of every
        graph item of it, unreadable: its keys are destroyed and an `Erasure` receipt (ids
        and leaf hashes, no content) is appended, with its graph half (`GraphErasure`, in a
        ``memstream.erase_content`` envelope) when graph items had content of it, in one
        transaction (on Kafka: the keys' tombstones are acknowledged first, then the
        receipt is appended). Afterwards `get` shows their content as `ERASED`, and search,
        recall and the word index never see them; each value of the items' content reads
        `ERASED`. The subject of an event is its `session_id`, or ``event:<id>`` for one
        without a session; of an item, its ``meta.subject``, else its ``scope``. The
        `Erasure`; the `GraphErasure` when the subject had graph content only.

        `UnknownSubjectError` when the log holds no readable content of `subject`;
        `EncryptionError` for a log written without encryption: nothing is appended.
        """
        return erase_subject(self._log, subject, reason, requested_by=requested_by, actor=actor)

    def sweep_retention(self, now: datetime | None = None) -> list[Erasure]:
        """Erase every message and document whose `retain_until` is at or before `now`
        (default: the clock), one Erasure per subject with the reason "retention period
        elapsed"; idempotent, safe from several processes. The Erasures appended."""
        return sweep_retention(self._log, now)

    def transact(
        self, build: Transaction[T], *, agent_key: AgentKeySpec = None, ask_end: bool = True
    ) -> tuple[list[AnyEvent], T]:
        """Read and append atomically: `build(state)` gives the events and a value.

        `state` is the memory at the log's end; the events are checked and appended
        right after it, all or none. This is how `recall` and `Assistant` keep the
        audit record equal to what was read. `agent_key` (a key file or a `NoteSigner`):
        sign these events as that agent rather than with this memory's own agent key.
        `ask_end=False` (what `recall` does): on Kafka, `state` is the memory at the end this
        process knows of (its consumer's last fetch, and its own appends), without a round
        trip to ask the broker where the log ends.
        """
        agent = load_agent_key(agent_key)
        appended, value = self._log.transact(
            lambda state: build(state.memory), agent=agent, ask_end=ask_end
        )
        return [a.record for a in appended], value  # type: ignore[misc]

    def append_many(self, events: Iterable[AnyEvent]) -> list[AnyEvent]:
        """Append several events in one transaction (one commit), all or none."""
        batch = list(events)
        for event in batch:
            if not isinstance(event, BaseEvent):
                raise ValueError(f"expected an event, got {type(event).__name__}")
        return [a.record for a in self._log.append(batch)]  # type: ignore[misc]

    def publish_async(self, event: AnyEvent) -> Future[AnyEvent]:
        """Append without waiting: a future of the stored event.

        Events published meanwhile, from any thread, share one commit (group commit); a
        future resolves only once its event is durable, or with the error that refused it.
        """
        if not isinstance(event, BaseEvent):
            raise ValueError(f"expected an event, got {type(event).__name__}")
        if self._pipelined is not None:
            return self._pipelined.submit((event,), _first_record)
        committer = self._group_committer()
        done: Future[AnyEvent] = Future()

        def resolve(appended: Future[Appended]) -> None:
            exc = appended.exception()
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(appended.result().record)  # type: ignore[arg-type]

        committer.submit(event).add_done_callback(resolve)
        return done

    def _group_committer(self) -> GroupCommitter:
        with self._committer_lock:
            if self._committer is None:
                self._committer = GroupCommitter(self._log)
            return self._committer

    def publish_many(self, events: Iterable[AnyEvent]) -> Future[list[AnyEvent]]:
        """Append several events, in order, without waiting: a future of the stored events.

        The path for agents that write many events: the batch is checked as `append_many`
        checks it and published at once; many batches are in flight together and share
        the log's commits. The future resolves once every event is durable, or with the
        error that refused the batch (then nothing was appended) or failed a delivery.
        """
        batch = list(events)
        for event in batch:
            if not isinstance(event, BaseEvent):
                raise ValueError(f"expected an event, got {type(event).__name__}")
        if self._pipelined is not None:
            return self._pipelined.submit(batch, _records)
        done: Future[list[AnyEvent]] = Future()

        def resolve(appended: Future[list[Appended]]) -> None:
            exc = appended.exception()
            if exc is not None:
                done.set_exception(exc)
            else:
                done.set_result(_records(appended.result()))

        # Through the committer, so it is ordered with `publish_async`'s events.
        self._group_committer().submit_many(batch).add_done_callback(resolve)
        return done

    def flush(self) -> None:
        """Wait until every event given to `publish_async` or `publish_many` is durable (or
        refused)."""
        if self._pipelined is not None:
            self._pipelined.drain()
        with self._committer_lock:
            committer, self._committer = self._committer, None
        if committer is not None:
            committer.close()

    # Reading

    def recall(
        self,
        query: str,
        *,
        limit: int = 5,
        session_id: str | None = None,
        source: str = "unknown",
        actor: str | None = None,
        agent_key: AgentKeySpec = None,
    ) -> tuple[Recall, list[Message | Document]]:
        """Search visible memory and append a Recall naming exactly what it returned.

        The search runs on the state at the log's end, in the same transaction as the
        append, so the state at `recall.seq - 1` reproduces the answer exactly. On Kafka
        that end is the one this process knows of (its consumer's last fetch, at most
        `fetch.wait.max.ms` old while it follows the log, and its own appends): a record
        another process appended after it and before the Recall is not searched.
        `agent_key`: sign the Recall as that agent (see `transact`); its actor is then the
        key's name.
        """
        if limit < 0:
            raise ValueError(f"limit: expected a non-negative integer, got {limit}")

        def build(state: MemoryState) -> tuple[list[Recall], list[Message | Document]]:
            found = search(state, query, limit=limit)
            recall = Recall(
                query=query,
                recalled=tuple(item.id for item in found),
                session_id=session_id,
                source=source,
                actor=actor,
            )
            return [recall], found

        # At the end this reader knows of (on Kafka: no round trip to ask where it ends).
        stored, found = self.transact(build, agent_key=agent_key, ask_end=False)
        recall = stored[0]
        assert isinstance(recall, Recall)  # the one event `build` gave
        return recall, found

    def get(self, event_id: UUID | str) -> AnyEvent | None:
        """One event by id, deleted or not; None if unknown."""
        return self._log.state().memory.get(_as_uuid(event_id, "event_id"))

    def events(
        self,
        *,
        kind: str | None = None,
        session_id: str | None = None,
        after_seq: int | None = None,
        up_to_seq: int | None = None,
    ) -> list[AnyEvent]:
        """The log in ascending seq order, filtered."""
        if kind is not None and kind not in _KINDS:
            raise ValueError(f"kind: expected one of {', '.join(_KINDS)}, got {kind!r}")
        state = self._log.state().memory
        if up_to_seq is not None:
            state = state.at(up_to_seq)
        selected = state.events
        if after_seq is not None:
            selected = [e for e in selected if e.seq > after_seq]  # type: ignore[operator]
        if kind is not None:
            selected = [e for e in selected if e.kind == kind]
        if session_id is not None:
            selected = [e for e in selected if e.session_id == session_id]
        return selected

    def replay(self, *, up_to_seq: int | None = None) -> MemoryState:
        """The state of the log, or as it stood after event `up_to_seq`.

        The audit state keeps every event, so a past state is a view of the current one
        (O(log n)), never a refold.
        """
        return self._log.state().memory.at(up_to_seq)

    def __len__(self) -> int:
        """The number of audit events (messages, documents, recalls, deletions).

        The log may also hold graph envelopes (a `MemexStore` on the same location) and
        refused records; they have seqs but are not counted here.
        """
        return len(self._log.state().memory)

    # Evidence

    def _evidence(self) -> Any:
        if not hasattr(self._log, "prove"):
            raise EvidenceError(f"log {redact(self.location)}: this log keeps no evidence")
        return self._log

    def prove(self, seq: int, *, size: int | None = None) -> InclusionProof:
        """An inclusion proof of the record of `seq` against the log's latest signed
        checkpoint (or its checkpoint of `size`); `.to_json()` gives it as JSON.
        `ProofRangeError` for a seq past the head, `NoCheckpointError` when no checkpoint
        covers it, `EvidenceMismatchError` when the log disagrees with its checkpoint."""
        proof: InclusionProof = self._evidence().prove(seq, size)
        return proof

    def consistency(self, old_size: int, new_size: int | None = None) -> ConsistencyProof:
        """A consistency proof: the log's first `old_size` records are a prefix of the
        tree its signed checkpoint of `new_size` (the latest when None) names."""
        proof: ConsistencyProof = self._evidence().consistency(old_size, new_size)
        return proof

    def checkpoint(self) -> str:
        """Sign a checkpoint of the log as it stands (a writer with a key cuts one at each
        commit anyway); the signed note."""
        note: str = self._evidence().checkpoint()
        return note

    def latest_checkpoint(self) -> str:
        """The latest signed checkpoint the log holds (a note to keep elsewhere: `memstream
        verify --checkpoint` shows with it a log cut short after it)."""
        note: str = self._evidence().latest_checkpoint()
        return note

    # Following

    def subscribe(
        self,
        from_seq: int = 0,
        *,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[AnyEvent]:
        """The stored events from seq `from_seq` on, in order, then new ones as they come.

        Ends when nothing new arrived for `timeout` seconds (None: never) or when `stop`
        is set. Records that are not audit events, or that the fold refused, are skipped.
        """
        for seq, data in self._log.records(from_seq, timeout=timeout, stop=stop):
            try:
                record = decode_record(data)
            except DecodeError:
                continue
            if not isinstance(record, BaseEvent):
                continue
            stored = self._log.state(min_seq=seq).memory.get(record.id)
            if stored is not None and stored.seq == seq:
                yield stored

    def lifecycle(
        self,
        from_offset: int = 0,
        *,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[LifecycleRecord]:
        """Lifecycle events from offset `from_offset` of the lifecycle stream, then new ones.

        Each carries the seq of the record that caused it and its envelope
        (``message.appended``, ``memory.created``, ``record.rejected``, ...). On Kafka this
        reads the lifecycle topic the projector publishes; the embedded log derives the
        same stream by folding.
        """
        return self._log.lifecycle(from_offset, timeout=timeout, stop=stop)

    # Lifetime

    def close(self) -> None:
        self.flush()
        self._log.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory({redact(self.location)!r})"
