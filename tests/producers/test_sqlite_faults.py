"""Issue 11, item 12: the embedded log on read-only media and on a full disk.

Real filesystems, no mocks: a read-only bind mount (root cannot write through it either)
and a small tmpfs filled to the last byte. Both need root and mount(8); without them the
tests skip saying so.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from producers.logs.sqlite import LOG_FILE, SqliteLog
from producers.memex_log_store import LogGraphs
from producers.memex_store import MemexStore
from producers.memory import Memory
from projector.record_fold import LogState
from queryd.audit import search
from schemas.audit import Document, Message
from schemas.errors import LogNotFoundError, LogUnavailableError, MemstreamError


def _mount(*args: str | Path) -> None:
    subprocess.run(["mount", *map(str, args)], check=True, capture_output=True, text=True)


def _unmount(target: Path) -> None:
    if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(target)], check=True)  # busy: detach it anyway


@contextmanager
def read_only_view(source: Path) -> Iterator[Path]:
    """`source` mounted read-only at a directory beside it: writes fail with EROFS, for
    root too."""
    target = source.parent / f"{source.name}-ro"
    target.mkdir()
    try:
        _mount("--bind", source, target)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs root and mount(8) for a read-only bind mount: {exc}")
    try:
        _mount("-o", "remount,ro,bind", target)
        probe = target / "probe"
        with pytest.raises(OSError) as info:
            probe.write_bytes(b"x")
        assert info.value.errno == errno.EROFS
        yield target
    finally:
        _unmount(target)


@contextmanager
def small_filesystem(where: Path, size: str = "2m") -> Iterator[Path]:
    where.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", where)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs root and mount(8) for a small tmpfs: {exc}")
    try:
        yield where
    finally:
        _unmount(where)


def _fill(directory: Path) -> Path:
    """A file that takes every free byte of the filesystem under `directory`."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 16, 4096, 512, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


def _build(path: Path) -> None:
    with Memory(path) as memory:
        kept = [memory.add_message(Message(speaker="ana", content=f"m{i}")) for i in range(20)]
        memory.delete([kept[3].id], "asked", requested_by="ana")
        memory.recall("m1")
        store = MemexStore(backend=LogGraphs(memory.log))
        store.create(
            scope="s",
            kind="observation",
            content={"v": [1, 2]},
            author="a",
            source_kind="observed",
            authority=0.5,
        )


def _read(path: Path) -> tuple[LogState, list[tuple[int, bytes]], list]:
    with Memory(path, create=False) as memory:
        lifecycle = [(r.offset, r.seq, r.envelope) for r in memory.lifecycle(0, timeout=0)]
        return memory.log.state(), list(memory.log.records(0, timeout=0)), lifecycle


# --- read-only media ----------------------------------------------------------------------------


def test_a_log_on_read_only_media_reads_everything_and_refuses_appends(tmp_path: Path) -> None:
    source = tmp_path / "archive"
    _build(source / "db")
    expected = _read(source / "db")
    files = sorted(os.listdir(source / "db"))
    with read_only_view(source) as view:
        for create in (False, True):  # an auditor, or someone who did not say
            with Memory(view / "db", create=create) as memory:
                state = memory.log.state()
                assert state == expected[0]
                assert list(memory.log.records(0, timeout=0)) == expected[1]
                lifecycle = [(r.offset, r.seq, r.envelope) for r in memory.lifecycle(0, timeout=0)]
                assert lifecycle == expected[2]
                assert [m.content for m in search(memory.replay(), "m1")] == ["m1"]  # type: ignore[union-attr]
                assert memory.log.head() == state.last_seq
                with pytest.raises(LogUnavailableError, match="append refused.*read-only") as info:
                    memory.add_message(Message(speaker="a", content="refused"))
                assert str(view / "db") in str(info.value)
                with pytest.raises(LogUnavailableError, match="read-only"):
                    memory.recall("m1")  # a recall is an append too
                assert memory.log.state() == state
    assert sorted(os.listdir(source / "db")) == files  # nothing written beside it


def test_a_missing_log_on_read_only_media_is_not_created(tmp_path: Path) -> None:
    (tmp_path / "empty" / "dir").mkdir(parents=True)
    with read_only_view(tmp_path / "empty") as view:
        with pytest.raises(LogUnavailableError, match="create failed: cannot write in"):
            Memory(view / "dir")  # the directory is there, the log is not
        with pytest.raises(LogNotFoundError, match="only writers create"):
            Memory(view / "db", create=False)
        with pytest.raises(
            LogUnavailableError, match=f"log {view / 'db'}: create failed.*Read-only file system"
        ):
            Memory(view / "db")


_KILLED_WRITER = """
import os, sys
from producers.memory import Memory
from schemas.audit import Message
memory = Memory(sys.argv[1])
for i in range(30):
    memory.add_message(Message(speaker="late", content=f"in the wal {i}"))
os.kill(os.getpid(), 9)
"""


def test_records_still_in_the_write_ahead_log_are_read_on_read_only_media(
    tmp_path: Path,
) -> None:
    # A writer killed before its last checkpoint leaves committed records in the -wal
    # file: an archive copied from a live system. Reading must not drop them.
    source = tmp_path / "archive"
    _build(source / "db")
    before = _read(source / "db")[0]
    result = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(source / "db")])
    assert result.returncode == -signal.SIGKILL
    assert (source / "db" / f"{LOG_FILE}-wal").stat().st_size > 0
    with read_only_view(source) as view:
        with Memory(view / "db", create=False) as memory:
            assert len(memory) == len(before.memory) + 30
            assert memory.events()[-1].content == "in the wal 29"  # type: ignore[union-attr]
        # Without its -shm index SQLite cannot read the WAL here: refused, not served short.
        partial = tmp_path / "partial"
        (partial / "db").mkdir(parents=True)
        for name in (LOG_FILE, f"{LOG_FILE}-wal"):
            shutil.copy(source / "db" / name, partial / "db" / name)
    with read_only_view(partial) as view:
        with pytest.raises(LogUnavailableError, match="write-ahead log.*copy the directory"):
            Memory(view / "db", create=False)


# --- a full disk --------------------------------------------------------------------------------


def _rows(path: Path) -> list[tuple[int, bytes]]:
    conn = sqlite3.connect(f"file:{path / LOG_FILE}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT seq, record FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


def test_a_full_disk_refuses_the_append_clearly_and_loses_nothing(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small") as disk:
        with Memory(disk / "db") as memory:
            for i in range(10):
                memory.add_message(Message(speaker="a", content=f"before {i}"))
            filler = _fill(disk)
            text = "a document that needs pages of its own " * 200
            error: MemstreamError | None = None
            for i in range(200):  # until the WAL has to grow and cannot
                state = memory.log.state()
                rows = _rows(disk / "db")
                try:
                    memory.add_document(Document(name=f"d{i}", text=text))
                except LogUnavailableError as exc:
                    error = exc
                    break
            assert error is not None, "the disk never filled"
            assert f"log {disk / 'db'}: append failed: the disk is full" in str(error)
            # Nothing appended, nothing folded.
            assert memory.log.state() == state
            assert _rows(disk / "db") == rows
            filler.unlink()
            stored = memory.add_message(Message(speaker="a", content="after"))
            assert stored.seq == state.next_seq
        assert _read(disk / "db")[0].last_seq == stored.seq


def test_a_full_disk_refuses_a_new_log_clearly(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", size="64k") as disk:
        _fill(disk)
        with pytest.raises(
            LogUnavailableError, match=f"log {disk / 'db'}: .*(disk is full|No space left)"
        ):
            SqliteLog(disk / "db")
