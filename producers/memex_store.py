"""MemexStore: a mutable facade over the three pure graphs (memory, intent, task).

A store is ONE class over a backend (`GraphBackend`): where its three graphs live and where
its mutations go. Every mutation is a ``Mutation`` value (a command of one of the graphs,
or a ``GraphOperation`` naming an integrity, bulk or import operation with its arguments)
and goes through ONE door, the backend's ``mutate``; every read uses the backend's current
graphs. `InMemoryGraphs` folds the mutation with the pure ``apply_mutation`` and rebinds
the graphs; `LogGraphs` (``producers.memex_log_store``, what ``MemexStore.open`` uses)
publishes it to a log and answers from the folded log.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from producers.logs import Log
from producers.memex_log_store import LogGraphs
from projector.graph.dispatch import (
    GraphOperation,
    GraphStates,
    Mutation,
    MutationOutcome,
    OperationName,
    apply_mutation,
)
from projector.graph.intents import IntentState, create_intent, create_intent_state
from projector.graph.selection import get_item_by_id, get_items
from projector.graph.serialization import SerializedGraphState, parse, stringify, to_json
from projector.graph.state import GraphState, create_graph_state
from projector.graph.tasks import TaskState, create_task, create_task_state
from projector.record_fold import LogState
from queryd.graph.edges import get_edges
from queryd.graph.integrity import get_alias_group, get_aliases, get_contradictions, get_stale_items
from queryd.graph.intents import get_intents
from queryd.graph.navigation import Direction, get_children, get_parents, get_related_items
from queryd.graph.retrieval import SupportNode, get_support_set, get_support_tree, smart_retrieve
from queryd.graph.scoring import get_scored_items
from queryd.graph.stats import get_stats
from queryd.graph.tasks import get_tasks
from queryd.graph.transplant import export_slice
from schemas.graph.commands import (
    MEMORY_COMMAND_TYPES,
    EdgeCreate,
    MemoryCommand,
    MemoryCommandAdapter,
    MemoryCreate,
    MemoryLifecycleEvent,
    MemoryRetract,
    MemoryUpdate,
)
from schemas.graph.filters import (
    EdgeFilter,
    MemoryFilter,
    QueryOptions,
    ScoreAdjustment,
    ScoredQueryOptions,
)
from schemas.graph.intents import (
    Intent,
    IntentCommand,
    IntentCommandAdapter,
    IntentCreate,
    IntentFilter,
    IntentLifecycleEvent,
)
from schemas.graph.items import Edge, MemoryItem, create_edge, create_memory_item
from schemas.graph.results import Contradiction, GraphStats, ScoredItem, StaleItem
from schemas.graph.scoring import ScoreWeights
from schemas.graph.tasks import (
    Task,
    TaskCommand,
    TaskCommandAdapter,
    TaskCreate,
    TaskFilter,
    TaskLifecycleEvent,
)
from schemas.graph.transplant import ImportReport, MemexExport

__all__ = ["GraphBackend", "InMemoryGraphs", "MemexStore"]


class GraphBackend(Protocol):
    """Where a `MemexStore`'s three graphs live and where its mutations go."""

    def graphs(self) -> GraphStates:
        """The current memory, intent and task graphs (immutable values)."""
        ...

    def mutate(self, mutation: Mutation) -> MutationOutcome:
        """Apply ``mutation``; what it emitted, and its value when it has one."""
        ...

    def close(self) -> None: ...


class InMemoryGraphs:
    """The three graphs held in this process, rebound on each mutation."""

    def __init__(self, graphs: GraphStates) -> None:
        self.current = graphs

    def graphs(self) -> GraphStates:
        return self.current

    def mutate(self, mutation: Mutation) -> MutationOutcome:
        memory, intents, tasks, outcome = apply_mutation(*self.current, mutation)
        self.current = GraphStates(memory, intents, tasks)
        return outcome

    def close(self) -> None:
        pass


class MemexStore:
    """Holds the memory, intent and task states and rebinds them on each mutation.

    ``store.mem``, ``store.intents`` and ``store.tasks`` are the live (immutable) states.
    ``MemexStore()`` keeps them in memory; ``MemexStore.open(location)`` on a log, and
    ``backend`` puts the store over any `GraphBackend`.
    """

    def __init__(
        self,
        mem: GraphState | None = None,
        intents: IntentState | None = None,
        tasks: TaskState | None = None,
        *,
        backend: GraphBackend | None = None,
    ) -> None:
        if backend is None:
            backend = InMemoryGraphs(
                GraphStates(
                    mem if mem is not None else create_graph_state(),
                    intents if intents is not None else create_intent_state(),
                    tasks if tasks is not None else create_task_state(),
                )
            )
        elif mem is not None or intents is not None or tasks is not None:
            raise TypeError("MemexStore takes initial states or a backend, not both")
        self._backend = backend

    @property
    def backend(self) -> GraphBackend:
        return self._backend

    @property
    def mem(self) -> GraphState:
        return self._backend.graphs().memory

    @mem.setter
    def mem(self, value: GraphState) -> None:
        self._in_memory().current = self._in_memory().current._replace(memory=value)

    @property
    def intents(self) -> IntentState:
        return self._backend.graphs().intents

    @intents.setter
    def intents(self, value: IntentState) -> None:
        self._in_memory().current = self._in_memory().current._replace(intents=value)

    @property
    def tasks(self) -> TaskState:
        return self._backend.graphs().tasks

    @tasks.setter
    def tasks(self, value: TaskState) -> None:
        self._in_memory().current = self._in_memory().current._replace(tasks=value)

    def _in_memory(self) -> InMemoryGraphs:
        if not isinstance(self._backend, InMemoryGraphs):
            raise AttributeError("the graphs of a store on a log are the log's; mutate them")
        return self._backend

    def _on_log(self) -> LogGraphs:
        if not isinstance(self._backend, LogGraphs):
            raise AttributeError("an in-memory MemexStore is on no log")
        return self._backend

    # -- on a log -------------------------------------------------------------------------------

    @property
    def log(self) -> Log:
        """The log a store from ``MemexStore.open`` publishes to."""
        return self._on_log().log

    @property
    def location(self) -> str:
        return self._on_log().location

    def state(self) -> LogState:
        """The folded log: the three graphs, the audit memory, the rejections."""
        return self._on_log().state()

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> MemexStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if isinstance(self._backend, LogGraphs):
            return f"MemexStore.open({self._backend.location!r})"
        return object.__repr__(self)

    # -- the one door for mutations -----------------------------------------------------------

    def _mutate(self, mutation: Mutation) -> MutationOutcome:
        return self._backend.mutate(mutation)

    def _op(self, name: OperationName, **args: Any) -> MutationOutcome:
        return self._mutate(GraphOperation(name, args))

    # -- memory -------------------------------------------------------------------------------

    def apply(self, cmd: MemoryCommand | Mapping[str, Any]) -> list[MemoryLifecycleEvent]:
        """Apply any memory command (model or dict); returns its lifecycle events."""
        command = (
            cmd
            if isinstance(cmd, MEMORY_COMMAND_TYPES)
            else MemoryCommandAdapter.validate_python(cmd)
        )
        return self._mutate(command).events

    def create(self, **kwargs: Any) -> MemoryItem:
        """``create_memory_item(**kwargs)``, then create it in the graph."""
        return self.add(create_memory_item(**kwargs))

    def add(self, item: MemoryItem) -> MemoryItem:
        """Create an existing MemoryItem in the graph (DuplicateMemoryError on a clash)."""
        self._mutate(MemoryCreate(item=item))
        return item

    def update(
        self, item_id: str, partial: dict[str, Any], author: str, reason: str | None = None
    ) -> list[MemoryLifecycleEvent]:
        cmd = MemoryUpdate(item_id=item_id, partial=partial, author=author, reason=reason)
        return self._mutate(cmd).events

    def retract(
        self, item_id: str, author: str, reason: str | None = None
    ) -> list[MemoryLifecycleEvent]:
        return self._mutate(MemoryRetract(item_id=item_id, author=author, reason=reason)).events

    def add_edge(self, **kwargs: Any) -> Edge:
        """``create_edge(**kwargs)``, then create it in the graph."""
        edge = create_edge(**kwargs)
        self._mutate(EdgeCreate(edge=edge))
        return edge

    def items(
        self,
        filter: MemoryFilter | Mapping[str, Any] | None = None,
        options: QueryOptions | Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        return get_items(self.mem, filter, options)

    def item(self, id: str) -> MemoryItem | None:
        return get_item_by_id(self.mem, id)

    def scored(
        self,
        weights: ScoreWeights | Mapping[str, Any],
        options: ScoredQueryOptions | Mapping[str, Any] | None = None,
    ) -> list[ScoredItem]:
        return get_scored_items(self.mem, weights, options)

    def edges(self, filter: EdgeFilter | Mapping[str, Any] | None = None) -> list[Edge]:
        return get_edges(self.mem, filter)

    def parents(self, item_id: str) -> list[MemoryItem]:
        return get_parents(self.mem, item_id)

    def children(self, item_id: str) -> list[MemoryItem]:
        return get_children(self.mem, item_id)

    def related(self, item_id: str, direction: Direction = "both") -> list[MemoryItem]:
        return get_related_items(self.mem, item_id, direction)

    def smart_retrieve(self, **kwargs: Any) -> list[ScoredItem]:
        return smart_retrieve(self.mem, **kwargs)

    def support_tree(self, item_id: str) -> SupportNode | None:
        return get_support_tree(self.mem, item_id)

    def support_set(self, item_id: str) -> list[MemoryItem]:
        return get_support_set(self.mem, item_id)

    def stats(self) -> GraphStats:
        return get_stats(self.mem)

    # -- integrity ----------------------------------------------------------------------------

    def mark_contradiction(
        self, a: str, b: str, author: str, meta: dict[str, Any] | None = None
    ) -> list[MemoryLifecycleEvent]:
        return self._op(
            "mark_contradiction", item_id_a=a, item_id_b=b, author=author, meta=meta
        ).events

    def resolve_contradiction(
        self, winner: str, loser: str, author: str, reason: str | None = None
    ) -> list[MemoryLifecycleEvent]:
        return self._op(
            "resolve_contradiction", winner_id=winner, loser_id=loser, author=author, reason=reason
        ).events

    def mark_alias(
        self, a: str, b: str, author: str, meta: dict[str, Any] | None = None
    ) -> list[MemoryLifecycleEvent]:
        return self._op("mark_alias", item_id_a=a, item_id_b=b, author=author, meta=meta).events

    def cascade_retract(self, item_id: str, author: str, reason: str | None = None) -> list[str]:
        """Retract the item and its transitive dependents; returns the retracted ids."""
        outcome = self._op("cascade_retract", item_id=item_id, author=author, reason=reason)
        return outcome.value

    def contradictions(self) -> list[Contradiction]:
        return get_contradictions(self.mem)

    def stale_items(self) -> list[StaleItem]:
        return get_stale_items(self.mem)

    def aliases(self, item_id: str) -> list[MemoryItem]:
        return get_aliases(self.mem, item_id)

    def alias_group(self, item_id: str) -> list[MemoryItem]:
        return get_alias_group(self.mem, item_id)

    # -- bulk ---------------------------------------------------------------------------------

    def apply_many(
        self,
        filter: MemoryFilter | Mapping[str, Any] | None,
        transform: Callable[[MemoryItem], dict[str, Any] | None],
        author: str,
        reason: str | None = None,
        options: QueryOptions | Mapping[str, Any] | None = None,
    ) -> list[MemoryLifecycleEvent]:
        return self._op(
            "apply_many",
            filter=filter,
            transform=transform,
            author=author,
            reason=reason,
            options=options,
        ).events

    def bulk_adjust_scores(
        self,
        criteria: MemoryFilter | Mapping[str, Any],
        delta: ScoreAdjustment | Mapping[str, Any],
        author: str,
        reason: str | None = None,
    ) -> list[MemoryLifecycleEvent]:
        return self._op(
            "bulk_adjust_scores", criteria=criteria, delta=delta, author=author, reason=reason
        ).events

    def decay_importance(
        self, older_than_ms: int, factor: float, author: str, reason: str | None = None
    ) -> list[MemoryLifecycleEvent]:
        return self._op(
            "decay_importance",
            older_than_ms=older_than_ms,
            factor=factor,
            author=author,
            reason=reason,
        ).events

    # -- intents and tasks --------------------------------------------------------------------

    def apply_intent(self, cmd: IntentCommand | Mapping[str, Any]) -> list[IntentLifecycleEvent]:
        command = IntentCommandAdapter.validate_python(cmd)
        return self._mutate(command).events

    def create_intent(self, **kwargs: Any) -> Intent:
        """``create_intent(**kwargs)``, then create it in the intent graph."""
        intent = create_intent(**kwargs)
        self._mutate(IntentCreate(intent=intent))
        return intent

    def get_intents(self, filter: IntentFilter | Mapping[str, Any] | None = None) -> list[Intent]:
        return get_intents(self.intents, filter)

    def apply_task(self, cmd: TaskCommand | Mapping[str, Any]) -> list[TaskLifecycleEvent]:
        command = TaskCommandAdapter.validate_python(cmd)
        return self._mutate(command).events

    def create_task(self, **kwargs: Any) -> Task:
        """``create_task(**kwargs)``, then create it in the task graph."""
        task = create_task(**kwargs)
        self._mutate(TaskCreate(task=task))
        return task

    def get_tasks(self, filter: TaskFilter | Mapping[str, Any] | None = None) -> list[Task]:
        return get_tasks(self.tasks, filter)

    # -- transplant and serialization ---------------------------------------------------------

    def export_slice(self, **kwargs: Any) -> MemexExport:
        return export_slice(self.mem, self.intents, self.tasks, **kwargs)

    def import_slice(self, slice: MemexExport | Mapping[str, Any], **kwargs: Any) -> ImportReport:
        """Import ``slice`` into this store's three graphs; returns the report."""
        sl = slice if isinstance(slice, MemexExport) else MemexExport.model_validate(slice)
        return self._op("import_slice", slice=sl, **kwargs).value

    def to_json(self) -> SerializedGraphState:
        """The memory graph in the TS library's on-disk shape."""
        return to_json(self.mem)

    def dumps(self, pretty: bool = False) -> str:
        """The memory graph as a JSON string (as ``stringify``)."""
        return stringify(self.mem, pretty=pretty)

    @classmethod
    def open(cls, location: str) -> MemexStore:
        """The store on a log: an embedded path or ``kafka://HOST:PORT/LOG?redis=...``.

        Mutations are published as envelopes; reads answer from the folded log, own
        writes included (see ``producers.memex_log_store``).
        """
        return cls(backend=LogGraphs(location))

    @classmethod
    def loads(cls, json_str: str) -> MemexStore:
        """A store whose memory graph is parsed from ``json_str`` (intent/task graphs empty)."""
        return cls(mem=parse(json_str))
