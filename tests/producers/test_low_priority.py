"""A wait that yields the CPU (`producers.logs.low_priority`): run in a helper thread at
the lowest priority, its outcome the caller's, and stopped before an interrupted caller
goes on."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

import producers.logs.low_priority as low_priority
from producers.logs.low_priority import Cancelled, lower_this_thread, run_at_low_priority

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling")


@linux
def test_the_wait_runs_in_another_thread_at_sched_idle_and_the_caller_keeps_its_own() -> None:
    seen: list[tuple[int, int]] = []

    def wait(cancelled: threading.Event) -> None:
        seen.append((threading.get_ident(), os.sched_getscheduler(threading.get_native_id())))

    caller = os.sched_getscheduler(threading.get_native_id())
    run_at_low_priority(wait, "test-wait")
    assert len(seen) == 1
    ident, policy = seen[0]
    assert ident != threading.get_ident()
    assert policy == os.SCHED_IDLE
    assert os.sched_getscheduler(threading.get_native_id()) == caller


@linux
def test_without_sched_idle_the_thread_gets_nice_19(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: object) -> None:
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_setscheduler", refused)
    got: list[tuple[str, int]] = []

    def lower() -> None:
        got.append(
            (lower_this_thread(), os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        )

    thread = threading.Thread(target=lower)
    thread.start()
    thread.join()
    assert got == [("nice", low_priority.LOWEST_NICE)]


def test_what_the_wait_raises_the_caller_raises() -> None:
    def wait(cancelled: threading.Event) -> None:
        raise ValueError("the lock stayed held")

    with pytest.raises(ValueError, match="the lock stayed held"):
        run_at_low_priority(wait, "test-wait")


@pytest.mark.parametrize("at", ["waiting", "starting"])
def test_an_interrupted_caller_cancels_the_wait_and_waits_for_it_to_stop(
    at: str, ctrl_c_raises: None
) -> None:
    """The caller must not go on (to roll back, to restore its connection) while the
    helper may still use what they share; interrupted as soon as the helper starts, or
    while it waits."""
    order: list[str] = []

    def wait(cancelled: threading.Event) -> None:
        if at == "waiting":
            time.sleep(0.05)
        # A Ctrl-C: SIGINT to the main thread, which waits for this one.
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]
        assert cancelled.wait(10), "the caller never cancelled the wait"
        time.sleep(0.05)  # still busy for a while after the cancel
        order.append("helper stopped")
        raise Cancelled("interrupted")

    with pytest.raises(KeyboardInterrupt):
        try:
            run_at_low_priority(wait, "test-wait")
        finally:
            order.append("caller goes on")
    assert order == ["helper stopped", "caller goes on"]
