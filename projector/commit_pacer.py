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
due at once when none was given for an interval). No turn is later than `max_wait_s`
(1 s) after it was asked: a member of more logs than `per_second * max_wait_s` all due
at once commits more than its budget rather than hold a transaction open towards its
timeout (10 s or more) or add more than a second to its events' latency.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["CommitPacer"]


class CommitPacer:
    """Turns to commit, `1 / per_second` seconds apart, for every projector sharing it."""

    def __init__(
        self,
        per_second: float,
        *,
        max_wait_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not per_second > 0:  # NaN too
            raise ValueError(f"commits per second must be above 0, got {per_second!r}")
        if not max_wait_s >= 0:
            raise ValueError(f"the longest wait must be 0 s or more, got {max_wait_s!r}")
        self.per_second = per_second
        self.interval = 1.0 / per_second
        self.max_wait_s = max_wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next = float("-inf")  # when the next turn is free
        self.turns = 0  # turns given out

    def turn(self) -> float:
        """When (on the pacer's clock) the caller may commit: now, or `interval` after the
        last turn given out, whichever is later, but never more than `max_wait_s` from now.
        The turn is the caller's once asked."""
        with self._lock:
            now = self._clock()
            at = min(max(now, self._next), now + self.max_wait_s)
            self._next = at + self.interval
            self.turns += 1
            return at
