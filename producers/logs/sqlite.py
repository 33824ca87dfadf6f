"""The embedded log: an append-only SQLite table, WAL mode, fsync on every commit.

Several processes may append at once: an append takes SQLite's write lock
(BEGIN IMMEDIATE), catches up with what others wrote, checks, then inserts at the next
seq. Triggers refuse any UPDATE or DELETE, so the table is append-only even to sqlite3.
Rows hold the record bytes exactly as the Kafka log would (`schemas.codec`), and the state
is the same total fold of them.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import TypeVar

from producers.logs.base import (
    Appended,
    LifecycleRecord,
    StopFlag,
    Transaction,
    fold_lifecycle,
    prepare,
)
from projector.log_state import LogState, apply_record, empty_state, fold_record
from schemas.codec import record_id, record_kind
from schemas.records import Record

__all__ = ["SqliteLog", "LOG_FILE"]

T = TypeVar("T")
LOG_FILE = "log.sqlite3"
_POLL_S = 0.05

# No index on id: every read is served by the folded state, and an index would cost a
# second B-tree write on each append.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    record BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS events_append_only_u BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_d BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END;
"""


class SqliteLog:
    """A log in `path/log.sqlite3`, folded incrementally into a `LogState`."""

    def __init__(self, path: str | PathLike[str]) -> None:
        self.path = Path(path)
        self.location = str(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._conn = self._connect()
        self._conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        self._lock = threading.RLock()
        self._state = empty_state()
        self._data_version = -1
        self._catch_up()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path / LOG_FILE, isolation_level=None, check_same_thread=False, timeout=60
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit is fsynced before an append returns (invariant 14).
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def _catch_up(self) -> None:
        """Fold what other connections appended since we last looked."""
        version = self._conn.execute("PRAGMA data_version").fetchone()[0]
        if version == self._data_version:
            return
        state = self._state
        rows = self._conn.execute(
            "SELECT seq, record FROM events WHERE seq >= ? ORDER BY seq", (state.next_seq,)
        )
        for seq, record in rows:
            state = fold_record(state, seq, record).state
        self._state = state
        self._data_version = version

    def state(self, min_seq: int | None = None) -> LogState:
        with self._lock:
            self._catch_up()
            return self._state

    def transact(self, build: Transaction[T]) -> tuple[list[Appended], T]:
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._catch_up()
                state = self._state
                records, encoded, value = prepare(state, build)
                first = state.next_seq
                conn.executemany(
                    "INSERT INTO events (seq, id, kind, record) VALUES (?, ?, ?, ?)",
                    [
                        (first + i, record_id(r), record_kind(r), data)
                        for i, (r, data) in enumerate(zip(records, encoded, strict=True))
                    ],
                )
                # Fold before COMMIT: checked above, so the strict fold cannot refuse; if it
                # did, nothing would be committed.
                appended: list[Appended] = []
                for i, record in enumerate(records):
                    state, lifecycle = apply_record(state, first + i, record)
                    stored = lifecycle[0].subject if record_kind(record) != "envelope" else record
                    appended.append(Appended(first + i, stored, lifecycle))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            # data_version does not move for this connection's own commits, so the
            # next catch-up still sees exactly what others add.
            self._state = state
            return appended, value

    def append(self, records: Sequence[Record]) -> list[Appended]:
        """Append records (checked, all or none, one commit)."""
        batch = list(records)
        return self.transact(lambda state: (batch, None))[0]

    def head(self) -> int | None:
        """The seq of the log's last record, folded yet or not (None: an empty log)."""
        with self._lock:
            return self._conn.execute("SELECT max(seq) FROM events").fetchone()[0]  # type: ignore[no-any-return]

    def records(
        self, from_seq: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[tuple[int, bytes]]:
        conn = self._connect()
        try:
            next_seq = from_seq
            idle_since = time.monotonic()
            while stop is None or not stop.is_set():
                rows = conn.execute(
                    "SELECT seq, record FROM events WHERE seq >= ? ORDER BY seq LIMIT 1000",
                    (next_seq,),
                ).fetchall()
                for seq, record in rows:
                    yield seq, record
                    next_seq = seq + 1
                if rows:
                    idle_since = time.monotonic()
                    continue
                if timeout is not None and time.monotonic() - idle_since >= timeout:
                    return
                time.sleep(_POLL_S)
        finally:
            conn.close()

    def lifecycle(
        self, from_offset: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[LifecycleRecord]:
        return fold_lifecycle(self.records(0, timeout=timeout, stop=stop), from_offset)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
