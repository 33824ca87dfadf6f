"""Transplant wire models: a slice of the three graphs, and the options and report of
moving it from one store to another (``export_slice`` / ``import_slice``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from schemas.graph.intents import Intent
from schemas.graph.items import Edge, MemoryItem
from schemas.graph.tasks import Task

__all__ = ["MemexExport", "ExportOptions", "ImportOptions", "ImportBucket", "ImportReport"]

# Mutable, as the seed's are.
_FROZEN = ConfigDict()


class MemexExport(BaseModel):
    """A self-describing slice of the memory, intent and task graphs.

    Every list defaults to empty, so a partial dict (say, only ``memories``) validates.
    """

    model_config = _FROZEN

    memories: list[MemoryItem] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)
    intents: list[Intent] = Field(default_factory=list)
    tasks: list[Task] = Field(default_factory=list)


class ExportOptions(BaseModel):
    """What ``export_slice`` collects.

    Seeds: ``memory_ids``, ``intent_ids``, ``task_ids`` (ids absent from the graphs are
    ignored). Expansions, all off by default, applied in this order:

    1. ``include_parents``: every provenance ancestor of a seed memory (transitive).
    2. ``include_children``: every dependent of a seed memory (transitive).
    3. ``include_aliases``: the whole alias group (active ALIAS edges, transitive) of every
       memory collected so far.
    4. ``include_related_intents``: intents named by a collected memory's ``intent_id``,
       and intents whose ``root_memory_ids`` name a collected memory.
    5. ``include_related_tasks``: tasks named by a collected memory's ``task_id``, tasks
       whose ``input_memory_ids`` or ``output_memory_ids`` name a collected memory, and
       tasks of a collected intent (seed or related).

    Edges (active or retracted) whose both endpoints are collected memories always travel.
    """

    model_config = _FROZEN

    memory_ids: list[str] | None = None
    intent_ids: list[str] | None = None
    task_ids: list[str] | None = None
    include_parents: bool = False
    include_children: bool = False
    include_aliases: bool = False
    include_related_tasks: bool = False
    include_related_intents: bool = False


class ImportOptions(BaseModel):
    """How ``import_slice`` treats an incoming entity whose id already exists.

    - ``skip_existing_ids`` (True): leave the existing entity alone. False: overwrite it
      with the incoming one (reported as updated).
    - ``shallow_compare_existing`` (False): first compare the incoming entity, as exported,
      field by field with the existing one; identical ones are skipped whatever the other
      options say, and different ones are conflicts when they are left alone.
    - ``re_id_on_difference`` (False): an incoming entity that differs from the existing
      one (this option compares even when ``shallow_compare_existing`` is off) is created
      under a fresh UUIDv7-shaped id 1 ms after the original's timestamp, and every
      reference to it in the slice is remapped.
    """

    model_config = _FROZEN

    skip_existing_ids: bool = True
    shallow_compare_existing: bool = False
    re_id_on_difference: bool = False


@dataclass
class ImportBucket:
    """Ids per graph, as they are in the target after the import (a dataclass, as the
    seed's)."""

    memories: list[str] = field(default_factory=list)
    intents: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    edges: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """Where each incoming entity went (a dataclass, as the seed's).

    - ``created``: new in the target, under its own id or, when re-id'd, its fresh id.
    - ``updated``: overwrote the existing entity of the same id.
    - ``skipped``: an existing entity was left alone: identical, or not compared.
    - ``conflicts``: the id exists with a different entity and the incoming one did not land
      there: left alone, or re-id'd (then its fresh id is also in ``created``).
    """

    created: ImportBucket = field(default_factory=ImportBucket)
    updated: ImportBucket = field(default_factory=ImportBucket)
    skipped: ImportBucket = field(default_factory=ImportBucket)
    conflicts: ImportBucket = field(default_factory=ImportBucket)
