"""A process's budget of lifecycle transactions (`projector.commit_pacer`): turns to commit
are given out `1 / per_second` apart, in the order asked, and at once after a quiet time."""

from __future__ import annotations

import math
import threading

import pytest

from projector.commit_pacer import CommitPacer
from projector.group import ProjectorGroup
from schemas.errors import LocationError

LOCATION = "kafka://127.0.0.1:9/a-log?redis=redis://127.0.0.1:6379/0"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_turns_are_an_interval_apart_in_the_order_asked() -> None:
    clock = Clock()
    pacer = CommitPacer(20, clock=clock)  # 50 ms apart
    assert [pacer.turn() for _ in range(4)] == pytest.approx([100.0, 100.05, 100.1, 100.15])
    clock.now = 100.12  # asked before the last turn given is over: after it
    assert pacer.turn() == pytest.approx(100.2)
    assert pacer.turns == 5


def test_a_turn_asked_after_a_quiet_time_is_due_at_once() -> None:
    clock = Clock()
    pacer = CommitPacer(2, clock=clock)  # 500 ms apart
    assert pacer.turn() == 100.0
    clock.now = 103.0  # quiet for longer than an interval: no waiting, and no burst saved
    assert pacer.turn() == 103.0
    assert pacer.turn() == pytest.approx(103.5)


def test_no_turn_is_later_than_the_longest_wait() -> None:
    # A member of more logs than its budget serves in a second: each still commits
    # within a second (a transaction held open nears its timeout), over the budget.
    clock = Clock()
    pacer = CommitPacer(10, max_wait_s=1.0, clock=clock)  # 100 ms apart
    turns = [pacer.turn() - clock.now for _ in range(30)]
    assert turns[:11] == pytest.approx([0.1 * i for i in range(11)])
    assert max(turns) == pytest.approx(1.0) and turns[11:] == pytest.approx([1.0] * 19)
    clock.now += 5.0  # and once the rush is over, the budget holds again at once
    assert pacer.turn() == clock.now
    assert pacer.turn() == pytest.approx(clock.now + 0.1)
    with pytest.raises(ValueError, match="the longest wait must be 0 s or more"):
        CommitPacer(10, max_wait_s=-1)


def test_turns_asked_from_many_threads_are_each_their_own() -> None:
    clock = Clock()
    pacer = CommitPacer(1000, max_wait_s=10.0, clock=clock)  # the clock stands still
    turns: list[float] = []
    lock = threading.Lock()

    def ask() -> None:
        for _ in range(200):
            at = pacer.turn()
            with lock:
                turns.append(at)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    turns.sort()
    assert len(turns) == 1600 and pacer.turns == 1600
    # No two callers were given the same turn, nor two turns closer than the interval.
    gaps = [b - a for a, b in zip(turns, turns[1:], strict=False)]
    assert min(gaps) == pytest.approx(0.001)
    assert turns[-1] - turns[0] == pytest.approx(1.599)


@pytest.mark.parametrize("rate", [0, -1, math.nan])
def test_a_budget_of_no_commits_is_refused(rate: float) -> None:
    with pytest.raises(ValueError, match="commits per second must be above 0"):
        CommitPacer(rate)
    # The group says which option it was, before it connects to anything.
    with pytest.raises(LocationError, match="commits per second"):
        ProjectorGroup([LOCATION], commits_per_s=rate)


def test_a_group_shares_one_pacer_or_none() -> None:
    group = ProjectorGroup([LOCATION], commits_per_s=40)
    assert group.pacer is not None and group.pacer.per_second == 40
    assert ProjectorGroup([LOCATION], commits_per_s=None).pacer is None
