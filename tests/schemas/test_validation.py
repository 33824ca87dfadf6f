"""schemas.validation: validate_* entry points, schema aliases and adapters."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import schemas
from schemas.graph.commands import MemoryCreate, MemoryRetract
from schemas.graph.intents import Intent, IntentPause
from schemas.graph.items import Edge, MemoryItem
from schemas.graph.tasks import Task, TaskStart
from schemas.validation import (
    EdgeSchema,
    IntentSchema,
    MemoryItemSchema,
    TaskSchema,
    validate_command,
    validate_edge,
    validate_intent_command,
    validate_memory_item,
    validate_task_command,
)

ITEM = {
    "id": "m1",
    "scope": "user:laz/general",
    "kind": "observation",
    "content": {"key": "login_count", "value": 42},
    "author": "agent:monitor",
    "source_kind": "observed",
    "authority": 0.9,
}
EDGE = {
    "edge_id": "e1",
    "from": "m1",
    "to": "m2",
    "kind": "SUPPORTS",
    "author": "a",
    "source_kind": "observed",
    "authority": 0.5,
    "active": True,
}


def test_exported_from_schemas_package() -> None:
    for name in schemas.validation.__all__:
        assert getattr(schemas, name) is getattr(schemas.validation, name)


def test_schema_aliases_are_the_models() -> None:
    assert MemoryItemSchema is MemoryItem and EdgeSchema is Edge
    assert IntentSchema is Intent and TaskSchema is Task


def test_validate_command() -> None:
    cmd = validate_command({"type": "memory.create", "item": ITEM})
    assert isinstance(cmd, MemoryCreate) and cmd.item.id == "m1"
    assert isinstance(
        validate_command({"type": "memory.retract", "item_id": "m1", "author": "a"}), MemoryRetract
    )
    with pytest.raises(ValidationError):
        validate_command({"type": "memory.explode", "item_id": "m1"})
    with pytest.raises(ValidationError):
        validate_command({"type": "memory.create", "item": {**ITEM, "authority": 1.5}})


def test_validate_intent_command() -> None:
    cmd = validate_intent_command({"type": "intent.pause", "intent_id": "i", "author": "a"})
    assert isinstance(cmd, IntentPause)
    with pytest.raises(ValidationError):
        validate_intent_command({"type": "task.start", "task_id": "t"})


def test_validate_task_command() -> None:
    assert isinstance(validate_task_command({"type": "task.start", "task_id": "t"}), TaskStart)
    with pytest.raises(ValidationError):
        validate_task_command({"type": "intent.pause", "intent_id": "i", "author": "a"})


def test_validate_memory_item() -> None:
    assert validate_memory_item(ITEM).content == {"key": "login_count", "value": 42}
    with pytest.raises(ValidationError):
        validate_memory_item({**ITEM, "importance": -0.1})
    with pytest.raises(ValidationError):
        validate_memory_item({k: v for k, v in ITEM.items() if k != "authority"})


def test_validate_edge_accepts_wire_alias() -> None:
    edge = validate_edge(EDGE)
    assert edge.from_ == "m1"
    with pytest.raises(ValidationError):
        validate_edge({**EDGE, "weight": 2})


def test_adapters_exported() -> None:
    assert (
        schemas.IntentCommandAdapter.validate_python(
            {"type": "intent.resume", "intent_id": "i", "author": "a"}
        ).type
        == "intent.resume"
    )
    assert schemas.TaskCommandAdapter.validate_python({"type": "task.cancel", "task_id": "t"})
    assert schemas.MemoryCommandAdapter.validate_python({"type": "edge.create", "edge": EDGE})


def test_a_submodule_imported_by_name_from_the_package_in_a_fresh_process() -> None:
    # `from schemas import codec` before anything loaded `schemas.codec` asked the package's
    # lazy re-export hook for `codec`, which imported `schemas.validation` the same way and
    # so asked the hook again: a RecursionError in a fresh interpreter.
    import subprocess
    import sys

    code = (
        "from schemas import codec, errors\n"
        "import schemas\n"
        "assert schemas.validate_command is schemas.validation.validate_command\n"
        "print(codec.__name__, errors.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["schemas.codec", "schemas.errors"]
