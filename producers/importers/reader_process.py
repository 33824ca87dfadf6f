"""A source read in a process of its own: the parent runs ``python -m MODULE FD`` with
its arguments as a JSON list on the child's stdin (an argument may be longer than a
command line takes), the child does the reading and writes JSON lines to the pipe FD: the
parts of what it reads as it reads them (``{"part": ...}``, `serve_stream`), then its
answer (``{"ok": ...}``) or its error; the parent gets the parts as they come
(`stream_reader`, so it can check one while the child reads the next), the answer
(`run_reader`: the answer alone), or the child's error as the same `ImportSourceError`.

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
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

from producers.importers.errors import (
    CorruptSourceError,
    ImportSourceError,
    MissingExtraError,
    ReaderFailedError,
    SourceNotFoundError,
    UnsupportedSourceError,
)

__all__ = [
    "run_reader",
    "stream_reader",
    "serve_answer",
    "serve_stream",
    "answer_limit",
    "JsonText",
]

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
    on FD (`serve_answer`).

    Raises the child's own error (one of the importer's error types, with its message), or
    `ReaderFailedError` when the child ended without an answer (a crash, a kill) or answered
    with more than `limit` bytes or with something that is not an answer. `what` names the
    source in those messages.
    """
    parts = stream_reader(module, args, limit=limit, what=what)
    try:
        next(parts)
    except StopIteration as end:
        return end.value
    finally:
        parts.close()
    # a part: this child streams, it does not answer
    raise ReaderFailedError(f"{what}: the reader answered with something that is not an answer")


def stream_reader(
    module: str, args: list[str], *, limit: int, what: str
) -> Generator[Any, None, Any]:
    """Run ``python -m module FD`` as `run_reader` does, yielding each part the child
    sends (`serve_stream`) as it arrives, so the caller works on one while the child reads
    the next; the generator's return value is the child's final answer.

    The whole stream is bounded by `limit` bytes and parsed as JSON only, line by line;
    errors as `run_reader`'s, raised where the stream fails (parts yielded before stay
    yielded: a caller appends nothing until the stream has ended). Closing the generator
    early stops the child.
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
            lines = _Lines(read_end, limit)
            for line in lines:
                kind, value = _message(line, output, what)
                if kind == "part":
                    yield value
                    continue
                # The answer (or an error) ends the stream: nothing may follow it.
                if next(iter(lines), None) is not None:
                    _failed(output, what, "sent more after its answer")
                code = child.wait()
                if kind == "error":
                    raise value
                if code != 0:
                    _failed(output, what, f"answered, then ended with exit status {code}")
                return value
            if lines.over:
                child.kill()
                child.wait()
                raise ReaderFailedError(
                    f"{what}: the reader's answer is over {limit:,} bytes, more than the "
                    "source holds; nothing was read"
                )
            code = child.wait()
            _ended_without_answer(code, _tail(output), what)
        finally:
            os.close(read_end)
            if child.poll() is None:  # an interrupt (Ctrl-C), or a caller that stopped
                child.kill()
                child.wait()


class _Lines:
    """The lines of what the child writes on `fd`, at most `limit` bytes in all (`over`
    then, and no more lines); a last line without its newline counts."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd, self.left, self.over = fd, limit, False
        self._buffer = b""
        self._eof = False

    def __iter__(self) -> Iterator[bytes]:
        while True:
            cut = self._buffer.find(b"\n")
            if cut >= 0:
                line, self._buffer = self._buffer[:cut], self._buffer[cut + 1 :]
                if line:
                    yield line
                continue
            if self._eof:
                if self._buffer:
                    line, self._buffer = self._buffer, b""
                    yield line
                return
            chunk = os.read(self.fd, _CHUNK)
            if not chunk:
                self._eof = True
                continue
            self.left -= len(chunk)
            if self.left < 0:
                self.over, self._eof, self._buffer = True, True, b""
                return
            self._buffer += chunk


def _tail(output: IO[bytes]) -> str:
    output.seek(0, os.SEEK_END)
    output.seek(max(0, output.tell() - _STDERR_TAIL))
    return output.read().decode("utf-8", "replace").strip()


def _failed(output: IO[bytes], what: str, how: str) -> NoReturn:
    tail = _tail(output)
    said = f"; its last output: {tail}" if tail else ""
    raise ReaderFailedError(f"{what}: the reader {how}{said}")


def _ended_without_answer(code: int, tail: str, what: str) -> NoReturn:
    said = f"; its last output: {tail}" if tail else ""
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


def _message(line: bytes, output: IO[bytes], what: str) -> tuple[str, Any]:
    """("part", value), ("ok", value) or ("error", the exception to raise) of one line."""
    try:
        message = json.loads(line)
    except ValueError as exc:
        _failed(output, what, f"answer is not JSON ({exc})")
    if isinstance(message, dict) and len(message) == 1:
        ((kind, value),) = message.items()
        if kind in ("part", "ok"):
            return kind, value
        if kind == "error" and isinstance(value, dict):
            cls = _ERRORS.get(str(value.get("type")))
            text = value.get("message")
            if cls is not None and isinstance(text, str):
                return "error", cls(text[:4000])
    raise ReaderFailedError(f"{what}: the reader answered with something that is not an answer")


class JsonText(str):
    """A part that is JSON text already (an engine serialized it): `serve_stream` sends it
    as it is, rather than parse it only to write it again. The parent parses every line
    whatever the child sends, so the text is checked there as any part is."""


def serve_answer(argv: list[str], work: Callable[[list[str]], Any]) -> int:
    """The child's half of `run_reader`: run ``work(args)`` (argv is ``[FD]``, args the
    JSON list on stdin) and write its value, or its importer error, to FD as JSON. Returns
    the exit status."""
    return serve_stream(argv, lambda args: _no_parts(work(args)))


def _no_parts(value: Any) -> Generator[Any, None, Any]:
    return value
    yield  # a generator that yields nothing and returns `value`


def serve_stream(argv: list[str], work: Callable[[list[str]], Generator[Any, None, Any]]) -> int:
    """The child's half of `stream_reader`: each part `work(args)` yields is written to FD
    as one JSON line as soon as it is made, then its return value (or its importer error)
    as the last line. Returns the exit status."""
    (fd_text,) = argv
    args = json.load(sys.stdin)
    with os.fdopen(int(fd_text), "wb") as out:
        parts = work(args)
        try:
            while True:
                out.write(_part(next(parts)))
                out.flush()
        except StopIteration as end:
            answer: dict[str, Any] = {"ok": end.value}
        except (ImportSourceError, MissingExtraError) as exc:
            answer = {"error": {"type": type(exc).__name__, "message": str(exc)}}
        out.write(_line(answer))
    return 0


def _line(message: dict[str, Any]) -> bytes:
    # ASCII escapes keep a lone surrogate (a Java string may hold one) encodable, and no
    # newline inside a line; a value JSON has no form for is written as a marker the
    # caller's checks refuse.
    return json.dumps(message, ensure_ascii=True, default=_unreadable).encode("ascii") + b"\n"


def _part(value: Any) -> bytes:
    if isinstance(value, JsonText):
        if "\n" not in value:  # a line is one message
            try:
                return b'{"part":' + value.encode("utf-8") + b"}\n"
            except UnicodeEncodeError:  # a lone surrogate: only JSON's escapes carry it
                pass
        value = json.loads(value)  # written again, on one line, in ASCII
    return _line({"part": value})


def _unreadable(value: object) -> dict[str, str]:
    return {"unreadable": type(value).__name__}
