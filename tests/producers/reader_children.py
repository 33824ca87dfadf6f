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
    elif mode == "part-then-segv":  # a batch sent, then the engine faults
        row = {"seq": 0, "id": "x", "kind": "message", "payload": "{}"}
        os.write(fd, json.dumps({"part": [row]}).encode() + b"\n")
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
    elif mode == "rows":  # a streamed part that is not rows
        os.write(fd, b'{"part": "not rows"}\n{"ok": 1}\n')
    elif mode == "miscount":  # one row sent, two said
        os.write(fd, b'{"part": [{"seq": 0}]}\n{"ok": 2}\n')
    elif mode == "after":  # a line after the answer
        os.write(fd, b'{"ok": 1}\n{"part": []}\n')
    elif mode == "text":  # parts sent as the engine's JSON text (`JsonText`)
        from producers.importers.reader_process import JsonText, _part

        for text in TEXTS:
            os.write(fd, _part(JsonText(text)))
        os.write(fd, b'{"ok": 4}\n')
    elif mode == "bad-text":  # engine text that is not JSON: the parent refuses it
        from producers.importers.reader_process import JsonText, _part

        os.write(fd, _part(JsonText('[{"seq": 0}, ')) + b'{"ok": 1}\n')


# JSON texts as an engine may write them: ASCII, UTF-8, a lone surrogate (a Java string
# may hold one), pretty-printed over several lines.
TEXTS = [
    '[{"seq": 0, "payload": "plain"}]',
    '[{"seq": 1, "payload": "caf\u00e9 \u2603"}]',
    '[{"seq": 2, "payload": "half \ud800 pair"}]',
    '[\n  {"seq": 3,\n   "payload": "line\\nbreak"}\n]',
]


if __name__ == "__main__":
    main(sys.argv[1:])
