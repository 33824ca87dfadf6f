"""The compaction worker: one process that merges every projector's small snapshot chunks,
for as long as the projector process that started it lives.

Merging decodes and encodes chunks, which would hold the projector's GIL for up to a
second (a pause in its fold loop), so it runs in a process of its own. One process serves
every log of a projector process, in turn: a process per merge cost a fresh interpreter and
memstream's imports (about 0.5 s of CPU) each time, more than this 2-core machine had at 33
logs.

It is ``python -m projector.compaction_worker``, started with `subprocess`, not a
`multiprocessing` child: multiprocessing's ``spawn`` (and ``forkserver``) import the
parent's main module again in the child, so a script that ran a `Projector` at its top
level, without an ``if __name__ == "__main__":`` guard, got a second projector. This process
imports nothing of its parent's.

The protocol is data only, one JSON object a line, bounded: a request on the worker's stdin
(``{"location": "kafka://...", "epoch": "..."}``; the location carries credentials, so it
goes through the pipe, never the command line), its answer on stdout (``{"merged": N}`` or
``{"error": "..."}``). The worker exits at the end of its stdin: when its parent closes the
pipe, or dies (a SIGKILLed projector's pipe is closed by the kernel).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from typing import IO

__all__ = ["CompactionWorker", "WorkerGone", "main"]

# A request or an answer is one line of at most this many bytes (a location is well under).
MAX_LINE = 64 * 1024


class WorkerGone(Exception):
    """The worker process is gone (killed, or failed to start): a new one is made for the
    next merge."""


class CompactionWorker:
    """The parent's end: a worker process, started on first use and made again when it is
    gone. Thread-safe: one merge at a time (the worker merges in turn anyway)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The worker process's pid (None before the first merge)."""
        process = self._process
        return None if process is None else process.pid

    def start(self) -> int:
        """Start the worker process now, if none runs; its pid."""
        with self._lock:
            return self._started().pid

    def _started(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is None or process.poll() is not None:
            try:
                # The parent's import path, as multiprocessing's spawn hands it on: a
                # parent that found memstream on a path of its own (a script beside a
                # checkout) has a worker that finds it too.
                path = os.pathsep.join(p for p in sys.path if p)
                process = self._process = subprocess.Popen(
                    [sys.executable, "-m", "projector.compaction_worker"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    close_fds=True,
                    env={**os.environ, "PYTHONPATH": path},
                )
            except OSError as exc:
                raise WorkerGone(f"the compaction worker did not start: {exc}") from None
        return process

    def compact(self, location: str, epoch: str) -> int:
        """Merge runs of small snapshot chunks of `epoch` of the log at `location` (a
        ``kafka://`` location string); how many merges were made. `WorkerGone` when the
        worker died (the next call starts another); `RuntimeError` naming what failed
        when the merge itself did."""
        with self._lock:
            process = self._started()
            stdin, stdout = process.stdin, process.stdout
            assert stdin is not None and stdout is not None
            request = json.dumps({"location": location, "epoch": epoch}).encode() + b"\n"
            try:
                stdin.write(request)
                stdin.flush()
                line = stdout.readline(MAX_LINE + 1)
            except (BrokenPipeError, OSError, ValueError) as exc:
                self._drop(process)
                raise WorkerGone(f"the compaction worker is gone: {exc}") from None
            if not line:
                self._drop(process)
                raise WorkerGone("the compaction worker is gone (no answer)")
            answer = _parsed(line)
            if answer is None:
                self._drop(process)
                raise WorkerGone(f"the compaction worker answered {line[:200]!r}")
            error = answer.get("error")
            if isinstance(error, str):
                raise RuntimeError(error)
            merged = answer.get("merged")
            if type(merged) is not int or merged < 0:
                self._drop(process)
                raise WorkerGone(f"the compaction worker answered {line[:200]!r}")
            return merged

    def _drop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.kill()
        process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()
        if self._process is process:
            self._process = None

    def close(self) -> None:
        """End the worker (its stdin closed: it exits after the merge in hand)."""
        with self._lock:
            process, self._process = self._process, None
        if process is not None and process.stdin is not None:
            process.stdin.close()


def _parsed(line: bytes) -> dict[str, object] | None:
    """A line of the protocol: a JSON object of at most `MAX_LINE` bytes, else None."""
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """Answer each request line until the end of `requests`."""
    # Imported here: the parent imports this module for `CompactionWorker` alone.
    from producers.logs.location import parse_kafka_location
    from projector.snapshot_store import SnapshotStore

    while True:
        line = requests.readline(MAX_LINE + 1)
        if not line:
            return
        request = _parsed(line) or {}
        location, epoch = request.get("location"), request.get("epoch")
        if not isinstance(location, str) or not isinstance(epoch, str):
            answer: dict[str, object] = {"error": 'expected a line {"location", "epoch"}'}
        else:
            try:
                merged = SnapshotStore.connect(parse_kafka_location(location)).compact(epoch)
                answer = {"merged": merged}
            except Exception as exc:  # said to the parent, which logs it; the worker goes on
                answer = {"error": f"{type(exc).__name__}: {exc}"}
        answers.write(json.dumps(answer).encode() + b"\n")
        answers.flush()


def main() -> None:
    stdout = sys.stdout.buffer
    # Anything else printed (a library's warning) must not interleave with the answers.
    sys.stdout = sys.stderr
    try:
        _serve(sys.stdin.buffer, stdout)
    except KeyboardInterrupt:
        pass
    os._exit(0)  # no interpreter teardown: nothing is left to flush


if __name__ == "__main__":
    main()
