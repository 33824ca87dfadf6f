"""Issue 16, item 2: several writers on one embedded path take the write lock by short
retries rather than SQLite's sleeping busy handler, and nothing else changes: a lock held
too long is still `LogUnavailableError` naming the log, the busy timeout is restored, and
records others committed meanwhile are folded before the append is checked."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

import producers.logs.sqlite as sqlite_log
from producers.logs.sqlite import LOG_FILE, SqliteLog
from producers.memory import Memory
from schemas.audit import Message
from schemas.errors import LogUnavailableError


def _hold_lock(path: Path, seconds: float, insert: list[Message] | None = None) -> threading.Thread:
    """Another connection (another process's, to SQLite) holding the write lock for
    `seconds`, appending `insert` through a memstream log of its own when given."""
    started = threading.Event()

    def hold() -> None:
        if insert is not None:
            other = SqliteLog(path)
            other._cursor.execute("BEGIN IMMEDIATE")
            started.set()
            time.sleep(seconds)
            other._cursor.execute("ROLLBACK")
            other.append(insert)
            other.close()
            return
        conn = sqlite3.connect(path / LOG_FILE, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        started.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert started.wait(10)
    return thread


def _busy_timeout(memory: Memory) -> int:
    log = memory.log
    assert isinstance(log, SqliteLog)
    value: int = log._conn.execute("PRAGMA busy_timeout").fetchone()[0]
    return value


def test_a_busy_lock_switches_to_short_retries_and_back(tmp_path: Path) -> None:
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        log = memory.log
        assert isinstance(log, SqliteLog)
        memory.add_message(Message(speaker="ana", content="first"))
        assert not log._contended
        holder = _hold_lock(path, 0.05)
        memory.add_message(Message(speaker="ana", content="waited for the lock"))
        holder.join()
        assert log._contended  # it waited in SQLite's handler once: short retries now
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000
        for i in range(sqlite_log._UNCONTENDED_RUN):
            memory.add_message(Message(speaker="ana", content=f"alone {i}"))
        assert not log._contended  # the lock stayed free: the plain BEGIN again
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000
        assert [e.seq for e in memory.events()] == list(range(2 + sqlite_log._UNCONTENDED_RUN))


def test_records_committed_while_waiting_are_folded_before_the_check(tmp_path: Path) -> None:
    """The other writer commits a message while this one waits; this one then deletes
    it: the deletion is checked against a state that holds it."""
    path = tmp_path / "memory-db"
    theirs = Message(speaker="bob", content="theirs")
    with Memory(path) as memory:
        log = memory.log
        assert isinstance(log, SqliteLog)
        log._contended = True  # as after an earlier wait
        holder = _hold_lock(path, 0.05, insert=[theirs])
        time.sleep(0.2)  # the holder has let go and appended
        holder.join()
        deletion = memory.delete(theirs.id, "asked to")
        assert deletion.seq == 1
        assert memory.get(theirs.id) is not None
        assert [e.id for e in memory.events()] == [theirs.id, deletion.id]


@pytest.mark.parametrize("contended", [False, True], ids=["plain", "short-retries"])
def test_a_lock_held_too_long_is_log_unavailable_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contended: bool
) -> None:
    monkeypatch.setattr(sqlite_log, "_LOCK_WAIT_S", 0.3)
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        log = memory.log
        assert isinstance(log, SqliteLog)
        memory.add_message(Message(speaker="ana", content="before"))
        log._contended = contended
        holder = _hold_lock(path, 2.0)
        refused = Message(speaker="ana", content="refused")
        with pytest.raises(LogUnavailableError, match="locked by another connection") as caught:
            memory.add_message(refused)
        assert str(path) in str(caught.value)
        holder.join()
        assert _busy_timeout(memory) == 300  # restored, whichever way it waited
        assert memory.get(refused.id) is None
        assert [e.content for e in memory.events()] == ["before"]  # type: ignore[union-attr]
        stored = memory.add_message(Message(speaker="ana", content="after"))
        assert stored.seq == 1
