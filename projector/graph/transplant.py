"""``import_slice``: a pure state transition that grafts a ``MemexExport`` onto the graphs.

Two passes. The pre-pass decides, per graph and against the target as it was, what becomes
of every incoming entity (create, update, skip, conflict, or re-id), and records the id
map of re-id'd entities. The write pass remaps every cross-reference (parents, parent_id,
intent_id, task_id, memory-id lists, edge endpoints) through those maps and applies the
result: memories and edges through the memory graph's own commands, intents and tasks
through their graphs' create commands or a whole-entity replacement.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel

from projector.graph.intents import IntentState, apply_intent_command, put_intent
from projector.graph.reducer import apply_command
from projector.graph.state import GraphState
from projector.graph.tasks import TaskState, apply_task_command, put_task
from schemas.graph.commands import EdgeCreate, EdgeUpdate, MemoryCreate, MemoryUpdate
from schemas.graph.ids import now_ms, safe_extract_timestamp
from schemas.graph.intents import IntentCreate
from schemas.graph.tasks import TaskCreate
from schemas.graph.transplant import ImportBucket, ImportOptions, ImportReport, MemexExport

__all__ = ["ImportResult", "import_slice", "derive_reid"]

M = TypeVar("M", bound=BaseModel)
Action = Literal["create", "update", "skip", "conflict", "reid"]
_IMPORT_REASON = "import_slice"
_MAX_MS = (1 << 48) - 1


class ImportResult(NamedTuple):
    """The three new states and where each incoming entity went."""

    mem_state: GraphState
    intent_state: IntentState
    task_state: TaskState
    report: ImportReport


def derive_reid(original: str, taken: Callable[[str], bool]) -> str:
    """A UUIDv7-shaped id 1 ms after ``original``'s timestamp, not ``taken``.

    The 74 "random" bits are a hash of the original id (and a counter on a clash), so the
    same import into the same state mints the same ids: a fold that replays it agrees.
    An original that is not a UUIDv7 has no timestamp; the wall clock is used instead.
    """
    ts = safe_extract_timestamp(original)
    ms = min((ts + 1) if ts is not None else now_ms(), _MAX_MS)
    counter = 0
    while True:
        digest = hashlib.sha256(f"memstream.reid:{original}:{counter}".encode()).digest()
        rand = int.from_bytes(digest[:10], "big")
        value = (
            (ms << 80)
            | (0x7 << 76)
            | ((rand >> 68) << 64)  # rand_a, 12 bits
            | (0b10 << 62)  # RFC 9562 variant
            | (rand & ((1 << 62) - 1))  # rand_b, 62 bits
        )
        h = f"{value:032x}"
        new_id = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        if not taken(new_id):
            return new_id
        counter += 1


@dataclass
class _Plan:
    """The pre-pass's decision for one graph."""

    steps: list[tuple[Any, Action]] = field(default_factory=list)
    remap: dict[str, str] = field(default_factory=dict)


def _same(a: BaseModel, b: BaseModel) -> bool:
    # Shallow compare: every top-level field by value, as the entity was exported.
    return a.model_dump() == b.model_dump()


def _plan(
    entities: Iterable[M],
    id_of: Callable[[M], str],
    existing: Mapping[str, M],
    slice_ids: set[str],
    opts: ImportOptions,
) -> _Plan:
    compare = opts.shallow_compare_existing or opts.re_id_on_difference
    plan = _Plan()
    first: dict[str, M] = {}
    minted: set[str] = set()

    def taken(candidate: str) -> bool:
        return candidate in existing or candidate in slice_ids or candidate in minted

    for entity in entities:
        eid = id_of(entity)
        earlier = first.get(eid)
        if earlier is not None:
            # A repeated id inside the slice: the first occurrence wins, never written twice.
            plan.steps.append((entity, "skip" if _same(earlier, entity) else "conflict"))
            continue
        first[eid] = entity
        old = existing.get(eid)
        action: Action
        if old is None:
            action = "create"
        elif compare and _same(old, entity):
            action = "skip"
        elif compare and opts.re_id_on_difference:
            action = "reid"
            new_id = derive_reid(eid, taken)
            minted.add(new_id)
            plan.remap[eid] = new_id
        elif opts.skip_existing_ids:
            action = "conflict" if compare else "skip"
        else:
            action = "update"
        plan.steps.append((entity, action))
    return plan


def _ids(values: list[str] | None, remap: Mapping[str, str]) -> list[str] | None:
    if values is None or not remap:
        return values
    return [remap.get(v, v) for v in values]


def _one(value: str | None, remap: Mapping[str, str]) -> str | None:
    return remap.get(value, value) if value is not None else None


def _rewrite(entity: M, update: dict[str, Any]) -> M:
    changed = {k: v for k, v in update.items() if getattr(entity, k) != v}
    return entity.model_copy(update=changed) if changed else entity


class _Buckets:
    def __init__(self) -> None:
        self.lists: dict[str, dict[str, list[str]]] = {
            b: {"memories": [], "intents": [], "tasks": [], "edges": []}
            for b in ("created", "updated", "skipped", "conflicts")
        }

    def add(self, bucket: str, graph: str, entity_id: str) -> None:
        self.lists[bucket][graph].append(entity_id)

    def report(self) -> ImportReport:
        return ImportReport(**{b: ImportBucket(**g) for b, g in self.lists.items()})


_BUCKET_OF: dict[Action, str] = {
    "create": "created",
    "update": "updated",
    "skip": "skipped",
    "conflict": "conflicts",
}


def import_slice(
    mem_state: GraphState,
    intent_state: IntentState,
    task_state: TaskState,
    slice: MemexExport | Mapping[str, Any],
    *,
    skip_existing_ids: bool = True,
    shallow_compare_existing: bool = False,
    re_id_on_difference: bool = False,
    options: ImportOptions | Mapping[str, Any] | None = None,
) -> ImportResult:
    """Import ``slice`` into the three graphs; the input states are never modified.

    Per incoming entity whose id is new to its graph: created. Whose id exists:

    1. compared (``shallow_compare_existing`` or ``re_id_on_difference``) and identical,
       field by field as exported: skipped;
    2. compared, different, ``re_id_on_difference``: created under a fresh UUIDv7-shaped
       id 1 ms after the original (see ``derive_reid``); the original id is reported in
       conflicts and the new one in created;
    3. else with ``skip_existing_ids``: left alone, reported skipped (not compared) or in
       conflicts (compared and different);
    4. else: overwritten, reported updated. Memories and edges are overwritten through
       ``memory.update`` / ``edge.update`` (authored by the incoming entity's author), so
       the seed's update rules hold: id/created_at and edge_id are kept, content/meta
       merge keys. An edge whose endpoints differ cannot be updated: it is a conflict.
       Intents and tasks are replaced whole, status included.

    Every reference in the slice to a re-id'd entity is remapped, in every graph. An id
    repeated inside the slice is imported once (its first occurrence); later copies are
    skipped when identical and conflicts otherwise. ``options`` may carry the settings as
    a struct; explicit keywords override it. Nothing in the slice is validated against
    the target (dangling parents or endpoints are imported as they are, as the seed's
    create commands allow).
    """
    export = slice if isinstance(slice, MemexExport) else MemexExport.model_validate(slice)
    opts = ImportOptions() if options is None else ImportOptions.model_validate(options)
    kw = {
        "skip_existing_ids": skip_existing_ids,
        "shallow_compare_existing": shallow_compare_existing,
        "re_id_on_difference": re_id_on_difference,
    }
    overrides = {k: v for k, v in kw.items() if v != ImportOptions.model_fields[k].default}
    opts = opts.model_copy(update=overrides) if overrides else opts

    # Pre-pass: every graph's fate and id map, decided against the target as it was.
    mem_plan = _plan(
        export.memories, lambda m: m.id, mem_state.items, {m.id for m in export.memories}, opts
    )
    edge_plan = _plan(
        export.edges, lambda e: e.edge_id, mem_state.edges, {e.edge_id for e in export.edges}, opts
    )
    intent_plan = _plan(
        export.intents, lambda i: i.id, intent_state.intents, {i.id for i in export.intents}, opts
    )
    task_plan = _plan(
        export.tasks, lambda t: t.id, task_state.tasks, {t.id for t in export.tasks}, opts
    )
    mems, edges, intents, tasks = (
        mem_plan.remap,
        edge_plan.remap,
        intent_plan.remap,
        task_plan.remap,
    )
    out = _Buckets()

    def record(graph: str, action: Action, original: str, written: str) -> None:
        if action == "reid":
            out.add("conflicts", graph, original)
            out.add("created", graph, written)
        else:
            out.add(_BUCKET_OF[action], graph, original)

    def writes(action: Action) -> bool:
        return action in ("create", "reid", "update")

    # Write pass. Intents, then tasks, then memories, then edges: referents land first.
    for intent, action in intent_plan.steps:
        new = _rewrite(
            intent,
            {
                "id": intents.get(intent.id, intent.id),
                "parent_id": _one(intent.parent_id, intents),
                "root_memory_ids": _ids(intent.root_memory_ids, mems),
            },
        )
        if action == "update":
            intent_state = put_intent(intent_state, new)
        elif writes(action):
            intent_state = apply_intent_command(intent_state, IntentCreate(intent=new)).state
        record("intents", action, intent.id, new.id)

    for task, action in task_plan.steps:
        new = _rewrite(
            task,
            {
                "id": tasks.get(task.id, task.id),
                "intent_id": intents.get(task.intent_id, task.intent_id),
                "parent_id": _one(task.parent_id, tasks),
                "input_memory_ids": _ids(task.input_memory_ids, mems),
                "output_memory_ids": _ids(task.output_memory_ids, mems),
            },
        )
        if action == "update":
            task_state = put_task(task_state, new)
        elif writes(action):
            task_state = apply_task_command(task_state, TaskCreate(task=new)).state
        record("tasks", action, task.id, new.id)

    for item, action in mem_plan.steps:
        new_item = _rewrite(
            item,
            {
                "id": mems.get(item.id, item.id),
                "parents": _ids(item.parents, mems),
                "intent_id": _one(item.intent_id, intents),
                "task_id": _one(item.task_id, tasks),
            },
        )
        if action == "update":
            partial = new_item.model_dump(exclude={"id", "created_at"})
            cmd: Any = MemoryUpdate(
                item_id=item.id, partial=partial, author=item.author, reason=_IMPORT_REASON
            )
            mem_state = apply_command(mem_state, cmd).state
        elif writes(action):
            mem_state = apply_command(mem_state, MemoryCreate(item=new_item)).state
        record("memories", action, item.id, new_item.id)

    for edge, action in edge_plan.steps:
        new_edge = _rewrite(
            edge,
            {
                "edge_id": edges.get(edge.edge_id, edge.edge_id),
                "from_": mems.get(edge.from_, edge.from_),
                "to": mems.get(edge.to, edge.to),
            },
        )
        if action == "update":
            old = mem_state.edges[edge.edge_id]
            if (old.from_, old.to) != (new_edge.from_, new_edge.to):
                action = "conflict"  # endpoints are immutable under edge.update
            else:
                partial = new_edge.model_dump(exclude={"edge_id", "from_", "to"})
                cmd = EdgeUpdate(
                    edge_id=edge.edge_id, partial=partial, author=edge.author, reason=_IMPORT_REASON
                )
                mem_state = apply_command(mem_state, cmd).state
        elif writes(action):
            mem_state = apply_command(mem_state, EdgeCreate(edge=new_edge)).state
        record("edges", action, edge.edge_id, new_edge.edge_id)

    return ImportResult(mem_state, intent_state, task_state, out.report())
