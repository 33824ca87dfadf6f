"""Measure the deletion bound of an erasure on a Kafka log: how long after `erase` returns
no byte of the broker's data directory holds the destroyed key (the content never leaves
the producer unsealed). Prints one line per run.

    KAFKA_BOOTSTRAP_SERVERS=... REDIS_URL=... python -m tests.producers.measure_erasure_bound [RUNS]
"""

from __future__ import annotations

import os
import sys
import time
import uuid

from producers.memory import Memory
from schemas.audit import Message
from schemas.codec import decode_record
from schemas.crypto.envelope import parse
from tests.producers.test_kafka_erasure import _data_dirs, _found_on_disk, read_topic_values


def measure(bootstrap: str, redis_url: str) -> float:
    name = f"bound-{uuid.uuid4().hex[:8]}"
    location = f"kafka://{bootstrap}/{name}?redis={redis_url}"
    dirs = _data_dirs(bootstrap)
    with Memory(location, encrypt=True) as memory:
        card = memory.add_message(Message(speaker="u", content="card 4111", session_id="a"))
        stored = dict(read_topic_values(bootstrap, name))[card.seq or 0]
        key_id = parse(decode_record(stored).content).key_id  # type: ignore[union-attr]
        key = memory.log.keys.key(key_id)  # type: ignore[attr-defined]
        assert key is not None
        memory.erase("a", "measure")
        returned = time.monotonic()
    while True:
        # The key's only copies are in LOG.keys: its partition directory, looked at often.
        where = _found_on_disk(dirs, {"key": key}, [f"{name}.keys"])
        if not where:
            return time.monotonic() - returned
        if time.monotonic() - returned > 300:
            raise SystemExit(f"still found after 300 s: {where}")
        time.sleep(0.05)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    bootstrap, redis_url = os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["REDIS_URL"]
    for run in range(runs):
        took = measure(bootstrap, redis_url)
        print(
            f"run {run + 1}: the key left the broker's data directory {took:.2f} s "
            "after erase returned",
            flush=True,
        )


if __name__ == "__main__":
    main()
