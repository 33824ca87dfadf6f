"""Waiting that yields the CPU: a helper thread at the lowest priority the system has.

A writer waiting for an embedded log's write lock does work while it waits (it folds what
the holder commits, `SqliteLog._begin_contended`). On a machine with few cores that work
competes with the holder's own threads: measured on two cores, the holder's fold thread,
woken during each commit's fsync, often found its core taken by the waiter, and the
appends it finished waited 1.5 ms or more for it, 15-40 times in 3,000 appends. Linux's
scheduler lets a running thread finish its slice (0.75 ms or more) before a woken one of
higher priority takes the core, so a lower nice value did not help; a thread of the
``SCHED_IDLE`` policy is preempted at once by any other that wakes.

The helper thread sets its own policy (Linux: `os.sched_setscheduler` on its native id;
elsewhere nice 19 where `os.setpriority` allows it, else the caller's priority) and ends
with the wait, because an unprivileged thread may not take its priority back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["LOWEST_NICE", "Cancelled", "lower_this_thread", "run_at_low_priority"]

LOWEST_NICE = 19


class Cancelled(Exception):
    """Raised by a wait whose caller was interrupted (the `cancelled` event was set)."""


def lower_this_thread() -> str:
    """Give the calling thread the lowest CPU priority it can have; which one it got:
    ``"idle"`` (SCHED_IDLE), ``"nice"`` (nice 19) or ``"none"``."""
    tid = threading.get_native_id()
    try:
        os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (OSError, AttributeError):  # not Linux, or refused (a sandbox)
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, LOWEST_NICE)
        return "nice"
    except (OSError, AttributeError):
        return "none"


def run_at_low_priority(wait: Callable[[threading.Event], None], name: str) -> None:
    """Run ``wait(cancelled)`` in a helper thread at the lowest CPU priority and return
    when it does, raising what it raised. If the calling thread is interrupted meanwhile
    (KeyboardInterrupt), `cancelled` is set and the helper waited for before the
    interruption goes on: `wait` must check the event between its steps (and may raise
    `Cancelled`), so that nothing it uses (a connection) is used by two threads at once."""
    cancelled, started, done = threading.Event(), threading.Event(), threading.Event()
    failure: list[BaseException] = []

    def helper() -> None:
        started.set()
        try:
            # Set before this thread began: the caller was interrupted and did not see it
            # start (see below), so it must not begin at all.
            if cancelled.is_set():
                return
            lower_this_thread()
            wait(cancelled)
        except BaseException as exc:  # handed to the caller, which raises it
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=helper, name=name, daemon=True)
    try:
        thread.start()
        done.wait()
    except BaseException:
        # The caller sets `cancelled` before it looks at `started`, the helper sets
        # `started` before it looks at `cancelled`: either the caller waits for the
        # helper, or the helper does nothing.
        cancelled.set()
        if started.is_set():
            done.wait()
        raise
    if failure:
        raise failure[0]
