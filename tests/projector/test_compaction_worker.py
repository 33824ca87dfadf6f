"""The compaction worker: one process merges every projector's snapshot chunks, for as long
as the projector process lives (a process per merge cost each merge a fresh interpreter and
memstream's imports, more CPU than the merges at 33 logs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from memstream import Memory, Message
from producers.logs.location import parse_kafka_location
from projector import service
from projector.record_fold import fold_log
from projector.service import Projector
from projector.snapshot_store import SnapshotStore
from tests.projector.test_projector_kafka import read_topic

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]


def _worker_pids() -> set[int]:
    pool = service._COMPACTOR
    return set() if pool is None else {p.pid or 0 for p in (pool._processes or {}).values()}


def _compact_until_merged(location: str) -> None:
    """Append while the projector follows, in small batches: a chunk each (a projector
    catching up a backlog cuts it in one chunk, leaving nothing to merge)."""
    loc = parse_kafka_location(location)
    Memory(location).close()  # the log's topic: only writers create it
    projector = Projector(loc, every_records=10, every_ms=10)
    projector.compact_every_s = 0.1
    projector.compact_at_chunks = 8
    stop = threading.Event()
    runner = threading.Thread(target=projector.run, kwargs={"stop": stop})
    store = SnapshotStore.connect(loc)
    try:
        with Memory(location) as memory:
            runner.start()
            for _ in range(30):
                memory.append_many(
                    [Message(speaker="a", content=f"word{i % 5} n{i}") for i in range(10)]
                )
                time.sleep(0.05)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            position = store.read_position()
            if position is not None and position.last_seq == 299 and len(position.chunks) < 8:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"{loc.topic}: chunks were not merged: {store.read_position()}")
    finally:
        stop.set()
        runner.join(30)
    # Merged: the projector cut at least 8 chunks of one epoch, and fewer are left. (A
    # count of chunks sampled while appending missed the 8th when a merge came first.)
    cut = projector.stats.snapshots
    assert cut >= 8 and projector.stats.rebuilds == 0, (
        f"{loc.topic}: {cut} chunks cut, {projector.stats.rebuilds} rebuilds: nothing to merge"
    )
    assert store.load() == fold_log([(s, v) for s, v, _ in read_topic(loc.bootstrap, loc.topic)])


def test_two_logs_are_merged_by_one_worker_process(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    _compact_until_merged(f"kafka://{kafka_bootstrap}/{unique_name}-a?redis={redis_url}")
    first = _worker_pids()
    assert len(first) == 1 and os.getpid() not in first
    _compact_until_merged(f"kafka://{kafka_bootstrap}/{unique_name}-b?redis={redis_url}")
    assert _worker_pids() == first  # the same process, not one per merge


def test_a_killed_worker_is_made_again() -> None:
    worker = service._compaction_worker()
    assert worker.submit(os.getpid).result(60) not in (None, os.getpid())
    (pid,) = _worker_pids()
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            answer = service._compaction_worker().submit(os.getpid).result(60)
        except Exception:  # BrokenProcessPool once it is noticed: made again
            service._compaction_worker(service._COMPACTOR)
            continue
        if answer != pid:
            break
    else:
        pytest.fail("the compaction worker was not made again after it was killed")
    assert _worker_pids() and pid not in _worker_pids()


def test_the_worker_exits_when_its_projector_process_is_killed() -> None:
    code = (
        "import os, sys, time\n"
        "from projector import service\n"
        "if __name__ == '__main__':\n"
        "    print(service._compaction_worker().submit(os.getpid).result(60), flush=True)\n"
        "    time.sleep(120)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        os.kill(worker, 0)  # alive while its parent is
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
        os.kill(worker, signal.SIGKILL)
        pytest.fail(f"the compaction worker {worker} outlived its SIGKILLed parent")
    finally:
        if parent.poll() is None:
            parent.kill()
