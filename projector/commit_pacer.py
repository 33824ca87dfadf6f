"""One process's budget of lifecycle transactions: its projectors' commits spaced in time.

Each log's projector commits its lifecycle events in a transaction of its own (its
transactional id is what fences a predecessor, `projector.service`). A transaction costs
the broker far more than the records in it: on this project's 2-core machine (7 December,
Kafka 4.4), one transaction of two records took 1.8-2.6 ms of the broker's CPU, a record
produced without one 0.16-0.24 ms. A projector at a log's end commits after
`commit_linger_ms` (1 ms), so a process following many quiet logs commits about once per
record: 100 logs at 20 appends a second each ask 2,000 transactions a second, more than
two cores of broker.

A `CommitPacer` shared by a process's projectors (`projector.group` makes one per member)
gives out turns to commit at most `per_second` a second in all, in the order asked. A
projector whose transaction is due waits for its turn while its loop goes on folding and
producing into the open transaction, so that under load each transaction holds more
records, and the process's transactions stay within the budget however many logs it
follows. It changes when a transaction commits, never what it holds: the exactly-once of
lifecycle events is the projector's, unchanged. A quiet process rarely waits (a turn is
due at once when none was given for an interval).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CommitPacer"]


class CommitPacer:
    """Turns to commit, `1 / per_second` seconds apart, for every projector sharing it."""

    def __init__(self, per_second: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        if not per_second > 0:  # NaN too
            raise ValueError(f"commits per second must be above 0, got {per_second!r}")
        self.per_second = per_second
        self.interval = 1.0 / per_second
        self._clock = clock
        self._lock = threading.Lock()
        self._next = float("-inf")  # when the next turn is free
        self.turns = 0  # turns given out

    def turn(self) -> float:
        """When (on the pacer's clock) the caller may commit: now, or `interval` after the
        last turn given out, whichever is later. The turn is the caller's once asked."""
        with self._lock:
            at = max(self._clock(), self._next)
            self._next = at + self.interval
            self.turns += 1
            return at
