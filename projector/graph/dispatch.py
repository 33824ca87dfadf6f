"""The graph mutation dispatch: which pure function applies a mutation to the three graphs.

A mutation is a command of one of the graphs (memory and edge commands, intent commands,
task commands; a model, or its JSON object) or a `GraphOperation`, naming an integrity,
bulk or import operation with its keyword arguments. `OPERATIONS` is the one table of
operations: `MemexStore` applies them in memory through `apply_mutation`, and the record
fold (`projector.record_fold`) applies those marked ``on_log`` when they arrive as
operation envelopes. Both apply commands with `apply_graph_command`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from projector.graph.bulk import apply_many, bulk_adjust_scores, decay_importance
from projector.graph.integrity import (
    cascade_retract,
    mark_alias,
    mark_contradiction,
    resolve_contradiction,
)
from projector.graph.intents import IntentState, apply_intent_command
from projector.graph.reducer import apply_command
from projector.graph.state import GraphState
from projector.graph.tasks import TaskState, apply_task_command
from projector.graph.transplant import import_slice
from schemas.errors import MemstreamError
from schemas.graph.commands import MemoryCommand, MemoryCommandAdapter
from schemas.graph.intents import IntentCommand, IntentCommandAdapter
from schemas.graph.tasks import TaskCommand, TaskCommandAdapter

__all__ = [
    "GraphStates",
    "Applied",
    "Operation",
    "OperationName",
    "OPERATIONS",
    "GraphOperation",
    "Mutation",
    "MutationOutcome",
    "MutationResult",
    "UnknownCommandError",
    "apply_graph_command",
    "apply_mutation",
    "coerce_mutation",
]


class UnknownCommandError(MemstreamError, ValueError):
    """A command or operation whose type this dispatch does not know."""


class GraphStates(NamedTuple):
    """The three graphs a mutation applies to."""

    memory: GraphState
    intents: IntentState
    tasks: TaskState


class Applied(NamedTuple):
    """The graphs after a mutation, the lifecycle events it emitted, and its value when it
    has one (an operation's retracted ids or import report)."""

    states: GraphStates
    events: list[Any]
    value: Any = None


OperationName = Literal[
    "mark_contradiction",
    "resolve_contradiction",
    "mark_alias",
    "cascade_retract",
    "apply_many",
    "bulk_adjust_scores",
    "decay_importance",
    "import_slice",
]


@dataclass(frozen=True, slots=True)
class Operation:
    """One entry of the operation table.

    ``run(states, args)`` applies the pure function of the operation's name, ``args``
    being its keyword arguments minus the states. ``mints_edges``: it creates edges whose
    ids come from the clock and randomness (a fold renames them to ids derived from the
    record). ``on_log``: a function of the state and plain-data arguments alone, so it may
    travel on a log as one operation envelope, decided by the fold; the others (a callable
    transform, the clock) are resolved into commands by their publisher.
    """

    run: Callable[[GraphStates, Mapping[str, Any]], Applied]
    mints_edges: bool = False
    on_log: bool = True


def _on_memory(function: Callable[..., Any]) -> Callable[[GraphStates, Mapping[str, Any]], Applied]:
    """An operation of the memory graph alone, returning (state, events)."""

    def run(states: GraphStates, args: Mapping[str, Any]) -> Applied:
        memory, events = function(states.memory, **args)
        return Applied(GraphStates(memory, states.intents, states.tasks), list(events))

    return run


def _cascade_retract(states: GraphStates, args: Mapping[str, Any]) -> Applied:
    result = cascade_retract(states.memory, **args)
    return Applied(
        GraphStates(result.state, states.intents, states.tasks),
        list(result.events),
        list(result.retracted),
    )


def _import_slice(states: GraphStates, args: Mapping[str, Any]) -> Applied:
    result = import_slice(*states, **args)
    return Applied(
        GraphStates(result.mem_state, result.intent_state, result.task_state), [], result.report
    )


OPERATIONS: dict[str, Operation] = {
    "cascade_retract": Operation(_cascade_retract),
    "resolve_contradiction": Operation(_on_memory(resolve_contradiction), mints_edges=True),
    "mark_contradiction": Operation(_on_memory(mark_contradiction), mints_edges=True),
    "mark_alias": Operation(_on_memory(mark_alias), mints_edges=True),
    "bulk_adjust_scores": Operation(_on_memory(bulk_adjust_scores)),
    "import_slice": Operation(_import_slice),
    "apply_many": Operation(_on_memory(apply_many), on_log=False),  # a callable transform
    "decay_importance": Operation(_on_memory(decay_importance), on_log=False),  # the clock
}


def apply_graph_command(states: GraphStates, command: Any) -> Applied:
    """One memory, intent or task command (a model or its JSON object) on the graph its
    ``type`` prefix names (``memory.``/``edge.``, ``intent.``, ``task.``)."""
    if isinstance(command, Mapping):
        tag = command.get("type")
    else:
        tag = getattr(command, "type", None)
    if not isinstance(tag, str):
        raise UnknownCommandError("a command must be an object with a string 'type'")
    memory, intents, tasks = states
    if tag.startswith(("memory.", "edge.")):
        if isinstance(command, Mapping):
            command = MemoryCommandAdapter.validate_python(command)
        memory, events = apply_command(memory, command)
        return Applied(GraphStates(memory, intents, tasks), list(events))
    if tag.startswith("intent."):
        intents, intent_events = apply_intent_command(intents, command)
        return Applied(GraphStates(memory, intents, tasks), list(intent_events))
    if tag.startswith("task."):
        tasks, task_events = apply_task_command(tasks, command)
        return Applied(GraphStates(memory, intents, tasks), list(task_events))
    raise UnknownCommandError(f"unknown command type {tag!r}")


# --- mutations, as MemexStore applies them -------------------------------------------------------


@dataclass(frozen=True)
class GraphOperation:
    """A mutation that is not one command: its outcome depends on the state it meets.

    ``args`` are the keyword arguments of the pure function of the same name, minus the
    states. All are plain data except ``apply_many``'s ``transform`` (a callable): a log
    must resolve that one into commands before publishing.
    """

    name: OperationName
    args: Mapping[str, Any] = field(default_factory=dict)


Mutation = MemoryCommand | IntentCommand | TaskCommand | GraphOperation


@dataclass(frozen=True)
class MutationOutcome:
    """What a mutation emitted, and its value when it has one (retracted ids, a report)."""

    events: list[Any]
    value: Any = None


class MutationResult(NamedTuple):
    mem: GraphState
    intents: IntentState
    tasks: TaskState
    outcome: MutationOutcome


def coerce_mutation(mutation: Mutation | Mapping[str, Any]) -> Mutation:
    """A typed mutation; a dict is a command of the graph its ``type`` prefix names."""
    if not isinstance(mutation, Mapping):
        return mutation
    tag = str(mutation.get("type", ""))
    if tag.startswith("intent."):
        return IntentCommandAdapter.validate_python(mutation)
    if tag.startswith("task."):
        return TaskCommandAdapter.validate_python(mutation)
    return MemoryCommandAdapter.validate_python(mutation)


def apply_mutation(
    mem: GraphState,
    intents: IntentState,
    tasks: TaskState,
    mutation: Mutation | Mapping[str, Any],
) -> MutationResult:
    """Fold one mutation into the three states (pure: the inputs are never modified).

    A dict is validated as a command of the graph its ``type`` prefix names.
    """
    mutation = coerce_mutation(mutation)
    states = GraphStates(mem, intents, tasks)
    if isinstance(mutation, GraphOperation):
        applied = OPERATIONS[mutation.name].run(states, mutation.args)
    else:
        applied = apply_graph_command(states, mutation)
    return MutationResult(*applied.states, MutationOutcome(applied.events, applied.value))
