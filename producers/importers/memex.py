"""`import_memex` and `export_memex`: the memory graph of the TypeScript ``@ai2070/memex``
(and memex-python) in and out of a memstream log.

Two source shapes are read:

- a **snapshot**, ``MemexStore.dumps`` / ``stringify``: ``{"items": [[id, item], ...],
  "edges": [[id, edge], ...]}``, appended as one ``memory.create`` per item then one
  ``edge.create`` per edge, in the snapshot's order (so the log's graph has the same
  insertion order, and ``stringify`` gives the same text);
- a **file of envelopes**, JSON lines as the library writes them (``id``, ``namespace``,
  ``type``, ``ts``, ``trace_id``, ``payload``): appended verbatim in the order
  ``replayFromEnvelopes`` folds them (by ``ts``, stable), memory and edge commands as well
  as intent and task commands. A command the source's own replay skips (it failed there:
  a retract of an absent item, a lifecycle event that is not a command) is not appended,
  and is reported as skipped, so the log's graph is the source's.

Resuming. Each appended envelope's ``id`` names its place in the source: an envelope file's
own envelope ids are kept (they must be unique in the file); a snapshot's entries get ids
derived from the snapshot's digest and the entry's position (UUIDv5). The log therefore
records how far an import got; a new run reads the envelope ids in the log and appends
only the rest, in order, in all-or-none batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID, uuid5

from producers.importers.errors import (
    CorruptSourceError,
    ImportConflictError,
    ImportSourceError,
    LogNotEmptyError,
    SourceNotFoundError,
    UnsupportedSourceError,
    VerificationError,
)
from producers.importers.report import ImportReport, Progress, Skip
from producers.importers.run import append_batches, refuse_signed
from producers.logs import Log, open_log
from producers.memex_log_store import LogGraphs
from projector.graph.intents import IntentState, apply_intent_command, create_intent_state
from projector.graph.replay import replay_commands, replay_from_envelopes
from projector.graph.serialization import stringify
from projector.graph.state import GraphState, create_graph_state
from projector.graph.tasks import TaskState, apply_task_command, create_task_state
from schemas.codec import MAX_JSON_DEPTH, decode_record, encode_record, json_depth
from schemas.errors import MemstreamError
from schemas.graph.envelopes import now_iso, parse_iso_ms
from schemas.limits import check_record_size
from schemas.records import GraphEnvelope

__all__ = [
    "import_memex",
    "export_memex",
    "read_memex_source",
    "snapshot_entries",
    "envelope_entries",
    "Entry",
    "MAX_SOURCE_BYTES",
]

log = logging.getLogger("memstream.import.memex")

MAX_SOURCE_BYTES = 1 << 30
DEFAULT_BATCH = 1000
# Namespace of the envelope ids derived for a snapshot's entries.
IMPORT_NAMESPACE = UUID("6d656d73-7472-6561-6d2e-696d706f7274")
_ENVELOPE_KEYS = frozenset({"id", "namespace", "type", "ts", "trace_id", "payload"})
_SNAPSHOT_KEYS = frozenset({"items", "edges"})


@dataclass(frozen=True)
class Entry:
    """One source record as it will be appended: where it came from, its envelope, and
    which graph its command is for (``memory``, ``intent`` or ``task``)."""

    where: str
    envelope: GraphEnvelope
    graph: str


def _graph_of(command: Any) -> str | None:
    tag = command.get("type") if isinstance(command, Mapping) else None
    if not isinstance(tag, str):
        return None
    if tag.startswith(("memory.", "edge.")):
        return "memory"
    if tag.startswith(("intent.", "task.")):
        return tag.split(".", 1)[0]
    return None


def read_memex_source(path: str | Path) -> tuple[str, Any]:
    """(``"snapshot"``, the parsed object) or (``"envelopes"``, the file's lines)."""
    path = Path(path)
    if not path.is_file():
        raise SourceNotFoundError(f"memex source {path}: no such file")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise SourceNotFoundError(f"memex source {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise UnsupportedSourceError(f"memex source {path}: over {MAX_SOURCE_BYTES:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptSourceError(f"memex source {path}: not UTF-8 text ({exc})") from None
    if not text.strip():
        raise CorruptSourceError(f"memex source {path}: empty")
    # A snapshot is one JSON object; anything that is not valid JSON as a whole is read
    # as JSON lines. Depth is bounded before parsing (a snapshot nests items' content).
    stripped = text.lstrip()
    if stripped.startswith("{") and json_depth(data) <= MAX_JSON_DEPTH + 4:
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None
        if isinstance(whole, dict) and not (whole.keys() & {"payload", "namespace"}):
            return "snapshot", whole
    elif stripped.startswith("["):
        raise UnsupportedSourceError(
            f"memex source {path}: a JSON array; expected a snapshot object "
            '({"items": [...], "edges": [...]}) or JSON lines of envelopes'
        )
    return "envelopes", text.splitlines()


def _check_encodable(where: str, envelope: GraphEnvelope) -> None:
    try:
        check_record_size(envelope, encode_record(envelope))
    except MemstreamError as exc:
        raise CorruptSourceError(f"{where}: {exc}") from None


def snapshot_entries(
    data: Mapping[str, Any], *, source: str, skip_bad: bool = False, ts: str | None = None
) -> tuple[list[Entry], list[Skip]]:
    """The commands that rebuild a snapshot: its items' creates, then its edges'.

    Refused (`CorruptSourceError` naming the entry, unless `skip_bad`): an entry that is
    not ``[id, object]``, an id that disagrees with the object's, a repeated id, an item or
    edge that does not validate, an edge whose ``from`` or ``to`` names no item of the
    snapshot (a dangling reference). Parents naming absent items are kept: retracting an
    item leaves its children's ``parents`` as they were, in the TypeScript library too.
    """
    unknown = sorted(set(data) - _SNAPSHOT_KEYS)
    if unknown:
        raise UnsupportedSourceError(
            f"{source}: a snapshot with key(s) {', '.join(map(repr, unknown))}; this importer "
            'reads the @ai2070/memex / memex-python 0.14 shape {"items": [...], "edges": [...]}'
        )
    digest = hashlib.sha256(
        json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    ts = ts or now_iso()
    entries: list[Entry] = []
    skips: list[Skip] = []
    item_ids: set[str] = set()
    edge_ids: set[str] = set()

    def bad(where: str, reason: str) -> None:
        if not skip_bad:
            raise CorruptSourceError(f"{source}: {where}: {reason}")
        skips.append(Skip(where, reason))

    sections: list[tuple[str, str, str, Any]] = [
        ("items", "id", "memory.create", data.get("items", [])),
        ("edges", "edge_id", "edge.create", data.get("edges", [])),
    ]
    position = 0
    for section, key, command, rows in sections:
        if not isinstance(rows, list):
            raise CorruptSourceError(f"{source}: {section!r} is not a list")
        for index, row in enumerate(rows):
            position += 1
            where = f"{section}[{index}]"
            if not (isinstance(row, list) and len(row) == 2 and isinstance(row[1], dict)):
                bad(where, "not an [id, object] pair")
                continue
            ident, value = row
            where = f"{where} ({key} {ident})"
            if not isinstance(ident, str) or value.get(key) != ident:
                bad(where, f"the pair's id {ident!r} is not the object's {key} {value.get(key)!r}")
                continue
            if section == "items":
                if ident in item_ids:
                    bad(where, f"item {ident} appears twice")
                    continue
                payload = {"type": command, "item": value}
            else:
                if ident in edge_ids:
                    bad(where, f"edge {ident} appears twice")
                    continue
                ends = [(end, value.get(end)) for end in ("from", "to")]
                dangling = [(end, v) for end, v in ends if v not in item_ids]
                if dangling:
                    end, target = dangling[0]
                    bad(where, f"{end!r} names item {target!r}, which is not in the snapshot")
                    continue
                payload = {"type": command, "edge": value}
            envelope = GraphEnvelope(
                id=str(uuid5(IMPORT_NAMESPACE, f"{digest}:{position}")),
                namespace="memory",
                type=command,
                ts=ts,
                trace_id=f"memstream-import:{digest[:16]}",
                payload=payload,
            )
            try:
                _check_encodable(where, envelope)
            except CorruptSourceError as exc:
                bad(where, str(exc)[len(where) + 2 :])
                continue
            (item_ids if section == "items" else edge_ids).add(ident)
            entries.append(Entry(where, envelope, "memory"))
    return entries, skips


def _parse_envelope(line: str, where: str) -> GraphEnvelope:
    data = line.encode()
    if json_depth(data) > MAX_JSON_DEPTH:
        raise CorruptSourceError(f"{where}: nests deeper than {MAX_JSON_DEPTH}")
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise CorruptSourceError(f"{where}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise CorruptSourceError(f"{where}: not a JSON object")
    missing = [k for k in ("id", "namespace", "type", "ts", "payload") if k not in value]
    if missing:
        raise CorruptSourceError(f"{where}: not an envelope: no {', '.join(map(repr, missing))}")
    extra = sorted(set(value) - _ENVELOPE_KEYS)
    if extra:
        raise UnsupportedSourceError(
            f"{where}: unknown envelope key(s) {', '.join(map(repr, extra))}"
        )
    for key in ("id", "namespace", "type", "ts"):
        if not isinstance(value[key], str) or not value[key]:
            raise CorruptSourceError(f"{where}: {key} is {value[key]!r}, not a non-empty string")
    if value.get("trace_id") is not None and not isinstance(value["trace_id"], str):
        raise CorruptSourceError(f"{where}: trace_id is not a string")
    try:
        parse_iso_ms(value["ts"])
    except Exception as exc:
        raise CorruptSourceError(
            f"{where}: ts {value['ts']!r} is not an ISO-8601 time ({exc})"
        ) from None
    if value["namespace"] not in ("memory", "intent", "task"):
        raise UnsupportedSourceError(
            f"{where}: namespace {value['namespace']!r}; memex envelopes are of the memory, "
            "intent and task namespaces"
        )
    return GraphEnvelope(**value)


def envelope_entries(
    lines: Sequence[str], *, source: str, skip_bad: bool = False
) -> tuple[list[Entry], list[Skip]]:
    """The file's envelopes, checked, in the order ``replayFromEnvelopes`` folds them."""
    parsed: list[tuple[int, int, Entry]] = []
    skips: list[Skip] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            envelope = _parse_envelope(line, where)
            where = f"line {number} (envelope {envelope.id})"
            if envelope.id in seen:
                raise CorruptSourceError(
                    f"{where}: envelope id {envelope.id} is also that of line {seen[envelope.id]}"
                )
            graph = _graph_of(envelope.payload)
            if graph is None:
                raise UnsupportedSourceError(f"{where}: payload is not a memex command")
            _check_encodable(where, envelope)
        except ImportSourceError as exc:
            if not skip_bad:
                raise type(exc)(f"{source}: {exc}") from None
            text = str(exc)
            skips.append(Skip(where, text[len(where) + 2 :] if text.startswith(where) else text))
            continue
        seen[envelope.id] = number
        parsed.append((parse_iso_ms(envelope.ts), number, Entry(where, envelope, graph)))
    parsed.sort(key=lambda t: (t[0], t[1]))
    return [entry for _, _, entry in parsed], skips


@dataclass
class _Graphs:
    mem: GraphState
    intents: IntentState
    tasks: TaskState


def _fold(
    entries: Sequence[Entry], start: _Graphs, *, envelopes: bool
) -> tuple[_Graphs, list[tuple[Entry, str]]]:
    """Fold `entries` onto `start` as the source's replay would; the entries that fail."""
    failed: list[tuple[Entry, str]] = []
    memory = [e for e in entries if e.graph == "memory"]
    if envelopes:
        result = replay_from_envelopes([e.envelope.to_json_dict() for e in memory], state=start.mem)
    else:
        result = replay_commands([e.envelope.payload for e in memory], state=start.mem)
    for failure in result.skipped:
        failed.append((memory[failure.index], _reason(failure.error)))
    graphs = _Graphs(result.state, start.intents, start.tasks)
    for entry in entries:
        try:
            if entry.graph == "intent":
                graphs.intents, _ = apply_intent_command(graphs.intents, entry.envelope.payload)
            elif entry.graph == "task":
                graphs.tasks, _ = apply_task_command(graphs.tasks, entry.envelope.payload)
        except Exception as exc:  # the reducers raise their domain errors and ValidationError
            failed.append((entry, _reason(exc)))
    return graphs, failed


def _reason(exc: BaseException) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            return f"{type(exc).__name__}: {where}: {first['msg']}"
        except Exception:  # not pydantic's errors(): fall back to the text
            pass
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _log_envelope_ids(log_: Log) -> tuple[set[str], int]:
    """The envelope ids in the log, and how many of its records are not envelopes."""
    head = log_.state().last_seq
    ids: set[str] = set()
    other = 0
    if head is None:
        return ids, other
    for seq, data in log_.records(0, timeout=30.0):
        try:
            record = decode_record(data)
        except MemstreamError:
            other += 1
        else:
            if isinstance(record, GraphEnvelope):
                ids.add(record.id)
            else:
                other += 1
        if seq >= head:
            break
    return ids, other


def _same_graphs(source: _Graphs, got: _Graphs, *, whole: bool) -> str:
    if whole:
        want, have = stringify(source.mem), stringify(got.mem)
        if want != have:
            raise VerificationError(
                "the log's memory graph does not stringify as the source's "
                f"({len(got.mem.items)} items / {len(got.mem.edges)} edges in the log, "
                f"{len(source.mem.items)} / {len(source.mem.edges)} in the source)"
            )
    pairs: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = [
        ("item", source.mem.items, got.mem.items),
        ("edge", source.mem.edges, got.mem.edges),
        ("intent", source.intents.intents, got.intents.intents),
        ("task", source.tasks.tasks, got.tasks.tasks),
    ]
    for name, want_map, have_map in pairs:
        for key, value in want_map.items():
            if have_map.get(key) != value:
                raise VerificationError(f"{name} {key}: the log's differs from the source's")
        if whole and len(have_map) != len(want_map):
            raise VerificationError(
                f"the log holds {len(have_map)} {name}s, the source {len(want_map)}"
            )
    how = "stringify output identical to the source's" if whole else "source's entities equal"
    return (
        f"{how} ({len(source.mem.items):,} items, {len(source.mem.edges):,} edges, "
        f"{len(source.intents.intents):,} intents, {len(source.tasks.tasks):,} tasks)"
    )


def _without_edges_to(
    failed: Sequence[tuple[Entry, str]], entries: list[Entry], report: ImportReport
) -> list[Entry]:
    """A snapshot's edges to an item left out would dangle in the log: left out too."""
    gone = {
        e.envelope.payload["item"].get("id")
        for e, _ in failed
        if e.envelope.payload.get("type") == "memory.create"
    }
    kept: list[Entry] = []
    for entry in entries:
        edge = entry.envelope.payload.get("edge")
        if isinstance(edge, dict):
            ends = [(end, edge.get(end)) for end in ("from", "to") if edge.get(end) in gone]
            if ends:
                end, target = ends[0]
                reason = f"{end!r} names item {target!r}, which was skipped"
                report.skipped.append(Skip(entry.where, reason))
                continue
        kept.append(entry)
    return kept


def import_memex(
    path: str | Path,
    location: str,
    *,
    append: bool = False,
    skip_bad: bool = False,
    verify: bool = True,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
) -> ImportReport:
    """Import a memex snapshot or envelope file at `path` into the log at `location`.

    The whole source is read and checked first: a bad one raises an `ImportSourceError`
    naming the entry or line, and nothing is appended (`skip_bad`: each bad record is
    left out and reported). A log holding records not from this source is refused
    (`LogNotEmptyError`) unless `append`. Afterwards the log's graph is compared with the
    source's: for a log that held no graph before, ``stringify`` must give the same text.
    """
    if batch_size < 1:  # before the log is opened (a writer creates it)
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    source = str(path)
    clock = time.perf_counter()
    kind, data = read_memex_source(path)
    report = ImportReport(source=source, location=str(location), kind=f"memex {kind}")
    report.timings["read"] = -clock + (clock := time.perf_counter())
    if kind == "snapshot":
        entries, skips = snapshot_entries(data, source=source, skip_bad=skip_bad)
        report.read = sum(len(data.get(k) or []) for k in ("items", "edges"))
    else:
        entries, skips = envelope_entries(data, source=source, skip_bad=skip_bad)
        report.read = sum(1 for line in data if line.strip())
    report.skipped = skips
    empty = _Graphs(create_graph_state(), create_intent_state(), create_task_state())
    source_graphs, failed = _fold(entries, empty, envelopes=kind == "envelopes")
    if failed:
        if kind == "snapshot" and not skip_bad:
            entry, reason = failed[0]
            raise CorruptSourceError(f"{source}: {entry.where}: {reason}")
        # An envelope log's failures are the source's own: its replay skips them too.
        why = "skipped by the source's replay too: " if kind == "envelopes" else ""
        report.skipped += [Skip(e.where, why + r) for e, r in failed]
        dropped = {id(e) for e, _ in failed}
        entries = [e for e in entries if id(e) not in dropped]
        if kind == "snapshot":
            entries = _without_edges_to(failed, entries, report)
            source_graphs, _ = _fold(entries, empty, envelopes=False)
    with closing(LogGraphs(location)) as store:
        refuse_signed(store.log, location)
        ids, other = _log_envelope_ids(store.log)
        ours = {e.envelope.id for e in entries}
        present = ids & ours
        foreign = other + len(ids - ours)
        if foreign and not append:
            raise LogNotEmptyError(
                f"log {store.location} holds {foreign:,} record(s) that are not from {source} "
                f"(and {len(present):,} that are); pass --append (append=True) to import "
                "after them"
            )
        before = store.state()
        # The log's graph must then be the source's exactly: nothing else built it.
        whole = not (ids - ours)
        pending = [e for e in entries if e.envelope.id not in present]
        report.already = len(entries) - len(pending)
        if foreign and pending:
            start = _Graphs(before.graph, before.intents, before.tasks)
            _, conflicts = _fold(pending, start, envelopes=kind == "envelopes")
            if conflicts:
                entry, reason = conflicts[0]
                if not skip_bad:
                    raise ImportConflictError(
                        f"{source}: {entry.where}: the log refuses it: {reason}"
                    )
                report.skipped += [Skip(e.where, f"the log refuses it: {r}") for e, r in conflicts]
                dropped = {id(e) for e, _ in conflicts}
                pending = [e for e in pending if id(e) not in dropped]
                entries = [e for e in entries if id(e) not in dropped]
                source_graphs, _ = _fold(entries, empty, envelopes=kind == "envelopes")

        report.timings["check"] = -clock + (clock := time.perf_counter())

        def append_batch(batch: list[Entry]) -> list[int]:
            records = [e.envelope for e in batch]
            appended, _ = store.log.transact(lambda state: (records, None))
            return [a.seq for a in appended]

        append_batches(
            pending, append_batch, batch_size=batch_size, progress=progress, report=report
        )
        report.timings["append"] = -clock + (clock := time.perf_counter())
        if verify:
            after = store.state()
            got = _Graphs(after.graph, after.intents, after.tasks)
            report.verified = _same_graphs(source_graphs, got, whole=whole)
        report.timings["verify"] = time.perf_counter() - clock
    return report


def export_memex(
    location: str, path: str | Path, *, pretty: bool = False, overwrite: bool = False
) -> tuple[int, int]:
    """Write the log's memory graph to `path` as ``stringify`` does (the TypeScript
    library's on-disk shape, which ``MemexStore.loads`` / ``parse`` read back).

    The log must exist (a reader never creates one). The file is written whole or not at
    all (a temporary file renamed over it); an existing file is kept unless `overwrite`.
    Returns the numbers of items and edges written.
    """
    target = Path(path)
    if target.exists() and not overwrite:
        raise FileExistsError(f"{target} exists; pass --force (overwrite=True) to replace it")
    with closing(LogGraphs(open_log(location, create=False))) as store:
        graph = store.state().graph
        text = stringify(graph, pretty=pretty)
    directory = target.parent if str(target.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(graph.items), len(graph.edges)
