"""Issue 16, item 2: several writers on one embedded path wait for the write lock in line
(`producers.logs.writers_line`) rather than in SQLite's sleeping busy handler, and
nothing else changes: a lock held too long is still `LogUnavailableError` naming the log,
the busy timeout is restored, and records others committed meanwhile are folded before
the append is checked."""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import producers.logs.sqlite as sqlite_log
import producers.logs.writers_line as writers_line
from producers.logs.sqlite import LOG_FILE, SqliteLog, record_checksum
from producers.logs.writers_line import LINE_FILE, WritersLine
from producers.memory import Memory
from schemas.audit import Message
from schemas.codec import encode_record
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


def _after_one_append(memory: Memory, contended: bool) -> SqliteLog:
    """The memory's log after one append ("before"), waiting in line (`contended`) or
    not at its next."""
    log = memory.log
    assert isinstance(log, SqliteLog)
    memory.add_message(Message(speaker="ana", content="before"))
    log._contended = contended
    return log


def test_a_writer_starts_contended_goes_plain_and_back(tmp_path: Path) -> None:
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        log = memory.log
        assert isinstance(log, SqliteLog)
        assert log._contended  # a writer starts as if others were appending
        for i in range(sqlite_log._UNCONTENDED_RUN):
            memory.add_message(Message(speaker="ana", content=f"alone {i}"))
        assert not log._contended  # the lock stayed free: the plain BEGIN
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000
        holder = _hold_lock(path, 0.05)
        memory.add_message(Message(speaker="ana", content="waited for the lock"))
        holder.join()
        assert log._contended  # it waited in SQLite's handler once: in line from now on
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000
        assert not (path / LINE_FILE).exists()  # no one waited in line yet
        holder = _hold_lock(path, 0.05)
        memory.add_message(Message(speaker="ana", content="waited in line"))
        holder.join()
        assert (path / LINE_FILE).exists()
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000
        assert [e.seq for e in memory.events()] == list(range(2 + sqlite_log._UNCONTENDED_RUN))


def test_the_next_in_line_folds_while_waiting_and_gets_its_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection appends messages without pause for 3 s, holding the lock all
    but between two commits. The writer waiting in line folds them as they come (outside
    any transaction) and takes the lock once its turn (0.3 s here) is over, not when the
    other stops."""
    monkeypatch.setattr(sqlite_log, "_TURN_S", 0.3)
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        log = memory.log
        assert isinstance(log, SqliteLog)
        memory.add_message(Message(speaker="ana", content="first"))
        folded_waiting: list[int] = []
        policies: set[int] = set()
        waiting = False
        catch_up, begin = log._catch_up, log._begin_contended

        def watched_catch_up() -> None:
            before = log._state.next_seq
            catch_up()
            if waiting and not log._conn.in_transaction:
                folded_waiting.append(log._state.next_seq - before)
                if sys.platform.startswith("linux"):
                    policies.add(os.sched_getscheduler(threading.get_native_id()))

        def watched_begin(cursor: sqlite3.Cursor) -> None:
            nonlocal waiting
            waiting = True
            try:
                begin(cursor)
            finally:
                waiting = False

        monkeypatch.setattr(log, "_catch_up", watched_catch_up)
        monkeypatch.setattr(log, "_begin_contended", watched_begin)
        stop, started = threading.Event(), threading.Event()
        theirs: list[int] = []

        def append_without_pause() -> None:
            # Rows as a writer stores them, by raw SQL: no Python of memstream's (nor its
            # share of the GIL) between two commits.
            other = sqlite3.connect(path / LOG_FILE, isolation_level=None, timeout=60)
            end = time.monotonic() + 3.0
            while time.monotonic() < end and not stop.is_set():
                other.execute("BEGIN IMMEDIATE")
                if not started.is_set():  # held until the writer below has found it busy
                    started.set()
                    time.sleep(0.1)
                seq = other.execute("SELECT max(seq) + 1 FROM events").fetchone()[0]
                message = Message(speaker="bob", content=f"busy {seq}")
                data = encode_record(message)
                other.execute(
                    "INSERT INTO events (seq, id, kind, record, crc) VALUES (?, ?, ?, ?, ?)",
                    (seq, str(message.id), "message", data, record_checksum(seq, data)),
                )
                other.execute("COMMIT")
                theirs.append(seq)
            other.close()

        holder = threading.Thread(target=append_without_pause)
        holder.start()
        assert started.wait(10)
        begun = time.monotonic()
        try:
            mine = memory.add_message(Message(speaker="ana", content="my turn"))
            waited = time.monotonic() - begun
        finally:
            stop.set()
            holder.join()
        assert waited < 2.0, f"waited {waited:.2f} s for a writer that never paused"
        assert any(folded_waiting), folded_waiting  # folded while waiting, not only before
        # ... in a thread that gives way to any other wanting the core (`low_priority`)
        assert policies <= {os.SCHED_IDLE}
        assert mine.seq is not None and min(theirs) < mine.seq
        seqs = [e.seq for e in memory.events()]
        assert seqs == list(range(len(theirs) + 2))


def test_a_line_file_that_cannot_be_made_changes_nothing(tmp_path: Path) -> None:
    """A line that cannot be opened (here its name is a directory): the waiting writer
    polls SQLite's lock itself, and appends as before."""
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        (path / LINE_FILE).mkdir()
        holder = _hold_lock(path, 0.1)
        stored = memory.add_message(Message(speaker="ana", content="waited"))
        holder.join()
        assert stored.seq == 0
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000


def test_a_file_system_without_flock_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_flock(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(writers_line.fcntl, "flock", no_flock)
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        holder = _hold_lock(path, 0.1)
        stored = memory.add_message(Message(speaker="ana", content="waited"))
        holder.join()
        holder = _hold_lock(path, 0.1)
        again = memory.add_message(Message(speaker="ana", content="waited again"))
        holder.join()
        assert (stored.seq, again.seq) == (0, 1)
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000


def test_a_process_killed_in_line_lets_the_next_one_in(tmp_path: Path) -> None:
    """A process that holds the line (next in line) and is SIGKILLed: the kernel lets go
    of its file lock, and a writer waiting behind it appends."""
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        memory.add_message(Message(speaker="ana", content="before"))
        ahead = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import fcntl, os, sys, time\n"
                "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n"
                "fcntl.flock(fd, fcntl.LOCK_EX)\n"
                "print('in line', flush=True)\n"
                "time.sleep(600)\n",
                str(path / LINE_FILE),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert ahead.stdout is not None and ahead.stdout.readline() == "in line\n"
            holder = _hold_lock(path, 0.3)
            threading.Timer(0.5, ahead.kill).start()
            started = time.monotonic()
            stored = memory.add_message(Message(speaker="ana", content="after the kill"))
            waited = time.monotonic() - started
            holder.join()
        finally:
            ahead.kill()
            ahead.wait(10)
        assert stored.seq == 1
        assert 0.4 < waited < 5.0  # behind the killed process until its death, then in


def test_waiting_in_line_counts_towards_the_lock_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process stays next in line and the lock stays held: the append is
    `LogUnavailableError` once `_LOCK_WAIT_S` have passed in all, nothing appended."""
    monkeypatch.setattr(sqlite_log, "_LOCK_WAIT_S", 0.3)
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        memory.add_message(Message(speaker="ana", content="before"))
        ahead = WritersLine(path)
        assert ahead.join(time.monotonic() + 1)
        try:
            holder = _hold_lock(path, 2.0)
            started = time.monotonic()
            with pytest.raises(LogUnavailableError, match="locked by another connection"):
                memory.add_message(Message(speaker="ana", content="refused"))
            assert time.monotonic() - started < 1.5
            holder.join()
        finally:
            ahead.leave()
            ahead.close()
        assert _busy_timeout(memory) == 300
        assert [e.content for e in memory.events()] == ["before"]  # type: ignore[union-attr]


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


@pytest.mark.parametrize("contended", [False, True], ids=["plain", "in-line"])
def test_a_lock_held_too_long_is_log_unavailable_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contended: bool
) -> None:
    monkeypatch.setattr(sqlite_log, "_LOCK_WAIT_S", 0.3)
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        _after_one_append(memory, contended)
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


def test_a_wait_interrupted_by_ctrl_c_leaves_no_transaction_and_no_place_in_line(
    tmp_path: Path, ctrl_c_raises: None
) -> None:
    """Ctrl-C while the append waits in line: KeyboardInterrupt, nothing appended, the
    wait's thread stopped before the connection is touched again, the line free for the
    next waiter, the busy timeout restored; the log appends afterwards."""
    path = tmp_path / "memory-db"
    with Memory(path) as memory:
        log = _after_one_append(memory, contended=True)
        holder = _hold_lock(path, 1.0)
        main = threading.main_thread().ident
        assert main is not None
        timer = threading.Timer(0.2, signal.pthread_kill, (main, signal.SIGINT))
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            memory.add_message(Message(speaker="ana", content="interrupted"))
        timer.join()
        assert not log._conn.in_transaction
        assert not [t for t in threading.enumerate() if t.name == "memstream-sqlite-waiting"]
        other = WritersLine(path)
        assert other.join(time.monotonic() + 0.5)  # this process left the line
        other.leave()
        other.close()
        assert _busy_timeout(memory) == sqlite_log._LOCK_WAIT_S * 1000
        holder.join()
        after = memory.add_message(Message(speaker="ana", content="after"))
        assert [e.content for e in memory.events()] == ["before", "after"]  # type: ignore[union-attr]
        assert after.seq == 1
