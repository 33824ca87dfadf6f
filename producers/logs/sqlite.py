"""The embedded log: an append-only SQLite table, WAL mode, fsync on every commit.

Several processes may append at once: an append takes SQLite's write lock
(BEGIN IMMEDIATE), catches up with what others wrote, checks, then inserts at the next
seq. Triggers refuse any UPDATE or DELETE, so the table is append-only even to sqlite3.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TypeVar
from uuid import UUID

from producers.logs.base import AnyEvent, Transaction
from projector.audit import MemoryState, check_append, fold
from schemas.codec import decode_event, encode_event

__all__ = ["SqliteLog", "LOG_FILE"]

T = TypeVar("T")
LOG_FILE = "log.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    record BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS events_append_only_u BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_d BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END;
"""


class SqliteLog:
    """An audit log in `path/log.sqlite3`, folded incrementally into a `MemoryState`."""

    def __init__(self, path: str | PathLike[str]) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(
            self.path / LOG_FILE, isolation_level=None, check_same_thread=False, timeout=60
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit is fsynced before an append returns (invariant 14).
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        self._lock = threading.RLock()
        self._state = MemoryState()
        self._data_version = -1
        self._catch_up()

    def _catch_up(self) -> None:
        """Fold what other connections appended since we last looked."""
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        last = self._state.last_seq
        rows = self._conn.execute(
            "SELECT seq, record FROM events WHERE seq > ? ORDER BY seq",
            (-1 if last is None else last,),
        )
        state = self._state
        for seq, record in rows:
            state = fold(state, decode_event(record, seq))
        self._state = state
        self._data_version = version

    def state(self) -> MemoryState:
        with self._lock:
            self._catch_up()
            return self._state

    def transact(self, build: Transaction[T]) -> tuple[list[AnyEvent], T]:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._catch_up()
                state = self._state
                events, value = build(state)
                stored = self._check(state, events)
                conn.executemany(
                    "INSERT INTO events (seq, id, kind, record) VALUES (?, ?, ?, ?)",
                    [(e.seq, str(e.id), e.kind, encode_event(e)) for e in stored],
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            for event in stored:
                state = fold(state, event)
            # data_version does not move for this connection's own commits, so the
            # next catch-up still sees exactly what others add.
            self._state = state
            return stored, value

    @staticmethod
    def _check(state: MemoryState, events: Sequence[AnyEvent]) -> list[AnyEvent]:
        """Check each event against the state plus the batch before it; give seqs."""
        next_seq = 0 if state.last_seq is None else state.last_seq + 1
        pending: dict[UUID, AnyEvent] = {}
        stored: list[AnyEvent] = []
        for event in events:
            check_append(state, event, pending)
            event = event.with_seq(next_seq)
            next_seq += 1
            pending[event.id] = event
            stored.append(event)
        return stored

    def close(self) -> None:
        with self._lock:
            self._conn.close()
