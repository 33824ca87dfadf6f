"""Several processes appending to one embedded log at once: nothing lost, seqs dense."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from memstream import Memory, Message, replay

WRITERS = 4
PER_WRITER = 150


def _write(path: str, writer: int) -> list[tuple[str, int]]:
    acknowledged = []
    with Memory(path) as memory:
        for i in range(PER_WRITER):
            stored = memory.add_message(Message(speaker=f"agent{writer}", content=f"n{i}"))
            acknowledged.append((str(stored.id), stored.seq))
            if i % 50 == 49:  # a target written by someone else is found
                memory.recall(f"n{i}")
    return acknowledged


def test_concurrent_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "memory-db")
    Memory(path).close()  # create the schema once
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(WRITERS) as pool:
        results = pool.starmap(_write, [(path, w) for w in range(WRITERS)])
    with Memory(path) as memory:
        log = memory.events()
        seqs = [e.seq for e in log]
        assert seqs == list(range(len(log)))
        by_id = {str(e.id): e.seq for e in log}
        acknowledged = [pair for result in results for pair in result]
        assert len(acknowledged) == WRITERS * PER_WRITER
        for event_id, seq in acknowledged:
            assert by_id[event_id] == seq
        messages = [e for e in log if e.kind == "message"]
        assert len(messages) == WRITERS * PER_WRITER
        # Each writer's own events keep its order.
        for w in range(WRITERS):
            mine = [e.content for e in messages if e.speaker == f"agent{w}"]
            assert mine == [f"n{i}" for i in range(PER_WRITER)]
        assert memory.replay() == replay(log)
