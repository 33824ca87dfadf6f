"""The line of processes waiting for an embedded log's write lock.

SQLite's write lock has no queue. Its busy handler sleeps 1, 2, 5, ... up to 100 ms
between tries, so when several processes append to one path, the lock passes from a
writer that has finished to the next only when a sleeper wakes: the lock sits idle, and
the next writer then folds everything the others appended, holding the lock. Waiters
that all retry often instead take the lock between two appends of the same writer, so
each append of each writer first folds everyone else's last ones: six writers on two
cores did less in all than with the sleeping handler (`SqliteLog._begin_contended`).

`WritersLine` is a file lock beside the log (``writers.line``, `flock`): the waiting
process that holds it is *next in line*. Only that one polls SQLite's lock; it folds
what the holder commits while it waits, and takes the lock once the holder pauses (no
commit within a poll) or its turn is over. The others wait for the file lock, polling
it without touching the log (so the line is not first come, first served). The line
picks which waiter watches the log and nothing else: a writer that finds SQLite's lock
free takes it without joining the line, and the log's correctness never depends on it
(SQLite's lock alone orders the appends; a process that dies holding the file lock lets
go of it with its last descriptor).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

__all__ = ["LINE_FILE", "WritersLine"]

LINE_FILE = "writers.line"
# How often a process waiting to be next in line tries the file lock again.
_POLL_S = 0.02


class WritersLine:
    """The line of one log directory, as one process sees it (open lazily; a forked
    child opens its own: a descriptor it inherited shares the parent's lock)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / LINE_FILE
        self._fd: int | None = None
        self._pid = 0
        self._broken = False  # flock failed here: no line for this process

    def _descriptor(self) -> int | None:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._broken:
            return None
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            # No line here (a directory we may not create files in): every waiter polls
            # the log's lock itself, as with no line at all.
            self._fd = None
            return None
        self._pid = os.getpid()
        return self._fd

    def join(self, deadline: float, cancelled: threading.Event | None = None) -> bool:
        """Wait until this process is next in line (True), or until time.monotonic()
        passes `deadline` or `cancelled` is set (False). With no line file to lock: True
        at once."""
        fd = self._descriptor()
        if fd is None:
            return True
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() > deadline or (cancelled is not None and cancelled.is_set()):
                    return False
                time.sleep(_POLL_S)
            except OSError:
                # A file system without flock (ENOLCK, EOPNOTSUPP): no line, as above.
                self.close()
                self._broken = True
                return True

    def leave(self) -> None:
        """Let the next waiter be next in line (after `join` returned True)."""
        if self._fd is not None and self._pid == os.getpid():
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            except OSError:
                self.close()  # closing the descriptor lets go of the lock too

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None
