"""The combined fold: one log of audit events and graph envelopes into one `LogState`.

`fold_record(state, seq, bytes)` is the function every reader of a log shares: the
embedded log, the Kafka producers' read-your-writes state, the projector service and the
snapshot hydrate all fold with it, so they cannot drift apart.

It is TOTAL: bytes that do not decode, a record of an unknown schema, an
audit event that fails `check_append`, a command that fails (duplicate id, unknown target,
invalid transition, out-of-range score) or an operation whose precondition no longer holds
becomes a `Rejection` (seq, reason) and changes nothing else.

Commands and operations are applied with the one graph mutation dispatch
(`projector.graph.dispatch`). Operations whose outcome depends on the state travel as ONE
envelope in the ``memstream`` namespace (types ``memstream.<name>``, which no TypeScript
command tag can be) and are decided here, in log order, so that interleaving does not
change answers:

- ``memstream.<name>`` for each operation of `OPERATIONS` marked ``on_log``
  (``cascade_retract``, ``resolve_contradiction``, ``mark_contradiction``, ``mark_alias``,
  ``bulk_adjust_scores``, ``import_slice``): the pure function of that name runs on the
  state the record meets. Edges those functions mint get ids derived
  from the envelope (UUIDv7-shaped, from its ts and a hash of its id), so every fold of
  the log agrees on them.
- ``memstream.batch``: concrete commands applied all or none, with an optional
  precondition ``graph_seq``: the seq of the last record that changed the graph state when
  the publisher computed the commands. A batch that meets a graph changed since is
  rejected, and its publisher recomputes and retries. `apply_many` (whose transform is a
  callable) and `decay_importance` (which reads the clock) are published this way.

The lifecycle events of a record (`projector.lifecycle`) are returned beside the new state;
their order and content are a function of the log alone, so they can be published exactly
once.
"""

from __future__ import annotations

import hashlib
import logging
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple
from uuid import UUID

from pydantic import ValidationError
from pyrsistent import PVector, pvector

from projector.audit import MemoryState, check_append, fold
from projector.authorship import (
    Authorship,
    AuthorshipError,
    authorize,
    is_authorship_record,
    verify_signature,
)
from projector.graph.dispatch import (
    OPERATIONS,
    Applied,
    GraphStates,
    Operation,
    UnknownCommandError,
    apply_graph_command,
)
from projector.graph.intents import IntentState, create_intent_state
from projector.graph.reducer import Tx, item_changes
from projector.graph.state import GraphState, create_graph_state
from projector.graph.tasks import TaskState, create_task_state
from projector.lifecycle import Lifecycle
from schemas.audit import ERASED, BaseEvent, Erasure
from schemas.codec import MAX_JSON_DEPTH, decode_record
from schemas.crypto.graph_content import ERASE_CONTENT, is_erase_content
from schemas.crypto.graph_erasure import GraphErasure
from schemas.errors import (
    CorruptLogError,
    DecodeError,
    EncryptionError,
    LogUnavailableError,
    MemstreamError,
)
from schemas.gc_guard import cyclic_gc_paused
from schemas.graph.commands import EdgeCreate, EdgeRetract, MemoryUpdate
from schemas.graph.envelopes import parse_iso_ms
from schemas.graph.errors import MemexError
from schemas.records import OPERATION_NAMESPACE, AuditEvent, GraphEnvelope, Record
from schemas.signing import SIGNED_MAGIC, split_signed

__all__ = [
    "LogState",
    "Rejection",
    "FoldResult",
    "PreconditionFailed",
    "BATCH",
    "empty_state",
    "fold_record",
    "fold_decoded",
    "apply_record",
    "check_records",
    "check_signed",
    "reject_record",
    "fold_log",
]

log = logging.getLogger("memstream.projector.fold")


class PreconditionFailed(MemstreamError):
    """A batch computed on a graph state that changed before it reached the log."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record the fold refused: where, why, and the error's class name."""

    seq: int
    reason: str
    error: str


@dataclass(frozen=True)
class LogState:
    """Everything folded from one log up to `last_seq`.

    `memory` is the audit state (messages, documents, recalls, deletions; its own
    `last_seq` is that of its last audit event); `graph`, `intents` and `tasks` the memory,
    intent and task graphs; `rejections` the
    records refused, in log order; `graph_seq` the seq of the last record that changed a
    graph (the precondition of batches).
    """

    memory: MemoryState = field(default_factory=MemoryState)
    graph: GraphState = field(default_factory=create_graph_state)
    intents: IntentState = field(default_factory=create_intent_state)
    tasks: TaskState = field(default_factory=create_task_state)
    rejections: PVector[Rejection] = field(default_factory=pvector)
    last_seq: int | None = None
    graph_seq: int | None = None
    # None: an unsigned log (or no record yet); else who may sign, as of `last_seq`.
    authorship: Authorship | None = None

    @property
    def next_seq(self) -> int:
        return 0 if self.last_seq is None else self.last_seq + 1

    def with_(self, **changes: Any) -> LogState:
        unknown = changes.keys() - _LOG_STATE_FIELDS
        if unknown:
            raise TypeError(f"LogState has no field {sorted(unknown)[0]!r}")
        # Copied, not rebuilt through the frozen __init__ (a setattr per field): this runs
        # for every folded record.
        new = object.__new__(LogState)
        values = new.__dict__
        values.update(self.__dict__)
        values.update(changes)
        return new

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LogState):
            return NotImplemented
        return (
            self.last_seq == other.last_seq
            and self.graph_seq == other.graph_seq
            and self.memory == other.memory
            and self.memory.events == other.memory.events
            and self.authorship == other.authorship
            and list(self.rejections) == list(other.rejections)
            and list(self.graph.items.items()) == list(other.graph.items.items())
            and list(self.graph.edges.items()) == list(other.graph.edges.items())
            and list(self.intents.intents.items()) == list(other.intents.intents.items())
            and list(self.tasks.tasks.items()) == list(other.tasks.tasks.items())
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"LogState(last_seq={self.last_seq}, audit_events={len(self.memory)}, "
            f"items={len(self.graph.items)}, edges={len(self.graph.edges)}, "
            f"intents={len(self.intents.intents)}, tasks={len(self.tasks.tasks)}, "
            f"rejections={len(self.rejections)})"
        )


_LOG_STATE_FIELDS = frozenset(f.name for f in fields(LogState))


class FoldResult(NamedTuple):
    state: LogState
    lifecycle: list[Lifecycle]


def empty_state() -> LogState:
    return LogState()


# --- operations ---------------------------------------------------------------------------------

BATCH = "memstream.batch"
_OPERATION_PREFIX = OPERATION_NAMESPACE + "."


def _derived_id(envelope: GraphEnvelope, n: int) -> str:
    """The n-th id an operation mints: UUIDv7-shaped, from the envelope alone."""
    try:
        ms = parse_iso_ms(envelope.ts)
    except MemexError:
        ms = 0
    ms = min(max(ms, 0), (1 << 48) - 1)
    digest = hashlib.sha256(f"memstream.op:{envelope.id}:{n}".encode()).digest()
    rand = int.from_bytes(digest[:10], "big")
    value = (
        (ms << 80) | (0x7 << 76) | ((rand >> 68) << 64) | (0b10 << 62) | (rand & ((1 << 62) - 1))
    )
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@cyclic_gc_paused
def _with_derived_edge_ids(
    before: GraphState, after: GraphState, events: list[Any], envelope: GraphEnvelope
) -> tuple[GraphState, list[Any]]:
    """Redo an operation's effect with the edges it minted renamed to derived ids.

    The integrity functions mint edge ids from the clock and randomness; a fold must not.
    Their effect is a sequence of edge creations, edge retractions and item updates, which
    are replayed here in one transaction with the created edges' ids replaced.
    """
    if not any(e.type == "edge.created" for e in events):
        return after, events
    tx = Tx(before)
    n = 0
    for event in events:
        if event.type == "edge.created":
            edge = event.edge.model_copy(update={"edge_id": _derived_id(envelope, n)})
            n += 1
            tx.apply(EdgeCreate(edge=edge))
        elif event.type == "edge.retracted":
            tx.apply(EdgeRetract(edge_id=event.edge.edge_id, author="memstream"))
        elif event.type == "memory.updated":
            partial = item_changes(before.items[event.item.id], event.item)
            tx.apply(MemoryUpdate(item_id=event.item.id, partial=partial, author="memstream"))
        else:
            raise MemstreamError(f"operation emitted {event.type}; cannot derive its ids")
    state, redone = tx.result()
    # Keep the operation's own events (authors, causes), with the renamed edges.
    renamed: list[Any] = []
    n = 0
    for event in events:
        if event.type == "edge.created":
            edge = event.edge.model_copy(update={"edge_id": _derived_id(envelope, n)})
            n += 1
            event = event.model_copy(update={"edge": edge})
        renamed.append(event)
    return state, renamed


def _batch(states: GraphStates, envelope: GraphEnvelope, graph_seq: int | None) -> Applied:
    """Concrete commands applied all or none, if the graph is still as of ``graph_seq``."""
    args = envelope.payload
    expected = args.get("graph_seq", "any")
    if expected != "any" and expected != graph_seq:
        raise PreconditionFailed(
            f"batch {envelope.id} was computed on the graph as of seq {expected}; "
            f"the graph changed at seq {graph_seq}"
        )
    commands = args.get("commands")
    if not isinstance(commands, list):
        raise UnknownCommandError(f"batch {envelope.id}: 'commands' must be a list")
    events: list[Any] = []
    for command in commands:
        states, emitted, _ = apply_graph_command(states, command)
        events.extend(emitted)
    return Applied(states, events)


def _erase_content(states: GraphStates, envelope: GraphEnvelope) -> Applied:
    """The graph half of an erasure receipt: every content value of each item it names
    becomes ``ERASED`` (an item retracted since is gone already, and skipped)."""
    receipt = GraphErasure.model_validate(envelope.payload)
    tx = Tx(states.memory)
    for item_id in receipt.items:
        item = tx.items.get(item_id)
        if item is not None:
            tx.update_item(item_id, {"content": dict.fromkeys(item.content, ERASED)}, ERASE_CONTENT)
    return Applied(states._replace(memory=tx.freeze()), list(tx.events), None)


def _apply_operation(
    states: GraphStates, envelope: GraphEnvelope, graph_seq: int | None
) -> Applied:
    """An operation envelope: a batch, or an operation of the table that may travel on a log."""
    if envelope.type == ERASE_CONTENT:
        return _erase_content(states, envelope)
    is_batch = envelope.type == BATCH
    operation = None if is_batch else _logged_operation(envelope.type)
    if operation is None and not is_batch:
        raise UnknownCommandError(f"unknown operation {envelope.type!r}")
    if not isinstance(envelope.payload, Mapping):
        raise UnknownCommandError(f"operation {envelope.type}: payload must be an object")
    if operation is None:
        return _batch(states, envelope, graph_seq)
    applied = operation.run(states, envelope.payload)
    if not operation.mints_edges:
        return applied
    memory, events = _with_derived_edge_ids(
        states.memory, applied.states.memory, applied.events, envelope
    )
    return Applied(applied.states._replace(memory=memory), events, applied.value)


def _logged_operation(type_: str) -> Operation | None:
    if not type_.startswith(_OPERATION_PREFIX):
        return None
    operation = OPERATIONS.get(type_[len(_OPERATION_PREFIX) :])
    return operation if operation is not None and operation.on_log else None


def _apply_envelope(states: GraphStates, envelope: GraphEnvelope, graph_seq: int | None) -> Applied:
    if envelope.namespace == OPERATION_NAMESPACE:
        return _apply_operation(states, envelope, graph_seq)
    return apply_graph_command(states, envelope.payload)


# --- the fold -----------------------------------------------------------------------------------


def _audit_lifecycle(seq: int, event: AuditEvent) -> Lifecycle:
    return Lifecycle(seq, "audit", f"{event.kind}.appended", event)


def _not_erasable(record: Erasure | GraphEnvelope) -> EncryptionError:
    return EncryptionError(
        f"erasure {record.id}: this log is not encrypted, so no content of it can be erased"
    )


def _authorship_lifecycle(seq: int, record: GraphEnvelope, auth: Authorship) -> Lifecycle:
    payload = record.payload if isinstance(record.payload, Mapping) else {}
    type_ = {
        "memstream.log.signed": "log.signed",
        "memstream.agent.enrol": "agent.enrolled",
        "memstream.agent.revoke": "agent.revoked",
        "memstream.admin.rotate": "admin.rotated",
    }[record.type]
    extra: dict[str, Any] = {"cause_id": record.id, "cause_ts": record.ts, "log_id": auth.log_id}
    if type_ == "log.signed":
        extra["admins"] = sorted(auth.admins)
    elif type_ == "admin.rotated":
        extra["admin"] = payload.get("admin")
    else:
        extra["agent"] = payload.get("agent")
    return Lifecycle(seq, OPERATION_NAMESPACE, type_, None, extra)


def apply_record(
    state: LogState,
    seq: int,
    record: Record,
    *,
    checked: bool = False,
    erasable: bool = False,
    signer: str | None = None,
) -> FoldResult:
    """Fold one decoded record, raising when the fold would refuse it (the strict form).

    An `Erasure` is folded only on a log that encrypts (`erasable`, the embedded log's
    choice by its key store): elsewhere no key was destroyed, so it is refused.

    An audit event must have no seq (or this one); it is checked with `check_append`,
    unless `checked`: a log folding its own append, which `check_records` has just checked
    against this very state (and which holds no seq), need not check it twice.
    """
    last = state.last_seq
    if last is not None and seq <= last:
        raise ValueError(f"seq {seq} does not follow seq {last}")
    if state.authorship is not None or signer is not None or is_authorship_record(record):
        # `signer`: the name whose signature on the record was verified (or, for a
        # writer's own append, that it made). A signed log's checks come first.
        auth = authorize(state.authorship, seq, record, signer, state.memory)
        if is_authorship_record(record):
            assert isinstance(record, GraphEnvelope) and auth is not None
            return FoldResult(
                state.with_(authorship=auth, last_seq=seq),
                [_authorship_lifecycle(seq, record, auth)],
            )
        state = state.with_(authorship=auth)
    if isinstance(record, BaseEvent):
        if not erasable and type(record) is Erasure:
            raise _not_erasable(record)
        if checked:
            stored = record.with_seq(seq)
        else:
            event = record if record.seq is None else record.model_copy(update={"seq": None})
            check_append(state.memory, event)
            stored = event.with_seq(seq)
        memory = fold(state.memory, stored)  # type: ignore[arg-type]
        return FoldResult(
            state.with_(memory=memory, last_seq=seq),
            [_audit_lifecycle(seq, stored)],  # type: ignore[arg-type]
        )
    if not isinstance(record, GraphEnvelope):
        raise DecodeError(f"seq {seq}: not a record: {type(record).__name__}")
    if not erasable and is_erase_content(record):
        raise _not_erasable(record)
    states = GraphStates(state.graph, state.intents, state.tasks)
    (graph, intents, tasks), events, value = _apply_envelope(states, record, state.graph_seq)
    changed = graph is not state.graph or intents is not state.intents or tasks is not state.tasks
    cause = {"cause_id": record.id, "cause_ts": record.ts}
    lifecycle = [Lifecycle(seq, e.namespace, e.type, e, cause) for e in events]
    if record.namespace == OPERATION_NAMESPACE:
        extra = {"operation": record.type, **cause, "value": value}
        lifecycle.append(Lifecycle(seq, OPERATION_NAMESPACE, "operation.applied", None, extra))
    new = state.with_(
        graph=graph,
        intents=intents,
        tasks=tasks,
        last_seq=seq,
        graph_seq=seq if changed else state.graph_seq,
    )
    return FoldResult(new, lifecycle)


# Errors a record can cause; anything else is a bug, still refused (the fold is total) but
# logged with its traceback.
_EXPECTED = (MemstreamError, MemexError, ValidationError, ValueError, TypeError, KeyError)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{exc.title}: {where}: {first['msg']}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _reject(state: LogState, seq: int, exc: BaseException) -> FoldResult:
    rejection = Rejection(seq, _reason(exc), type(exc).__name__)
    new = state.with_(rejections=state.rejections.append(rejection), last_seq=seq)
    extra = {"seq": seq, "reason": rejection.reason, "error": rejection.error}
    return FoldResult(new, [Lifecycle(seq, OPERATION_NAMESPACE, "record.rejected", None, extra)])


def reject_record(state: LogState, seq: int, exc: BaseException) -> FoldResult:
    """The record at `seq` refused for `exc`: a `Rejection`, nothing else changed."""
    return _reject(state, seq, exc)


# Gives the readable record of a stored one (an encrypted log's content opened with its
# keys, held by an adapter); what it raises refuses the record, as the fold's own checks do,
# except a `LogUnavailableError` (the key store did not answer) or a `CorruptLogError` (the
# sealed content does not open), which the fold raises.
Opener = Callable[[Record], Record]


def fold_decoded(
    state: LogState,
    seq: int,
    record: Record,
    signer: str | None = None,
    *,
    erasable: bool = False,
    opener: Opener | None = None,
) -> FoldResult:
    """`apply_record`, total: a refused record becomes a `Rejection`.

    `signer`: the name whose signature on the record was verified (None: unsigned).
    `erasable` and `opener`: a log that encrypts (on Kafka: one with a key store) folds its
    Erasures and opens sealed content with `opener` first (after the signature, which
    covers the sealed bytes)."""
    last = state.last_seq
    if last is not None and seq <= last:
        raise ValueError(f"seq {seq} does not follow seq {last}")  # the caller's contract
    if opener is not None:
        try:
            record = opener(record)
        except (LogUnavailableError, CorruptLogError):
            # The key store did not answer (the read fails, and is tried again), or the
            # sealed content does not open (the stored bytes were altered): as the embedded
            # log, the reader refuses to read on rather than fold a different state.
            raise
        except Exception as exc:
            return _reject(state, seq, exc)
    try:
        return apply_record(state, seq, record, erasable=erasable, signer=signer)
    except Exception as exc:
        if not isinstance(exc, _EXPECTED):
            log.warning("seq %d: refused on an unexpected error", seq, exc_info=True)
        return _reject(state, seq, exc)


def fold_record(
    state: LogState,
    seq: int,
    data: bytes,
    *,
    erasable: bool = False,
    opener: Opener | None = None,
) -> FoldResult:
    """The state after the record at `seq`, and its lifecycle events. Total: any bytes fold.

    Seqs must increase (a log gives them so); that is the only thing this raises on.
    `erasable` / `opener`: as `fold_decoded` takes them (an encrypted log).
    """
    last = state.last_seq
    if last is not None and seq <= last:
        raise ValueError(f"seq {seq} does not follow seq {last}")
    if data[:2] == SIGNED_MAGIC:
        return _fold_signed(state, seq, data, erasable=erasable, opener=opener)
    try:
        # Read to the depth writers allow, not the deeper one of derived lifecycle events.
        record = decode_record(data, max_depth=MAX_JSON_DEPTH)
    except DecodeError as exc:
        return _reject(state, seq, exc)
    except Exception as exc:  # decode_record raises DecodeError only; anything else is a bug
        log.warning("seq %d: decoding raised an unexpected error", seq, exc_info=True)
        return _reject(state, seq, exc)
    return fold_decoded(state, seq, record, erasable=erasable, opener=opener)


def check_signed(state: LogState, seq: int, data: bytes) -> tuple[Record, str]:
    """The record a signed record wraps and the name whose signature on it verifies at
    `seq` on the log as `state` holds it; `DecodeError` or `AuthorshipError` otherwise."""
    signed = split_signed(data)
    auth = state.authorship
    if auth is not None:  # checked before its bytes are decoded
        signer = verify_signature(auth, seq, signed, None)
        return decode_record(signed.inner, max_depth=MAX_JSON_DEPTH), signer
    record = decode_record(signed.inner, max_depth=MAX_JSON_DEPTH)
    return record, verify_signature(None, seq, signed, record)


def _fold_signed(
    state: LogState, seq: int, data: bytes, *, erasable: bool, opener: Opener | None
) -> FoldResult:
    try:
        record, signer = check_signed(state, seq, data)
    except (DecodeError, AuthorshipError) as exc:
        return _reject(state, seq, exc)
    except Exception as exc:  # a bug; still refused
        log.warning("seq %d: checking a signature raised an unexpected error", seq, exc_info=True)
        return _reject(state, seq, exc)
    return fold_decoded(state, seq, record, signer, erasable=erasable, opener=opener)


def fold_log(records: Sequence[tuple[int, bytes]] | Any, state: LogState | None = None) -> LogState:
    """Fold (seq, bytes) pairs, e.g. a whole log, from `state` (default: empty)."""
    state = empty_state() if state is None else state
    for seq, data in records:
        state = fold_record(state, seq, data).state
    return state


_NOTHING: Mapping[UUID, BaseEvent] = {}


def check_records(
    state: LogState,
    records: Sequence[Record],
    pending: Mapping[UUID, BaseEvent] | None = None,
    *,
    erasable: bool = False,
    signer: str | None = None,
    signer_key: bytes | None = None,
) -> None:
    """Raise what the fold would refuse if `records` were appended right after `state`.

    Audit events are checked with `check_append` against the state plus `pending` (events
    already appended after `state` but not folded yet) plus the batch before them;
    envelopes are applied to the (persistent) graph states, which are discarded. On a
    signed log (or for records of authorship) each record is first checked as signed by
    `signer` (None: unsigned) with the key whose id is `signer_key` (when given),
    `AuthorshipError` naming why it would be refused.
    """
    if not erasable:
        for record in records:
            if type(record) is Erasure or is_erase_content(record):
                raise _not_erasable(record)  # type: ignore[arg-type]
    if (
        state.authorship is not None
        or signer is not None
        or any(is_authorship_record(r) for r in records)
    ):
        _check_authorship(state, records, pending or _NOTHING, signer, signer_key)
    if len(records) == 1 and isinstance(records[0], BaseEvent):
        # The common append, one audit event: no batch to remember it in.
        check_append(state.memory, records[0], pending or _NOTHING)
        return
    batch: dict[UUID, BaseEvent] = {}
    seen: Mapping[UUID, BaseEvent] = ChainMap(batch, pending) if pending else batch  # type: ignore[arg-type]
    states = GraphStates(state.graph, state.intents, state.tasks)
    graph_seq = state.graph_seq
    seq = state.next_seq
    for record in records:
        if isinstance(record, BaseEvent):
            check_append(state.memory, record, seen)
            batch[record.id] = record
        elif is_authorship_record(record):
            pass  # no graph effect; checked above
        elif isinstance(record, GraphEnvelope):
            before = states
            states, _, _ = _apply_envelope(states, record, graph_seq)
            if any(a is not b for a, b in zip(states, before, strict=True)):
                graph_seq = seq
        else:
            raise TypeError(f"expected an audit event or a GraphEnvelope, got {record!r}")
        seq += 1


class _Known:
    """`get(id)` over the audit events of a state, those pending, and a batch's own."""

    __slots__ = ("memory", "others")

    def __init__(self, memory: MemoryState, others: Mapping[UUID, BaseEvent]) -> None:
        self.memory = memory
        self.others = others

    def get(self, key: UUID) -> BaseEvent | None:
        found = self.others.get(key)
        return found if found is not None else self.memory.get(key)


def _check_authorship(
    state: LogState,
    records: Sequence[Record],
    pending: Mapping[UUID, BaseEvent],
    signer: str | None,
    signer_key: bytes | None = None,
) -> None:
    auth = state.authorship
    if signer is not None and auth is not None:
        # What `verify_signature` will ask of the signer at the fold.
        if signer not in auth.admins:
            agent = auth.agents.get(signer)
            if agent is None:
                raise AuthorshipError(f"{signer!r} is not enrolled on this log")
            if agent.revoked_seq is not None:
                raise AuthorshipError(f"{signer!r} was revoked at seq {agent.revoked_seq}")
    batch: dict[UUID, BaseEvent] = {}
    known = _Known(state.memory, ChainMap(batch, pending))  # type: ignore[arg-type]
    seq = state.next_seq
    for record in records:
        if auth is None and signer is not None and not is_authorship_record(record):
            raise AuthorshipError(
                "this log does not require signatures (created without them): open it "
                "without an agent key, or write to a log created signed"
            )
        if auth is not None and signer is not None and signer_key is not None:
            held = auth.key_at(signer)  # the key `verify_signature` checks at this seq
            if held is not None and held.key_id != signer_key:
                raise AuthorshipError(
                    f"{signer!r} signs with key {signer_key.hex()}, not the key "
                    f"{held.key_id.hex()} it holds on this log (replaced since)"
                )
        auth = authorize(auth, seq, record, signer, known)
        if isinstance(record, BaseEvent):
            batch[record.id] = record
        seq += 1
