"""Source data for the importer tests, written by the seed packages themselves."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

WORDS = "invoice cat vaccine budget meeting travel report garden server backup".split()


def write_audit_ready_memory(path: Path, messages: int = 40) -> None:
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
    """Run SQL commands on an ArcadeDB database (to damage a copy of a seed database)."""
    import arcadedb_embedded

    db = arcadedb_embedded.open_database(str(path))
    try:
        for command in commands:
            with db.transaction():
                db.command("sql", command)
    finally:
        db.close()


def seed_events(path: Path) -> list[Any]:
    from audit_ready_memory import Memory

    with Memory(path) as memory:
        return list(memory.events())


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value))
    return path
