"""bench cluster's report: the projectors' warnings by kind, the CPU of librdkafka threads, and
the machine's CPU by whom."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from memstream.bench.cluster import (
    _client_threads_cpu_s,
    _ClientCpu,
    _cpu_shares_text,
    _CpuShares,
    _machine_cpu_s,
    _missing_report,
    _warnings,
)

# A child whose main thread calls itself `rdk:spin` (as librdkafka names its threads) and
# spins for SPIN seconds, while a thread made before the renaming (named as Python names
# it) spins as long after it; then it says so and both sleep.
_CHILD = """
import sys, threading, time
SPIN = float(sys.argv[1])
go, done = threading.Event(), threading.Event()
def other():
    go.wait()
    end = time.thread_time() + SPIN
    while time.thread_time() < end:
        pass
    done.set()
    time.sleep(60)  # alive: an ended thread's time leaves /proc with it
helper = threading.Thread(target=other, daemon=True)
helper.start()
with open("/proc/thread-self/comm", "w") as comm:
    comm.write("rdk:spin")
end = time.thread_time() + SPIN
while time.thread_time() < end:
    pass
go.set()
done.wait()
print("ready", flush=True)
time.sleep(60)
"""


def _spinning_child(spin_s: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(spin_s)], stdout=subprocess.PIPE, text=True
    )


def test_warnings_are_counted_by_kind_across_logs_and_numbers(tmp_path: Path) -> None:
    one, two = tmp_path / "1.log", tmp_path / "2.log"
    one.write_text(
        "2026-12-05 03:57:02,781 WARNING memstream.projector: bench-cluster-b72fd471-067: "
        "lease not renewed in time; publishing paused\n"
        "2026-12-05 03:57:03,000 INFO memstream.projector: bench-cluster-b72fd471-067: "
        "resumed from the snapshot at seq 12\n"
        "2026-12-05 03:57:47,098 ERROR memstream.kafka.client: TXNERR 10 message(s) timed out\n"
    )
    two.write_text(
        "2026-12-05 03:58:02,781 WARNING memstream.projector: bench-cluster-0000aaaa-001: "
        "lease not renewed in time; publishing paused\n"
        "2026-12-05 03:58:47,098 ERROR memstream.kafka.client: TXNERR 3 message(s) timed out\n"
        "a line that is not a log record\n"
    )
    assert _warnings([one, two]) == [
        (2, "WARNING LOG: lease not renewed in time; publishing paused"),
        (2, "ERROR TXNERR N message(s) timed out"),
    ]
    empty = tmp_path / "empty.log"
    empty.touch()
    assert _warnings([empty]) == []


def test_the_missing_report_names_each_log_its_seqs_and_where_the_reader_stands() -> None:
    class _Reader:
        def where(self, topic: str) -> str:
            return f"<where {topic}>"

    report = _missing_report(
        _Reader(),  # type: ignore[arg-type]
        ["log-000", "log-001", "log-002"],
        {(1, 7), (1, 3), (2, 0)},
    )
    assert report.splitlines() == [
        "  without a lifecycle event, in 2 log(s):",
        "    log-001: 2 appends, seqs 3-7; lifecycle topic: <where log-001.lifecycle>",
        "    log-002: 1 appends, seqs 0-0; lifecycle topic: <where log-002.lifecycle>",
    ]


def test_the_log_level_is_chosen_on_the_command_line() -> None:
    from memstream.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["--log-level", "INFO"]).log_level == "INFO"
    assert parser.parse_args([]).log_level is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-level", "LOUD"])


@pytest.mark.skipif(not Path("/proc/thread-self/comm").exists(), reason="Linux /proc only")
def test_the_cpu_of_librdkafka_threads_is_told_from_the_processs_other_threads() -> None:
    child = _spinning_child(0.4)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        used = _client_threads_cpu_s(child.pid)
        # The renamed thread's 0.4 s, not the other thread's 0.4 s as well.
        assert 0.3 <= used < 0.7, used
    finally:
        child.kill()
        child.wait()
    assert _client_threads_cpu_s(child.pid) == 0.0  # gone: nothing, no error


@pytest.mark.skipif(not Path("/proc/thread-self/comm").exists(), reason="Linux /proc only")
def test_the_client_cpu_sampler_adds_up_seconds_and_finds_the_busiest() -> None:
    child = _spinning_child(3.0)  # spins from its start: the sampler sees it busy
    try:
        sampler = _ClientCpu([child.pid])
        time.sleep(2.5)
        sampler.close()
        assert sampler.total >= 1.0, sampler.total
        assert 0.5 <= sampler.peak <= 1.5, sampler.peak  # one thread: about one core
    finally:
        child.kill()
        child.wait()


# Spins SPIN seconds of its own CPU, says so, then sleeps.
_SPINNER = """
import sys, time
end = time.process_time() + float(sys.argv[1])
while time.process_time() < end:
    pass
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="Linux /proc only")
def test_the_machines_cpu_is_split_between_writers_projectors_and_the_rest() -> None:
    busy0 = _machine_cpu_s()
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    spinner = subprocess.Popen(
        [sys.executable, "-c", _SPINNER, "0.6"], stdout=subprocess.PIPE, text=True
    )
    try:
        window = _CpuShares([spinner.pid], [idle.pid])
        assert spinner.stdout is not None and spinner.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        shares = window.stop()
    finally:
        for child in (idle, spinner):
            child.kill()
            child.wait()
    seconds = shares["seconds"]
    # The spinner's 0.6 s (and its start) are the writers'; the sleeper used next to none.
    assert 0.5 <= shares["writers"] * seconds <= 1.2, shares
    assert shares["projectors"] * seconds < 0.2, shares
    # The machine was busy at least with the writer's spinning, and the rest is what is
    # left of its busy time (never below none).
    assert shares["machine"] * seconds >= 0.45, shares
    assert shares["rest"] >= 0.0
    assert shares["rest"] == pytest.approx(
        max(0.0, shares["machine"] - shares["writers"] - shares["projectors"] - shares["bench"])
    )
    assert _machine_cpu_s() - busy0 >= 0.45
    text = _cpu_shares_text(shares)
    assert text.startswith(f"{shares['machine']:.2f} of {shares['cores']:.0f} cores: writers ")
    assert (
        f"writers {shares['writers']:.2f} (librdkafka {shares['writers_client']:.2f}), "
        f"projectors {shares['projectors']:.2f} (librdkafka" in text
    )
    assert shares["writers_client"] < 0.1 * shares["writers"], shares  # no rdk: thread


@pytest.mark.skipif(not Path("/proc/thread-self/comm").exists(), reason="Linux /proc only")
def test_the_share_of_librdkafka_threads_is_told_within_a_group() -> None:
    child = _spinning_child(0.4)  # 0.4 s in a thread named rdk:spin, 0.4 s in another
    try:
        window = _CpuShares([child.pid], [])
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        shares = window.stop()
    finally:
        child.kill()
        child.wait()
    seconds = shares["seconds"]
    assert 0.3 <= shares["writers_client"] * seconds <= 0.6, shares
    assert 0.7 <= shares["writers"] * seconds <= 1.4, shares
    assert shares["projectors"] == 0.0 and shares["projectors_client"] == 0.0


def test_a_process_gone_before_the_window_ends_takes_nothing_from_the_others() -> None:
    # It used more before the window than the other uses in it: counted as gone from the
    # sum, it would leave the others less than nothing.
    gone = subprocess.Popen([sys.executable, "-c", _SPINNER, "0.6"], stdout=subprocess.PIPE)
    assert gone.stdout is not None and gone.stdout.readline().strip() == b"ready"
    spinner = subprocess.Popen(
        [sys.executable, "-c", _SPINNER, "0.4"], stdout=subprocess.PIPE, text=True
    )
    try:
        window = _CpuShares([], [gone.pid, spinner.pid])
        gone.kill()
        gone.wait()
        assert spinner.stdout is not None and spinner.stdout.readline().strip() == "ready"
        shares = window.stop()  # no error for the process gone
    finally:
        spinner.kill()
        spinner.wait()
    # The spinner's time is all there: the one gone neither subtracts nor adds.
    assert 0.3 <= shares["projectors"] * shares["seconds"] <= 1.0, shares
