"""Invariant 1: the store issues no UPDATE and no DELETE; even sqlite3 cannot."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from memstream import Memory, Message
from producers.logs.sqlite import LOG_FILE

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("schemas", "producers", "projector", "queryd", "memstream")
# An UPDATE or DELETE statement against a table, in any string of the code.
STATEMENT = re.compile(r"\b(UPDATE\s+\w+\s+SET|DELETE\s+FROM)\b", re.IGNORECASE)


# The one table that deletes: an encrypted log's key store destroys keys (erasure). Its
# statements name the key table only, and live in that one module.
KEY_STORE = ROOT / "producers" / "keys" / "sqlite_keys.py"
KEY_TABLE_DELETE = re.compile(r"DELETE\s+FROM\s+\{KEYS_TABLE\}", re.IGNORECASE)


def test_no_update_or_delete_statement_in_the_code() -> None:
    sources = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    assert sources
    offenders = [
        str(p)
        for p in sources
        if STATEMENT.search(
            KEY_TABLE_DELETE.sub("", p.read_text()) if p == KEY_STORE else p.read_text()
        )
    ]
    assert offenders == []
    assert KEY_TABLE_DELETE.search(KEY_STORE.read_text())  # what the exception is for


def test_the_table_refuses_update_and_delete(tmp_path: Path) -> None:
    with Memory(tmp_path / "db") as memory:
        memory.add_message(Message(speaker="a", content="b"))
    conn = sqlite3.connect(tmp_path / "db" / LOG_FILE)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM events")
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1


def test_wal_mode_and_full_sync(tmp_path: Path) -> None:
    with Memory(tmp_path / "db") as memory:
        conn = memory._log._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
