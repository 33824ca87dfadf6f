"""``export_slice``: a pure read that cuts a transplantable slice out of the three graphs."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from projector.graph.intents import IntentState
from projector.graph.state import GraphState
from projector.graph.tasks import TaskState
from queryd.graph.intents import get_intent_by_id
from queryd.graph.tasks import get_task_by_id, get_tasks_by_intent
from schemas.graph.intents import Intent
from schemas.graph.items import MemoryItem
from schemas.graph.tasks import Task
from schemas.graph.transplant import ExportOptions, MemexExport

__all__ = ["export_slice"]


def _walk(starts: Iterable[str], neighbours: Mapping[str, Iterable[str]]) -> dict[str, None]:
    """Every id reachable from ``starts`` (included) through ``neighbours``; cycle-safe."""
    seen: dict[str, None] = dict.fromkeys(starts)
    queue = deque(seen)
    while queue:
        for nxt in neighbours.get(queue.popleft(), ()):
            if nxt not in seen:
                seen[nxt] = None
                queue.append(nxt)
    return seen


def _resolve_options(options: ExportOptions | Mapping[str, Any] | None, **kw: Any) -> ExportOptions:
    base = ExportOptions() if options is None else ExportOptions.model_validate(options)
    # Explicit keywords override the struct; untouched keywords keep the struct's value.
    overrides = {k: v for k, v in kw.items() if v != ExportOptions.model_fields[k].default}
    overrides = {k: list(v) if k.endswith("_ids") else v for k, v in overrides.items()}
    return base.model_copy(update=overrides) if overrides else base


def export_slice(
    mem_state: GraphState,
    intent_state: IntentState,
    task_state: TaskState,
    *,
    memory_ids: Iterable[str] | None = None,
    intent_ids: Iterable[str] | None = None,
    task_ids: Iterable[str] | None = None,
    include_parents: bool = False,
    include_children: bool = False,
    include_aliases: bool = False,
    include_related_tasks: bool = False,
    include_related_intents: bool = False,
    options: ExportOptions | Mapping[str, Any] | None = None,
) -> MemexExport:
    """Collect a slice of the three graphs; see ``ExportOptions`` for what each option adds.

    ``options`` may carry the same settings as a struct; explicit keywords override it.
    Each list keeps its graph's insertion order (the seed's follow its sets' iteration
    order). Edges travel (active or not) when both endpoints were collected.
    """
    opts = _resolve_options(
        options,
        memory_ids=memory_ids,
        intent_ids=intent_ids,
        task_ids=task_ids,
        include_parents=include_parents,
        include_children=include_children,
        include_aliases=include_aliases,
        include_related_tasks=include_related_tasks,
        include_related_intents=include_related_intents,
    )
    items, edges = mem_state.items, mem_state.edges

    # As the seed collects them: the requested ids whether or not they exist, and what
    # the walks reach from them (an id that is not an item is carried along, and takes
    # edges with it, but lists no memory).
    seeds = list(dict.fromkeys(opts.memory_ids or ()))
    memories: dict[str, None] = dict.fromkeys(seeds)
    if opts.include_parents:
        # Lazy view: only the ancestors actually reached are looked at, no full pass.
        memories.update(_walk(seeds, _ParentsView(items)))
    if opts.include_children:
        children: dict[str, list[str]] = {}
        for item in items.values():
            for p in item.parents or ():
                children.setdefault(p, []).append(item.id)
        memories.update(_walk(seeds, children))
    if opts.include_aliases:
        aliases: dict[str, list[str]] = {}
        for edge in edges.values():
            if edge.active and edge.kind == "ALIAS":
                aliases.setdefault(edge.from_, []).append(edge.to)
                aliases.setdefault(edge.to, []).append(edge.from_)
        memories.update(_walk(list(memories), aliases))

    # Related walks as the seed makes them: intents from the collected memories (their
    # intent_id, and intents whose root_memory_ids name one), then tasks from the memories
    # (their task_id, and tasks whose input or output memory ids name one) and from the
    # collected intents (tasks of an exported intent). Tasks do not pull in intents.
    intents: dict[str, Intent] = {}
    for intent_id in opts.intent_ids or ():
        intent = get_intent_by_id(intent_state, intent_id)
        if intent is not None:
            intents[intent.id] = intent
    if opts.include_related_intents:
        for m in memories:
            found = items.get(m)
            related_intent = None if found is None else found.intent_id
            intent = (
                None if related_intent is None else get_intent_by_id(intent_state, related_intent)
            )
            if intent is not None:
                intents[intent.id] = intent
        for intent in intent_state.intents.values():
            roots = intent.root_memory_ids or ()
            if intent.id not in intents and any(r in memories for r in roots):
                intents[intent.id] = intent

    tasks: dict[str, Task] = {}
    for task_id in opts.task_ids or ():
        task = get_task_by_id(task_state, task_id)
        if task is not None:
            tasks[task.id] = task
    if opts.include_related_tasks:
        for mem_id in memories:
            found = items.get(mem_id)
            related_task = None if found is None else found.task_id
            task = None if related_task is None else get_task_by_id(task_state, related_task)
            if task is not None:
                tasks[task.id] = task
        # The requested intent ids count whether or not they exist (as the seed's).
        for intent_id in dict.fromkeys([*(opts.intent_ids or ()), *intents]):
            tasks.update((t.id, t) for t in get_tasks_by_intent(task_state, intent_id))
        for task in task_state.tasks.values():
            if task.id not in tasks and any(
                m in memories
                for m in (*(task.input_memory_ids or ()), *(task.output_memory_ids or ()))
            ):
                tasks[task.id] = task

    return MemexExport(
        memories=[item for mem_id, item in items.items() if mem_id in memories],
        edges=[e for e in edges.values() if e.from_ in memories and e.to in memories],
        intents=_in_order(intent_state.intents, intents),
        tasks=_in_order(task_state.tasks, tasks),
    )


class _ParentsView(Mapping[str, list[str]]):
    """item id -> its existing parents, computed lazily from the items mapping."""

    def __init__(self, items: Mapping[str, MemoryItem]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> list[str]:
        item = self._items[key]
        return list(item.parents or ())

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def _in_order(source: Mapping[str, Any], chosen: Mapping[str, Any]) -> list[Any]:
    # Sort by the graph's insertion position so the slice lists read like the source.
    position = getattr(source, "position", None)
    if position is not None:
        return [chosen[k] for k in sorted(chosen, key=position)]
    return [v for k, v in source.items() if k in chosen]
