"""Reader processes that misbehave, for `tests/producers/test_reader_process.py`: run as
``python -m tests.producers.reader_children FD`` with ``[MODE]`` on stdin."""

from __future__ import annotations

import json
import os
import signal
import sys


def main(argv: list[str]) -> None:
    mode, fd = json.load(sys.stdin)[0], int(argv[-1])
    if mode == "segv":  # what a faulting JVM does to its process
        print("engine output before the fault", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    elif mode == "exit":
        sys.exit(3)
    elif mode == "garbage":
        os.write(fd, b"\x80not json")
    elif mode == "big":
        os.write(fd, b"[" + b"0," * 600 + b"0]")
    elif mode == "foreign-error":  # an error type the importer does not have
        os.write(fd, b'{"error": {"type": "SystemExit", "message": "x"}}')
    elif mode == "corrupt":
        os.write(fd, b'{"error": {"type": "CorruptSourceError", "message": "seq 9: bad"}}')
    elif mode == "rows":
        os.write(fd, b'{"ok": "not rows"}')


if __name__ == "__main__":
    main(sys.argv[1:])
