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
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, NamedTuple, TypeVar

from pydantic import BaseModel

from projector.graph.intents import IntentState, apply_intent_command
from projector.graph.reducer import apply_command
from projector.graph.state import GraphState
from projector.graph.tasks import TaskState, apply_task_command
from schemas.graph.commands import EdgeCreate, EdgeUpdate, MemoryCreate, MemoryUpdate
from schemas.graph.ids import safe_extract_timestamp
from schemas.graph.intents import IntentCreate, IntentUpdate
from schemas.graph.tasks import TaskCreate, TaskUpdate
from schemas.graph.transplant import ImportBucket, ImportOptions, ImportReport, MemexExport

__all__ = ["ImportResult", "import_slice", "derive_reid", "reid_candidates"]

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


def derive_reid(original: str, created_at: int | None, taken: Callable[[str], bool]) -> str:
    """A UUIDv7 1 ms after the original entity's time (its ``created_at``, else its id's
    UUIDv7 timestamp), not ``taken``. The seed's ValueError when the entity has neither.

    The 74 "random" bits are a hash of the original id (and a counter on a clash), so the
    same import into the same state mints the same ids: a fold that replays it agrees.
    """
    for new_id in reid_candidates(original, created_at):
        if not taken(new_id):
            return new_id
    raise AssertionError("unreachable: the candidates never end")  # pragma: no cover


def reid_candidates(original: str, created_at: int | None) -> Iterator[str]:
    """The ids `derive_reid` tries for `original`, in order (endless): the first one not
    taken is the one it mints."""
    ts = created_at if created_at is not None else safe_extract_timestamp(original)
    if ts is None:
        raise ValueError(f'Cannot re-id "{original}": provide created_at or use a UUIDv7 id')
    ms = (ts + 1) & _MAX_MS
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
        yield f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
        counter += 1


def _same(a: BaseModel, b: BaseModel) -> bool:
    # Shallow compare: every top-level field by value, as the entity was exported.
    return a.model_dump() == b.model_dump()


def _mint(
    entities: Iterable[M],
    id_of: Callable[[M], str],
    existing: Mapping[str, M],
    opts: ImportOptions,
) -> dict[str, str]:
    """The pre-pass: the fresh id of every incoming entity that the target (as it was)
    holds under its id, different, when the options re-id differences."""
    remap: dict[str, str] = {}
    if not (opts.skip_existing_ids and opts.shallow_compare_existing and opts.re_id_on_difference):
        return remap
    minted: set[str] = set()

    def taken(candidate: str) -> bool:
        return candidate in existing or candidate in minted

    for entity in entities:
        eid = id_of(entity)
        old = existing.get(eid)
        if old is None or _same(old, entity) or eid in remap:
            continue
        new_id = derive_reid(eid, getattr(entity, "created_at", None), taken)
        minted.add(new_id)
        remap[eid] = new_id
    return remap


def _decide(old: BaseModel | None, entity: BaseModel, opts: ImportOptions) -> Action:
    """The seed's decision for one entity against the graph as the import left it so far:
    without ``skip_existing_ids`` an existing id is always updated; with it, it is
    compared only under ``shallow_compare_existing``."""
    if old is None:
        return "create"
    if not opts.skip_existing_ids:
        return "update"
    if opts.shallow_compare_existing:
        if _same(old, entity):
            return "skip"
        return "reid" if opts.re_id_on_difference else "conflict"
    return "skip"


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
    "reid": "created",
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
    """Import ``slice`` into the three graphs, as the seed does; the input states are never
    modified (a graph the slice does not change comes back as the same object).

    Graphs are taken in the order memories, edges, intents, tasks; entities one by one,
    each against its graph as the import has left it so far (an id repeated inside the
    slice meets its earlier copy). An entity whose id is new is created. Whose id exists:

    1. without ``skip_existing_ids``: updated;
    2. with it and ``shallow_compare_existing``: identical (every field, as exported):
       skipped; different and ``re_id_on_difference``: created under a fresh UUIDv7 id
       1 ms after the original's time (``created_at``, else its id's UUIDv7 timestamp;
       ValueError ``Cannot re-id "<id>": provide created_at or use a UUIDv7 id`` when it
       has neither), reported in created; different otherwise: a conflict;
    3. with it alone: skipped.

    Updated means the seed's update of the existing entity with the incoming one's fields
    that are not None (memories and edges through the memory.update / edge.update merge
    rules; intents and tasks as their update commands, where their cross-references
    (parent_id, root_memory_ids; intent_id, parent_id and memory-id lists) are always
    written, None included). Re-ids are minted in a pre-pass against the target as it was,
    and every reference in the slice to a re-id'd entity is remapped, in every graph.
    ``options`` may carry the settings as a struct; explicit keywords override it.
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

    # Pre-pass: the fresh ids, decided against the target as it was.
    mems = _mint(export.memories, lambda m: m.id, mem_state.items, opts)
    # Nothing refers to an edge: the seed re-ids edges as it writes them (below).
    intents = _mint(export.intents, lambda i: i.id, intent_state.intents, opts)
    tasks = _mint(export.tasks, lambda t: t.id, task_state.tasks, opts)
    out = _Buckets()

    for item in export.memories:
        action = _decide(mem_state.items.get(item.id), item, opts)
        new_item = _rewrite(
            item,
            {
                "id": mems[item.id] if action == "reid" else item.id,
                "parents": _ids(item.parents, mems),
                "intent_id": _one(item.intent_id, intents),
                "task_id": _one(item.task_id, tasks),
            },
        )
        if action == "update":
            partial = new_item.model_dump(exclude_none=True)
            cmd: Any = MemoryUpdate(
                item_id=item.id, partial=partial, author=item.author, reason=_IMPORT_REASON
            )
            mem_state = apply_command(mem_state, cmd).state
        elif action in ("create", "reid"):
            mem_state = apply_command(mem_state, MemoryCreate(item=new_item)).state
        out.add(_BUCKET_OF[action], "memories", new_item.id)

    for edge in export.edges:
        action = _decide(mem_state.edges.get(edge.edge_id), edge, opts)
        edge_id = edge.edge_id
        if action == "reid":
            edge_id = derive_reid(edge_id, None, mem_state.edges.__contains__)
        new_edge = _rewrite(
            edge,
            {
                "edge_id": edge_id,
                "from_": mems.get(edge.from_, edge.from_),
                "to": mems.get(edge.to, edge.to),
            },
        )
        if action == "update":
            partial = new_edge.model_dump(exclude_none=True)
            cmd = EdgeUpdate(
                edge_id=edge.edge_id, partial=partial, author=edge.author, reason=_IMPORT_REASON
            )
            mem_state = apply_command(mem_state, cmd).state
        elif action in ("create", "reid"):
            mem_state = apply_command(mem_state, EdgeCreate(edge=new_edge)).state
        out.add(_BUCKET_OF[action], "edges", new_edge.edge_id)

    for intent in export.intents:
        action = _decide(intent_state.intents.get(intent.id), intent, opts)
        refs = {
            "parent_id": _one(intent.parent_id, intents),
            "root_memory_ids": _ids(intent.root_memory_ids, mems),
        }
        new = _rewrite(
            intent, {"id": intents[intent.id] if action == "reid" else intent.id, **refs}
        )
        if action == "update":
            partial = {**new.model_dump(exclude_none=True), **refs}
            cmd = IntentUpdate(intent_id=intent.id, partial=partial, author=intent.owner)
            intent_state = apply_intent_command(intent_state, cmd).state
        elif action in ("create", "reid"):
            intent_state = apply_intent_command(intent_state, IntentCreate(intent=new)).state
        out.add(_BUCKET_OF[action], "intents", new.id)

    for task in export.tasks:
        action = _decide(task_state.tasks.get(task.id), task, opts)
        refs = {
            "intent_id": intents.get(task.intent_id, task.intent_id),
            "parent_id": _one(task.parent_id, tasks),
            "input_memory_ids": _ids(task.input_memory_ids, mems),
            "output_memory_ids": _ids(task.output_memory_ids, mems),
        }
        new_task = _rewrite(task, {"id": tasks[task.id] if action == "reid" else task.id, **refs})
        if action == "update":
            partial = {**new_task.model_dump(exclude_none=True), **refs}
            cmd = TaskUpdate(task_id=task.id, partial=partial, author="import_slice")
            task_state = apply_task_command(task_state, cmd).state
        elif action in ("create", "reid"):
            task_state = apply_task_command(task_state, TaskCreate(task=new_task)).state
        out.add(_BUCKET_OF[action], "tasks", new_task.id)

    return ImportResult(mem_state, intent_state, task_state, out.report())
