"""The embedded log: an append-only SQLite table, WAL mode, fsync on every commit.

Several processes may append at once: an append takes SQLite's write lock
(BEGIN IMMEDIATE), catches up with what others wrote, checks, then inserts at the next
seq. Triggers refuse any UPDATE or DELETE, so the table is append-only even to sqlite3.
Rows hold the record bytes exactly as the Kafka log would (`schemas.codec`), and the state
is the same total fold of them.

An append's own records are folded on a helper thread while its COMMIT waits on the fsync
(sqlite3 lets go of the GIL meanwhile): the fold then costs an append nothing, and the
append still returns only once its commit is durable and folded.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

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
from schemas.errors import LogNotFoundError
from schemas.records import Record

__all__ = ["SqliteLog", "LOG_FILE"]

T = TypeVar("T")
LOG_FILE = "log.sqlite3"
_POLL_S = 0.05
_INSERT = "INSERT INTO events (seq, id, kind, record) VALUES (?, ?, ?, ?)"

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


def _fold_appended(
    state: LogState, first: int, records: list[Record]
) -> tuple[LogState, list[Appended]]:
    """Fold records a transaction checked against `state` and appends at `first` on."""
    appended: list[Appended] = []
    for seq, record in zip(range(first, first + len(records)), records, strict=True):
        # Checked against this very state, so the strict fold cannot refuse.
        state, lifecycle = apply_record(state, seq, record, checked=True)
        stored = record if record_kind(record) == "envelope" else lifecycle[0].subject
        appended.append(Appended(seq, stored, lifecycle))
    return state, appended


class _FoldThread:
    """A thread that folds an append's records while the appending thread waits on its
    COMMIT's fsync (sqlite3 lets go of the GIL meanwhile).

    `start` hands a job over; `wait` gives its (result, None) or (None, error). One job at
    a time: the log's lock orders its callers.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._run,
            args=(self._jobs, self._done),
            name="memstream-sqlite-fold",
            daemon=True,
        )
        self.thread.start()

    @staticmethod
    def _run(
        jobs: queue.SimpleQueue[Callable[[], Any] | None],
        done: queue.SimpleQueue[tuple[Any, BaseException | None]],
    ) -> None:
        # Static, holding only the queues: the thread keeps no log alive.
        while (job := jobs.get()) is not None:
            try:
                done.put((job(), None))
            except BaseException as exc:  # handed to the appending thread, which raises it
                done.put((None, exc))

    def start(self, job: Callable[[], Any]) -> None:
        self._jobs.put(job)

    def wait(self) -> tuple[Any, BaseException | None]:
        return self._done.get()

    def stop(self) -> None:
        self._jobs.put(None)


class SqliteLog:
    """A log in `path/log.sqlite3`, folded incrementally into a `LogState`."""

    def __init__(self, path: str | PathLike[str], *, create: bool = True) -> None:
        self.path = Path(path)
        self.location = str(path)
        if not create and not (self.path / LOG_FILE).is_file():
            raise LogNotFoundError(
                f"log {self.location}: no embedded log there ({self.path / LOG_FILE} does not "
                "exist); only writers create logs"
            )
        self.path.mkdir(parents=True, exist_ok=True)
        self._conn = self._connect()
        self._conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        # One cursor for the statements of every append (under the lock), rather than a
        # new one per statement. Each runs to its end, so none holds a read snapshot.
        self._cursor = self._conn.cursor()
        self._lock = threading.RLock()
        self._state = empty_state()
        self._data_version = -1
        self._folder: _FoldThread | None = None
        self._catch_up()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path / LOG_FILE, isolation_level=None, check_same_thread=False, timeout=60
        )
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: every commit is fsynced before an append returns (invariant 14).
        conn.execute("PRAGMA synchronous=FULL")
        # A checkpoint every 128 pages (default 1000), so the WAL is reused from its start
        # soon: a fresh WAL file grows with every commit until then, and fsyncing a growing
        # file costs about twice fsyncing one overwritten in place. Each checkpoint costs a
        # few fsyncs, a small share of 128 commits.
        conn.execute("PRAGMA wal_autocheckpoint=128")
        return conn

    def _catch_up(self) -> None:
        """Fold what other connections appended since we last looked."""
        version = self._cursor.execute("PRAGMA data_version").fetchone()[0]
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

    def _fold_thread(self) -> _FoldThread:
        folder = self._folder
        if folder is None or folder.pid != os.getpid():  # none yet, or a forked child's
            folder = self._folder = _FoldThread()
            weakref.finalize(self, folder.stop)  # a log dropped unclosed stops it too
        return folder

    def transact(self, build: Transaction[T]) -> tuple[list[Appended], T]:
        with self._lock:
            cursor = self._cursor
            cursor.execute("BEGIN IMMEDIATE")
            try:
                self._catch_up()
                state = self._state
                records, encoded, value = prepare(state, build)
                first = state.next_seq
                if len(records) == 1:  # execute: executemany's set-up costs more
                    record = records[0]
                    cursor.execute(
                        _INSERT, (first, record_id(record), record_kind(record), encoded[0])
                    )
                else:
                    cursor.executemany(_INSERT, [
                        (seq, record_id(record), record_kind(record), data)
                        for seq, record, data in zip(
                            range(first, first + len(records)), records, encoded, strict=True
                        )
                    ])  # fmt: skip
                folder = self._fold_thread()
                folder.start(lambda: _fold_appended(state, first, records))
                try:
                    cursor.execute("COMMIT")  # the fsync; the fold runs meanwhile
                except BaseException:
                    folder.wait()  # nothing else may fold before this fold is over
                    raise
            except BaseException:
                if self._conn.in_transaction:  # a failed COMMIT may have rolled back already
                    cursor.execute("ROLLBACK")
                raise
            folded, error = folder.wait()
            if error is not None:
                # Committed, yet the fold refused a record it had checked (a bug): fold
                # the log's rows as every reader does, so the state still is the log's.
                self._data_version = -1
                self._catch_up()
                raise error
            # data_version does not move for this connection's own commits, so the
            # next catch-up still sees exactly what others add.
            self._state, appended = folded
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
            if self._folder is not None:
                self._folder.stop()
                self._folder.thread.join()
                self._folder = None
