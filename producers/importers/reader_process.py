"""A source read in a process of its own: the parent runs ``python -m MODULE FD`` with
its arguments as a JSON list on the child's stdin (an argument may be longer than a
command line takes), the child does the reading and writes one JSON answer to the pipe FD,
and the parent gets the value back or the child's error as the same `ImportSourceError`.

Why: reading an audit-ready-memory database runs the JVM (ArcadeDB through JPype) in the
process that reads. A fault in that engine (a segfault ends the process, with no Python
exception to catch) would take the caller with it, be it the command line, a benchmark or a
test run. In a child it takes only the child, and the caller gets `ReaderFailedError`
naming how the reader ended; nothing was appended, since an import reads everything first.

The answer is untrusted like any byte read back: bounded (`limit`), parsed as JSON only,
and an error is rebuilt only as one of the importer's own error types.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producers.importers.errors import (
    CorruptSourceError,
    ImportSourceError,
    MissingExtraError,
    ReaderFailedError,
    SourceNotFoundError,
    UnsupportedSourceError,
)

__all__ = ["run_reader", "serve_answer", "answer_limit"]

# The errors a child may answer with, by name; any other name is a failed reader.
_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (CorruptSourceError, MissingExtraError, SourceNotFoundError, UnsupportedSourceError)
}
_CHUNK = 1 << 20
_STDERR_TAIL = 2000
# The project's root (where `producers` lives), so that the child imports the same code.
_ROOT = str(Path(__file__).resolve().parents[2])


def answer_limit(path: Path) -> int:
    """The most bytes a reader's answer about the database directory `path` may have: the
    rows of a database are at most its files' size, and JSON's escapes at most sextuple a
    character; anything longer is not an answer about that source."""
    size = 0
    for child in path.iterdir():
        try:
            size += child.stat().st_size if child.is_file() else 0
        except OSError:
            continue
    return 8 * size + (64 << 20)


def run_reader(module: str, args: list[str], *, limit: int, what: str) -> Any:
    """Run ``python -m module FD``, `args` on its stdin, and return the value it answered
    on FD.

    Raises the child's own error (one of the importer's error types, with its message), or
    `ReaderFailedError` when the child ended without an answer (a crash, a kill) or answered
    with more than `limit` bytes or with something that is not an answer. `what` names the
    source in those messages.
    """
    read_end, write_end = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryFile() as output:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", module, str(write_end)],
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                pass_fds=(write_end,),
                env=env,
            )
        except OSError as exc:
            os.close(read_end)
            raise ReaderFailedError(f"{what}: could not start the reader process: {exc}") from None
        finally:
            os.close(write_end)  # the child holds its own copy: EOF comes when it ends
        try:
            assert child.stdin is not None
            try:
                with child.stdin:
                    child.stdin.write(json.dumps(args).encode())
            except BrokenPipeError:  # it ended before reading: its exit says how
                pass
            data, over = _read_bounded(read_end, limit)
            if over:
                child.kill()
            code = child.wait()
        finally:
            os.close(read_end)
            if child.poll() is None:  # an interrupt (Ctrl-C) while reading
                child.kill()
                child.wait()
        if over:
            raise ReaderFailedError(
                f"{what}: the reader's answer is over {limit:,} bytes, more than the "
                "source holds; nothing was read"
            )
        output.seek(0, os.SEEK_END)
        output.seek(max(0, output.tell() - _STDERR_TAIL))
        tail = output.read().decode("utf-8", "replace").strip()
    return _answer(data, code, tail, what)


def _read_bounded(fd: int, limit: int) -> tuple[bytes, bool]:
    parts: list[bytes] = []
    size = 0
    while chunk := os.read(fd, _CHUNK):
        size += len(chunk)
        if size > limit:
            return b"", True
        parts.append(chunk)
    return b"".join(parts), False


def _answer(data: bytes, code: int, tail: str, what: str) -> Any:
    said = f"; its last output: {tail}" if tail else ""
    if not data:
        if code < 0:
            try:
                how = f"by signal {signal.Signals(-code).name}"
            except ValueError:
                how = f"by signal {-code}"
        else:
            how = f"with exit status {code}"
        raise ReaderFailedError(
            f"{what}: the reader process (ArcadeDB's JVM) ended {how} before it answered; "
            f"nothing was read{said}"
        )
    try:
        answer = json.loads(data)
    except ValueError as exc:
        raise ReaderFailedError(f"{what}: the reader's answer is not JSON ({exc}){said}") from None
    if isinstance(answer, dict) and set(answer) == {"ok"}:
        return answer["ok"]
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        cls = _ERRORS.get(str(error.get("type")))
        message = error.get("message")
        if cls is not None and isinstance(message, str):
            raise cls(message[:4000])
    raise ReaderFailedError(f"{what}: the reader answered with something that is not an answer")


def serve_answer(argv: list[str], work: Callable[[list[str]], Any]) -> int:
    """The child's half: run ``work(args)`` (argv is ``[FD]``, args the JSON list on stdin)
    and write its value, or its importer error, to FD as JSON. Returns the exit status."""
    (fd_text,) = argv
    args = json.load(sys.stdin)
    try:
        answer: dict[str, Any] = {"ok": work(args)}
    except (ImportSourceError, MissingExtraError) as exc:
        answer = {"error": {"type": type(exc).__name__, "message": str(exc)}}
    # ASCII escapes keep a lone surrogate (a Java string may hold one) encodable; a value
    # JSON has no form for is answered as a marker the caller's checks refuse.
    data = json.dumps(answer, ensure_ascii=True, default=_unreadable).encode("ascii")
    with os.fdopen(int(fd_text), "wb") as out:
        out.write(data)
    return 0


def _unreadable(value: object) -> dict[str, str]:
    return {"unreadable": type(value).__name__}
