"""Source data for the importer tests, written by the seed packages themselves.

Everything that runs ArcadeDB's JVM (the seed's own Memory, SQL on a database) runs in a
child process through the importer's own `run_reader`, as the importer's reads do: the
test process never hosts the JVM, so a fault in the engine fails one test with the child's
exit, not the whole run with a segfault.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from producers.importers.reader_process import run_reader, serve_answer

WORDS = "invoice cat vaccine budget meeting travel report garden server backup".split()


def _in_child(command: str, *args: str) -> Any:
    return run_reader(__name__, [command, *args], limit=256 << 20, what=f"seed {command}")


def write_audit_ready_memory(path: Path, messages: int = 40) -> None:
    """See `_write_audit_ready_memory`; in a child process."""
    _in_child("write", str(path), str(messages))


def _write_audit_ready_memory(path: Path, messages: int = 40) -> None:
    """An audit-ready-memory database with messages and documents over several sessions
    and actors, retention markers, recalls (logged by its recall() and record_recall) and
    deletions (one of a recalled message, one of two targets at once)."""
    from audit_ready_memory import Document, Memory, Message, Recall

    later = datetime(2031, 1, 1, tzinfo=UTC)
    with Memory(path) as memory:
        ids = []
        for i in range(messages):
            message = memory.add_message(
                Message(
                    speaker=f"agent-{i % 3}",
                    content=f"{WORDS[i % 10]} note {i} about {WORDS[(i * 3) % 10]}",
                    session_id=f"s{i % 4}",
                    source="chat" if i % 2 else "unknown",
                    actor=f"agent:{i % 3}" if i % 5 else None,
                    retain_until=later + timedelta(days=i) if i % 7 == 0 else None,
                )
            )
            ids.append(message.id)
            if i % 10 == 9:
                doc = memory.add_document(
                    Document(
                        name=f"doc-{i}.txt",
                        text=f"the {WORDS[i % 10]} document number {i}",
                        sha256="ab" * 32,
                        session_id="docs",
                        retain_until=later,
                    )
                )
                ids.append(doc.id)
        recall, _ = memory.recall("invoice cat", session_id="s1", source="cli", actor="bot")
        memory.record_recall(Recall(query="manual", recalled=(ids[1], ids[2]), actor="ops"))
        memory.delete([recall.recalled[0]], "user asked", requested_by="ana", session_id="s1")
        memory.delete([ids[5], ids[6]], "retention", requested_by="sweeper")
        memory.recall("budget", session_id="s2")


def audit_rows(path: Path) -> list[dict[str, Any]]:
    from producers.importers.arcadedb_source import read_memory_events

    return read_memory_events(path)


def copy_db(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def sql(path: Path, *commands: str) -> None:
    """Run SQL commands on an ArcadeDB database (to damage a copy of a seed database), in a
    child process."""
    _in_child("sql", str(path), *commands)


def _sql(path: Path, *commands: str) -> None:
    import arcadedb_embedded

    db = arcadedb_embedded.open_database(str(path))
    try:
        for command in commands:
            with db.transaction():
                db.command("sql", command)
    finally:
        db.close()


def seed_view(path: Path, queries: list[str]) -> dict[str, Any]:
    """The seed's own reading of its database, as JSON (read in a child process): its
    events as its ``event_to_dict``, the replay's visible ids, deleted ids, recall stats
    and last seq, and its search answers (ids) to `queries`."""
    return _in_child("view", str(path), json.dumps(queries))  # type: ignore[no-any-return]


def _seed_view(path: Path, queries: list[str]) -> dict[str, Any]:
    from audit_ready_memory import Memory, event_to_dict, search

    with Memory(path) as memory:
        events = list(memory.events())
        state = memory.replay()
    return {
        "events": [event_to_dict(e) for e in events],
        "messages": [str(m.id) for m in state.visible_messages],
        "documents": [str(d.id) for d in state.visible_documents],
        "deleted": sorted(str(k) for k in state.deleted),
        "recall_stats": recall_stats(state),
        "last_seq": state.last_seq,
        "answers": {q: [str(x.id) for x in search(state, q, limit=5)] for q in queries},
    }


def recall_stats(state: Any) -> dict[str, list[Any]]:
    """A replayed state's recall stats as JSON (ours or the seed's)."""
    return {
        str(k): [v.num_recalled, v.last_recalled_at and v.last_recalled_at.isoformat()]
        for k, v in state.recall_stats.items()
    }


def hold_open(path: Path) -> subprocess.Popen[str]:
    """A child process holding the database at `path` open in the seed's Memory, as a
    running audit-ready-memory does. It prints the ids of its events (a JSON line) once
    open, and again when its stdin closes, then exits."""
    child = subprocess.Popen(
        [sys.executable, "-m", __name__, "hold", str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return child


def _hold(path: Path) -> None:
    from audit_ready_memory import Memory

    with Memory(path) as memory:
        print(json.dumps([str(e.id) for e in memory.events()]), flush=True)
        sys.stdin.read()
        print(json.dumps([str(e.id) for e in memory.events()]), flush=True)


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path


def read_batches(path: Path, size: int, *, public: bool) -> list[Any]:
    """The reader's batches of the database at `path` (`size` rows each), read as the
    reader process reads them, or (`public`) through the engine's public `ResultSet`
    reading, as an engine build without the bridge is read; in a child process."""
    return _in_child("batches", str(path), str(size), "public" if public else "bridge")  # type: ignore[no-any-return]


def _batches(path: Path, size: int, public: bool) -> list[Any]:
    from producers.importers import arcadedb_source

    if public:
        arcadedb_source._row_batcher = lambda: None  # type: ignore[assignment]
    reading = arcadedb_source.read_rows_here(path, size)
    batches = []
    try:
        while True:
            batches.append(json.loads(next(reading)))
    except StopIteration as end:
        assert end.value == sum(map(len, batches)), end.value
    return batches


def _serve(args: list[str]) -> Any:
    command, path, *rest = args
    if command == "write":
        return _write_audit_ready_memory(Path(path), int(rest[0]))
    if command == "sql":
        return _sql(Path(path), *rest)
    if command == "view":
        return _seed_view(Path(path), json.loads(rest[0]))
    if command == "batches":
        return _batches(Path(path), int(rest[0]), rest[1] == "public")
    raise ValueError(f"unknown command {command!r}")


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        _hold(Path(sys.argv[2]))
    else:
        raise SystemExit(serve_answer(sys.argv[1:], _serve))
