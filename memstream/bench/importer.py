"""`memstream bench import`: importing an audit-ready-memory database of 100,000 events
into the embedded log, beside what writing the same events costs in the seed itself.

The source is written by audit-ready-memory 0.0.2's own `Memory` (messages, documents,
recalls, deletions), once, and kept in a cache directory for the next runs (writing it
takes the seed a few minutes). The import is timed end to end in phases: reading the
ArcadeDB directory (the JVM's start included), checking, appending in batches, verifying.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console

from memstream.bench.report import Row, once, per_second, print_table
from producers.importers.arcadedb_source import read_memory_events
from producers.importers.audit import import_audit_ready_memory
from producers.memory import Memory
from schemas.audit import event_from_dict
from schemas.gc_guard import no_cyclic_gc

__all__ = ["run", "add_arguments", "build_source"]

SEED = "audit-ready-memory 0.0.2"
WORDS = [f"w{i}" for i in range(2000)]


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memstream" / "bench-import"


def build_source(path: Path, events: int, *, start: int = 0) -> float:
    """Write `events` events through audit-ready-memory's `Memory` at `path`; returns the
    seed's appends per second. One in 100 is a Recall of two earlier items, one in 200 a
    Deletion of one, one in 50 a Document; the rest are messages in 8 sessions."""
    from audit_ready_memory import Document, Message, Recall
    from audit_ready_memory import Memory as SeedMemory

    when = datetime(2026, 1, 1, tzinfo=UTC)
    content: list[Any] = []
    deleted: set[Any] = set()
    began = time.perf_counter()
    with SeedMemory(path) as memory:
        for i in range(start, start + events):
            words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 7, 13, 31))
            common = {"timestamp": when + timedelta(seconds=i), "session_id": f"s{i % 8}"}
            if i % 100 == 99 and len(content) > 2:
                memory.record_recall(
                    Recall(query=words, recalled=(content[-1], content[-2]), actor="bot", **common)
                )
            elif i % 200 == 149 and content:
                target = next((c for c in content[::-7] if c not in deleted), None)
                if target is None:
                    continue
                deleted.add(target)
                memory.delete([target], "bench", requested_by="ops")
            elif i % 50 == 7:
                doc = memory.add_document(Document(name=f"d{i}.txt", text=words, **common))
                content.append(doc.id)
            else:
                message = Message(speaker=f"agent{i % 5}", content=words, actor="a", **common)
                content.append(memory.add_message(message).id)
    return per_second(events, time.perf_counter() - began)


def _cached_source(cache: Path, events: int, console: Console) -> Path:
    path = cache / f"audit-ready-memory-0.0.2-{events}"
    done = path / ".complete"
    if done.exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    console.print(f"writing the {events:,}-event source through {SEED} into {path} (once) ...")
    rate = build_source(path, events)
    console.print(f"  {SEED} wrote it at {rate:,.0f} events/s")
    done.write_text(f"{rate}\n")
    return path


def _seed_read(path: Path) -> int:
    from audit_ready_memory import Memory as SeedMemory

    with SeedMemory(path) as memory:
        return len(memory.events())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("import")
    group.add_argument(
        "--import-events", type=int, default=100_000, help="events in the source (import)"
    )
    group.add_argument(
        "--import-cache",
        type=Path,
        default=None,
        help="where the seed-written source is kept between runs (import)",
    )


def run(args: argparse.Namespace) -> int:
    console = Console(width=160)
    events = int(getattr(args, "import_events", 100_000))
    cache = getattr(args, "import_cache", None) or _default_cache()
    source = _cached_source(Path(cache), events, console)
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-import-"))
    try:
        # The import as `memstream import` runs it: the reader process reads the source in
        # batches while this process parses the batch before; then check, append, verify.
        report = import_audit_ready_memory(source, str(work / "log"))
        timings = report.timings
        total_s = sum(timings.values())
        import_s = timings["read"] + timings["check"] + timings["append"]
        read_n = report.read
        # Reading alone (no parsing), to set beside the seed's own reading.
        read_s, rows = once(lambda: read_memory_events(source))
        # The seed's own write rate, on a fresh database of 5,000 events of the same mix,
        # in the JVM the read above warmed.
        seed_rate = build_source(work / "seed-sample", min(5000, events))

        # memstream's own batched appends of the same events, with no source to read.
        plain = [event_from_dict({**json.loads(r["payload"]), "seq": None}) for r in rows]
        with Memory(str(work / "plain")) as memory, no_cyclic_gc():
            append_s, _ = once(
                lambda: [
                    memory.append_many(plain[i : i + 2000]) for i in range(0, len(plain), 2000)
                ]
            )
        # The seed reading its own log back, the one way it offers: Memory(path).events().
        seed_read_s, _ = once(lambda: _seed_read(source))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows_out = [
        Row(
            f"import {read_n:,} events into the embedded log: read, check, append (events/s)",
            seed_rate,
            per_second(read_n, import_s),
            "/s",
            higher_is_better=True,
            goal="> 20,000/s",
        ),
        Row(
            "the same with the verification after it (replay, every event, search sample)",
            seed_rate,
            per_second(read_n, total_s),
            "/s",
            higher_is_better=True,
        ),
        Row(
            f"reading the {read_n:,} events back (seed: Memory(path).events(); memstream: "
            "the importer's reader, read-only, JVM start included)",
            seed_read_s,
            read_s,
            "s",
        ),
        Row(
            "  of the import: reading and parsing, overlapped (the reader process reads a "
            "batch while the importer parses the one before)",
            None,
            timings["read"],
            "s",
        ),
        Row(
            "  of the import: checking the rest (seq order, targets, sizes)",
            None,
            timings["check"],
            "s",
        ),
        Row(
            f"  appending in batches of 2,000 ({report.appended:,} events, events/s)",
            None,
            per_second(report.appended, timings["append"]),
            "/s",
            higher_is_better=True,
            goal="> 20,000/s",
        ),
        Row("  verifying", None, timings["verify"], "s"),
        Row(
            "memstream append_many of the same events in batches of 2,000, no source, cycle "
            "detector off as in the import (events/s)",
            None,
            per_second(len(plain), append_s),
            "/s",
            higher_is_better=True,
        ),
    ]
    print_table(
        f"memstream bench import ({SEED} as the source; seed column: the seed writing the "
        "same events, one call each, its only way in)",
        SEED,
        rows_out,
        console,
    )
    return 0
