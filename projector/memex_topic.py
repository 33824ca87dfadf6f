"""The derived topic ``LOG.memex``: every decided graph command, in log order, as the
TypeScript library's own JSON envelopes, so that a TypeScript service (or memex-python)
following that topic reaches memstream's state with ``replayFromEnvelopes`` (memory graph)
and ``applyIntentCommand`` / ``applyTaskCommand`` (intents, tasks).

Pure: ``memex_envelopes`` turns one folded record (the states before and after it and its
lifecycle events) into the envelopes that stand for it. What a record becomes:

- a memory, intent or task command that the fold applied: that command as it is;
- a ``memstream.batch``: each of its commands (it was applied whole);
- an operation decided by the fold (``memstream.cascade_retract``, ``mark_contradiction``,
  ``mark_alias``, ``resolve_contradiction``, ``bulk_adjust_scores``, ``import_slice``): the
  plain commands that have its effect, read from what it did (``memory.create`` /
  ``memory.update`` / ``memory.retract``, ``edge.create`` / ``edge.update`` /
  ``edge.retract``, ``intent.create`` / ``intent.update``, ``task.create`` /
  ``task.update``), with the ids the fold minted;
- an audit event, a rejected record: nothing.

Each envelope's ``ts`` is the record's seq as milliseconds since the epoch (every envelope
of one record shares it), so the readers' sort by ``ts`` (a stable sort) is log order; its
``id`` is a UUID derived from (seq, position), so publishing a record twice gives the same
bytes. The producer's own time stays in the main log.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from projector.authorship import is_authorship_record
from projector.lifecycle import Lifecycle
from projector.record_fold import BATCH, LogState
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope, Record

__all__ = ["MEMEX_TOPIC_SUFFIX", "memex_envelopes", "memex_topic"]

MEMEX_TOPIC_SUFFIX = ".memex"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NAMESPACES = {"memory": "memory", "edge": "memory", "intent": "intent", "task": "task"}
_ITEM_FIXED = frozenset({"id", "created_at"})
_EDGE_FIXED = frozenset({"edge_id", "from_", "to"})
_WORK_FIXED = frozenset({"id", "status"})


def memex_topic(log_topic: str) -> str:
    """The derived topic of a log topic: ``LOG.memex``."""
    return log_topic + MEMEX_TOPIC_SUFFIX


def _ts(seq: int) -> str:
    when = _EPOCH + timedelta(milliseconds=seq)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _id(seq: int, n: int) -> str:
    digest = bytearray(hashlib.sha1(f"memstream.memex:{seq}:{n}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50  # version 5
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _json(value: Any) -> Any:
    """A model as the TypeScript library writes it (unset optionals left out), unknown keys
    an update set on it kept; containers converted inside."""
    if isinstance(value, BaseModel):
        out = value.model_dump(mode="json", by_alias=True, exclude_none=True)
        for key, extra in value.__dict__.items():
            if key not in type(value).model_fields and extra is not None:
                out[key] = _json(extra)
        return out
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return value


def _partial(old: BaseModel, new: BaseModel, fixed: frozenset[str]) -> dict[str, Any]:
    """What an update must carry to turn ``old`` into ``new`` (the fields that differ, by
    their wire names). Merged dicts (content, meta) only ever gain keys, so their new value
    merged into the old one gives the new value."""
    fields = type(new).model_fields
    out: dict[str, Any] = {}
    for key, value in new.__dict__.items():
        if key in fixed or old.__dict__.get(key, _MISSING) == value:
            continue
        info = fields.get(key)
        name = info.alias if info is not None and info.alias else key
        out[name] = _json(value)
    return out


_MISSING = object()


def _memory_commands(
    before: LogState, after: LogState, events: Sequence[Any]
) -> list[dict[str, Any]]:
    """The memory commands that have the effect of an operation's lifecycle events."""
    out: list[dict[str, Any]] = []
    retracted = {e.item.id for e in events if e.type == "memory.retracted"}
    updated: set[str] = set()
    for e in events:
        if e.type == "memory.created":
            out.append({"type": "memory.create", "item": _json(e.item)})
        elif e.type == "memory.updated":
            iid = e.item.id
            if iid in updated or iid not in after.graph.items:
                continue  # one update with the final value stands for all of them
            updated.add(iid)
            old = before.graph.items.get(iid)
            new = after.graph.items[iid]
            partial = _partial(old, new, _ITEM_FIXED) if old is not None else _json(new)
            out.append(
                {"type": "memory.update", "item_id": iid, "partial": partial, "author": "memstream"}
            )
        elif e.type == "memory.retracted":
            out.append({"type": "memory.retract", "item_id": e.item.id, "author": "memstream"})
        elif e.type == "edge.created":
            out.append({"type": "edge.create", "edge": _json(e.edge)})
        elif e.type == "edge.updated":
            old_edge = before.graph.edges.get(e.edge.edge_id)
            partial = _partial(old_edge, e.edge, _EDGE_FIXED) if old_edge is not None else {}
            out.append(
                {
                    "type": "edge.update",
                    "edge_id": e.edge.edge_id,
                    "partial": partial,
                    "author": "memstream",
                }
            )
        elif e.type == "edge.retracted":
            if e.edge.from_ in retracted or e.edge.to in retracted:
                continue  # retracting the item retracted its edges
            out.append({"type": "edge.retract", "edge_id": e.edge.edge_id, "author": "memstream"})
    return out


def _import_commands(before: LogState, after: LogState, report: Any) -> list[dict[str, Any]]:
    """The commands that have the effect of an import: each entity it created or updated
    (once, even when the slice named it twice), as a create of its final value when it is
    new, else as an update from its old value to its final one."""
    out: list[dict[str, Any]] = []

    def changed(bucket: str) -> list[str]:
        return list(
            dict.fromkeys([*getattr(report.created, bucket), *getattr(report.updated, bucket)])
        )

    graphs = (
        (
            "memories",
            before.graph.items,
            after.graph.items,
            "memory",
            "item",
            "item_id",
            _ITEM_FIXED,
        ),
        ("edges", before.graph.edges, after.graph.edges, "edge", "edge", "edge_id", _EDGE_FIXED),
        (
            "intents",
            before.intents.intents,
            after.intents.intents,
            "intent",
            "intent",
            "intent_id",
            _WORK_FIXED,
        ),
        ("tasks", before.tasks.tasks, after.tasks.tasks, "task", "task", "task_id", _WORK_FIXED),
    )
    for bucket, old_map, new_map, tag, key, id_key, fixed in graphs:
        for eid in changed(bucket):
            new = new_map[eid]
            old = old_map.get(eid)
            if old is None:
                out.append({"type": f"{tag}.create", key: _json(new)})
            else:
                out.append(
                    {
                        "type": f"{tag}.update",
                        id_key: eid,
                        "partial": _partial(old, new, fixed),
                        "author": "memstream",
                    }
                )
    return out


def _operation_value(lifecycle: Sequence[Lifecycle]) -> Any:
    for event in lifecycle:
        if event.type == "operation.applied" and event.extra is not None:
            return event.extra.get("value")
    return None


def memex_envelopes(
    before: LogState, after: LogState, seq: int, record: Record, lifecycle: Sequence[Lifecycle]
) -> list[dict[str, Any]]:
    """The TypeScript envelopes (JSON objects) that stand for the record at ``seq`` on the
    derived topic; ``before`` / ``after`` are the log states around it and ``lifecycle``
    its lifecycle events, as ``fold_record`` gave them."""
    if not isinstance(record, GraphEnvelope):
        return []
    if any(e.type == "record.rejected" for e in lifecycle) or is_authorship_record(record):
        return []
    commands: list[Any]
    if record.namespace != OPERATION_NAMESPACE:
        commands = [record.payload]
    elif record.type == BATCH:
        commands = list(record.payload.get("commands") or ())
    elif record.type == "memstream.import_slice":
        commands = _import_commands(before, after, _operation_value(lifecycle))
    else:
        subjects = [e.subject for e in lifecycle if e.namespace == "memory"]
        commands = _memory_commands(before, after, subjects)
    out = []
    for n, command in enumerate(commands):
        tag = str(command["type"])
        out.append(
            {
                "id": _id(seq, n),
                "namespace": _NAMESPACES[tag.split(".", 1)[0]],
                "type": tag,
                "ts": _ts(seq),
                "payload": command,
            }
        )
    return out
