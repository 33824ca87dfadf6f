"""The embedded log's append path: WAL reuse, the fold beside the COMMIT, failures."""

from __future__ import annotations

import gc
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

import producers.logs.sqlite as sqlite_log
from memstream import Memory, Message
from producers.logs.sqlite import LOG_FILE, SqliteLog
from projector.record_fold import fold_log
from schemas.errors import LogUnavailableError

FRAME = 24 + 4096  # a WAL frame: its header and one page


def _log_state_of(path: Path) -> Any:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return fold_log(conn.execute("SELECT seq, record FROM events ORDER BY seq").fetchall())
    finally:
        conn.close()


def _fold_threads() -> int:
    return sum(t.name == "memstream-sqlite-fold" for t in threading.enumerate())


def test_the_wal_is_reused_from_its_start(tmp_path: Path) -> None:
    # Checkpoints every 128 pages let commits overwrite the WAL instead of growing it; a
    # follower between its reads holds no snapshot that would pin it.
    with Memory(tmp_path / "db") as memory:
        follower = memory.subscribe(timeout=5)
        for i in range(1500):
            memory.add_message(Message(speaker="a", content=f"m{i}"))
            if i % 100 == 99:
                assert [next(follower).seq for _ in range(100)] == list(range(i - 99, i + 1))
        wal = (tmp_path / "db" / f"{LOG_FILE}-wal").stat().st_size
        assert wal <= 32 + 200 * FRAME


def test_each_append_is_folded_and_returned_with_its_seq(tmp_path: Path) -> None:
    with Memory(tmp_path / "db") as memory:
        stored = [memory.add_message(Message(speaker="a", content=f"m{i}")) for i in range(50)]
        assert [m.seq for m in stored] == list(range(50))
        assert memory.events() == stored
        state = memory.log.state()
    assert _log_state_of(tmp_path / "db") == state


def test_a_failed_commit_appends_and_folds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "db") as memory:
        first = memory.add_message(Message(speaker="a", content="kept"))
        log = memory.log
        assert isinstance(log, SqliteLog)
        real = log._cursor

        class FailingCommit:
            def execute(self, sql: str, *args: Any) -> Any:
                if sql == "COMMIT":
                    raise sqlite3.OperationalError("disk I/O error")
                return real.execute(sql, *args)

            def __getattr__(self, name: str) -> Any:
                return getattr(real, name)

        monkeypatch.setattr(log, "_cursor", FailingCommit())
        # A driver error never reaches the caller raw (issue 11, item 12).
        with pytest.raises(LogUnavailableError, match="append failed.*disk I/O"):
            memory.add_message(Message(speaker="a", content="lost"))
        monkeypatch.setattr(log, "_cursor", real)
        assert memory.events() == [first]
        after = memory.add_message(Message(speaker="a", content="next"))
        assert after.seq == 1
        assert [m.content for m in memory.events()] == ["kept", "next"]  # type: ignore[union-attr]
        state = log.state()
    assert _log_state_of(tmp_path / "db") == state


def test_a_fold_that_fails_after_the_commit_leaves_the_state_equal_to_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The strict fold of a checked record cannot refuse; were it to (a bug), the record is
    # durable already, and the state must still be the fold of the log.
    with Memory(tmp_path / "db") as memory:
        memory.add_message(Message(speaker="a", content="before"))

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("fold bug")

        monkeypatch.setattr(sqlite_log, "apply_record", broken)
        with pytest.raises(RuntimeError, match="fold bug"):
            memory.add_message(Message(speaker="a", content="committed"))
        monkeypatch.undo()
        state = memory.log.state()
        assert state == _log_state_of(tmp_path / "db")
        assert state.next_seq == 2
        assert memory.add_message(Message(speaker="a", content="after")).seq == 2


def test_the_fold_thread_ends_with_its_log(tmp_path: Path) -> None:
    before = _fold_threads()
    log = SqliteLog(tmp_path / "closed")
    log.append([Message(speaker="a", content="b")])
    assert _fold_threads() == before + 1
    log.close()
    assert _fold_threads() == before

    dropped = SqliteLog(tmp_path / "dropped")
    dropped.append([Message(speaker="a", content="b")])
    thread = dropped._folder.thread  # type: ignore[union-attr]
    del dropped
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
