"""The compaction worker: one process merges every projector's snapshot chunks, for as long
as the projector process lives (a process per merge cost each merge a fresh interpreter and
memstream's imports, more CPU than the merges at 33 logs). It is a `subprocess`, never a
multiprocessing child, which would import (and run) an unguarded main module again."""

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
from projector.compaction_worker import CompactionWorker, WorkerGone
from projector.record_fold import fold_log
from projector.service import Projector
from projector.snapshot_store import SnapshotStore
from tests.projector.test_projector_kafka import read_topic

pytestmark = pytest.mark.kafka
REPO = Path(__file__).resolve().parents[2]


def _worker_pids() -> set[int]:
    pid = service._COMPACTOR.pid
    return set() if pid is None else {pid}


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


def test_a_killed_worker_is_made_again(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    pid = service._COMPACTOR.start()
    assert pid != os.getpid()
    assert service._COMPACTOR.compact(location, "no-such-epoch") == 0  # nothing to merge
    os.kill(pid, signal.SIGKILL)
    # The next merge finds the worker gone: already reaped (a new one starts at once), or
    # dying as the request is written (`WorkerGone`; the merge after it starts a new one).
    try:
        merged = service._COMPACTOR.compact(location, "no-such-epoch")
    except WorkerGone:
        merged = service._COMPACTOR.compact(location, "no-such-epoch")
    assert merged == 0
    assert _worker_pids() and pid not in _worker_pids()


def test_a_bad_request_is_answered_with_an_error_and_the_worker_goes_on() -> None:
    worker = CompactionWorker()
    try:
        with pytest.raises(RuntimeError, match="LocationError"):
            worker.compact("kafka://nowhere", "e")
        pid = worker.pid
        process = subprocess.run(  # a line that is not the protocol's, straight to a worker
            [sys.executable, "-m", "projector.compaction_worker"],
            input=b"[1, 2]\nnot json\n",
            capture_output=True,
            cwd=REPO,
            timeout=60,
        )
        assert process.returncode == 0
        assert process.stdout.count(b'"error"') == 2
        with pytest.raises(RuntimeError, match="LocationError"):
            worker.compact("kafka://nowhere", "e")
        assert worker.pid == pid  # the same process answered both
    finally:
        worker.close()


def test_the_worker_exits_when_its_projector_process_is_killed() -> None:
    code = (
        "import time\n"
        "from projector import service\n"
        "print(service._COMPACTOR.start(), flush=True)\n"
        "time.sleep(120)\n"
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


def test_an_unguarded_script_running_a_projector_runs_its_top_level_once(
    kafka_bootstrap: str, redis_url: str, unique_name: str, tmp_path: Path
) -> None:
    """A script that runs a projector at its top level, with no main guard: the worker
    process merging its chunks does not run the script again (a multiprocessing child
    would import it as its main module, and start a second projector)."""
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    marks = tmp_path / "marks"
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import os\n"
        "from projector import service\n"
        f"with open({str(marks)!r}, 'a') as f:\n"
        "    f.write(f'{os.getpid()}\\n')\n"
        f"print(service._COMPACTOR.compact({location!r}, 'no-such-epoch'), flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    assert len(marks.read_text().split()) == 1  # the top level ran in one process only
