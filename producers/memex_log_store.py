"""`LogGraphs`: the backend of a `MemexStore` on a log, whose mutations are published as envelopes.

A mutation becomes ONE envelope, checked against the state at the log's end and appended
through the log's `transact`; its outcome (lifecycle events, retracted ids, import report)
is what the fold of that record gave. Reads answer from the folded state, so they include
the caller's own writes and, after each call, everything appended before it.

Mutations whose outcome depends on the state follow invariant 12 (see
`projector.record_fold`): the operations of `projector.graph.dispatch.OPERATIONS` marked
``on_log`` (integrity, score and import operations) travel as operation envelopes decided
by the fold in log order; the others, `apply_many` (a callable transform) and
`decay_importance` (the clock), are computed here on the state at the log's end and
published as one batch whose precondition is that the graph has not changed since. A batch
that meets a changed graph is rejected by the fold and recomputed here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

from pydantic import BaseModel

from producers.logs import Log, open_log
from projector.graph.dispatch import (
    OPERATIONS,
    GraphOperation,
    GraphStates,
    Mutation,
    MutationOutcome,
)
from projector.record_fold import BATCH, LogState, PreconditionFailed
from schemas.graph.envelopes import now_iso
from schemas.graph.ids import uuid7
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope, Record

__all__ = ["LogGraphs", "mutation_envelope", "to_jsonable"]

log = logging.getLogger("memstream.producers.memex")

MAX_ATTEMPTS = 8


def to_jsonable(value: Any) -> Any:
    """Models dumped as the TypeScript library writes them; containers converted inside."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def _envelope(namespace: str, type_: str, payload: Any) -> GraphEnvelope:
    return GraphEnvelope(id=uuid7(), namespace=namespace, type=type_, ts=now_iso(), payload=payload)


def mutation_envelope(mutation: Mutation) -> GraphEnvelope:
    """The envelope of a command or of an operation decided by the fold."""
    if isinstance(mutation, GraphOperation):
        if not OPERATIONS[mutation.name].on_log:
            raise ValueError(f"{mutation.name} is published as a batch, not as an operation")
        return _envelope(
            OPERATION_NAMESPACE, f"memstream.{mutation.name}", to_jsonable(dict(mutation.args))
        )
    tag: str = mutation.type
    namespace = "memory" if tag.startswith(("memory.", "edge.")) else tag.split(".", 1)[0]
    return _envelope(namespace, tag, to_jsonable(mutation))


def _batch_commands(
    states: GraphStates, name: str, args: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """What an operation that cannot travel on a log (`apply_many`, `decay_importance`)
    would do on `states`, as commands."""
    _, events, _ = OPERATIONS[name].run(states, args)
    state = states.memory
    author, reason = args.get("author"), args.get("reason")
    retracted = {e.item.id for e in events if e.type == "memory.retracted"}
    commands: list[dict[str, Any]] = []
    for event in events:
        if event.type == "memory.updated":
            old = state.items[event.item.id]
            partial = {k: v for k, v in event.item.__dict__.items() if old.__dict__.get(k) != v}
            command = {"type": "memory.update", "item_id": event.item.id, "partial": partial}
        elif event.type == "memory.retracted":
            command = {"type": "memory.retract", "item_id": event.item.id}
        elif event.type == "edge.retracted" and (
            event.edge.from_ in retracted or event.edge.to in retracted
        ):
            continue  # retracting the item retracts its edges
        else:
            raise ValueError(f"{name} emitted {event.type}; it cannot be published as a batch")
        command["author"] = author
        if reason is not None:
            command["reason"] = reason
        commands.append(to_jsonable(command))
    return commands


class LogGraphs:
    """The `GraphBackend` of a `MemexStore` on a log location (an embedded path or a
    kafka:// URL, or an open `Log`): its graphs are the folded log's."""

    def __init__(self, location: str | PathLike[str] | Log) -> None:
        self.log: Log = open_log(location) if isinstance(location, str | PathLike) else location
        self.location = self.log.location

    def state(self) -> LogState:
        """The folded log: the three graphs, the audit memory, the rejections."""
        return self.log.state()

    def graphs(self) -> GraphStates:
        state = self.log.state()
        return GraphStates(state.graph, state.intents, state.tasks)

    def _publish(self, build: Any) -> MutationOutcome:
        appended, _ = self.log.transact(build)
        lifecycle = appended[0].lifecycle
        events = [e.subject for e in lifecycle if e.subject is not None]
        value = None
        for event in lifecycle:
            if event.type == "operation.applied" and event.extra is not None:
                value = event.extra.get("value")
        return MutationOutcome(events, value)

    def mutate(self, mutation: Mutation) -> MutationOutcome:
        if isinstance(mutation, GraphOperation) and not OPERATIONS[mutation.name].on_log:
            name, args = mutation.name, dict(mutation.args)

            def build(state: LogState) -> tuple[Sequence[Record], None]:
                states = GraphStates(state.graph, state.intents, state.tasks)
                commands = _batch_commands(states, name, args)
                payload = {"commands": commands, "graph_seq": state.graph_seq, "operation": name}
                return [_envelope(OPERATION_NAMESPACE, BATCH, payload)], None

            for attempt in range(1, MAX_ATTEMPTS + 1):
                try:
                    return self._publish(build)
                except PreconditionFailed:
                    if attempt == MAX_ATTEMPTS:
                        raise
                    log.debug("%s: the graph moved under the batch; recomputing", name)
            raise AssertionError("unreachable")
        envelope = mutation_envelope(mutation)
        return self._publish(lambda state: ([envelope], None))

    def close(self) -> None:
        self.log.close()
