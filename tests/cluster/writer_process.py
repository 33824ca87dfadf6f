"""One writer process of the failover tests: appends to a log until a stop file appears
(or a hard cap), synchronously or pipelined, and writes what became of every append as
JSON: acknowledged (id, seq, sent, answered) and failed (id, error type, message, sent,
answered, ids the error says have an unknown outcome).

Run as ``python writer_process.py LOCATION MODE STOP_FILE OUT_FILE NAME``.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from producers.logs.base import Appended
from producers.logs.kafka import KafkaLog
from producers.logs.location import parse_kafka_location
from schemas.audit import Message
from schemas.errors import AppendFailedError

APPEND_TIMEOUT = 20.0
HARD_CAP_S = 240.0
PIPELINE = 16  # pipelined appends in flight at once
# A pause between appends: 8 writers beside 3 brokers share a small machine; the test is
# of what happens to appends in flight, not of throughput.
PACE_S = 0.01


def main(argv: list[str]) -> int:
    location, mode, stop_file, out_file, name = argv
    log = KafkaLog(
        parse_kafka_location(location),
        hydrate=False,
        append_timeout=APPEND_TIMEOUT,
        read_timeout=APPEND_TIMEOUT,
    )
    Path(out_file + ".ready").touch()  # the log is open
    acked: list[list[Any]] = []
    failed: list[list[Any]] = []
    stop = Path(stop_file)
    started = time.monotonic()
    n = 0

    def failure(id_: str, exc: BaseException, sent: float) -> None:
        unknown = id_ in getattr(exc, "unknown", ())
        failed.append([id_, type(exc).__name__, str(exc), sent, time.time(), unknown])

    def one() -> Message:
        nonlocal n
        n += 1
        return Message(speaker=name, content=f"{name}-{n}", session_id=name)

    inflight: list[tuple[str, float, Future[Appended]]] = []

    def settle(item: tuple[str, float, Future[Appended]]) -> None:
        id_, sent, future = item
        try:
            appended = future.result(timeout=APPEND_TIMEOUT + 10)
        except Exception as exc:  # noqa: BLE001 - every error is recorded and judged
            failure(id_, exc, sent)
        else:
            acked.append([id_, appended.seq, sent, time.time()])

    while not stop.exists() and time.monotonic() - started < HARD_CAP_S:
        message = one()
        sent = time.time()
        if mode == "sync":
            try:
                appended = log.append([message])[0]
            except Exception as exc:  # noqa: BLE001
                failure(str(message.id), exc, sent)
                if not isinstance(exc, AppendFailedError):
                    time.sleep(0.2)
            else:
                acked.append([str(message.id), appended.seq, sent, time.time()])
        else:
            try:
                future = log.submit([message], lambda a: a[0])
            except Exception as exc:  # noqa: BLE001
                failure(str(message.id), exc, sent)
                time.sleep(0.2)
                continue
            inflight.append((str(message.id), sent, future))
            while len(inflight) >= PIPELINE:
                settle(inflight.pop(0))
        time.sleep(PACE_S)
    for item in inflight:
        settle(item)
    log.close()
    Path(out_file).write_text(json.dumps({"name": name, "acked": acked, "failed": failed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
