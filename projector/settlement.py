"""Whether the lifecycle events of a committed transaction are readable: settled.

A commit that returned is not yet proof. The broker ends a transaction's records on a
partition with a marker written after the commit is acknowledged; until the marker lands,
committed readers stop at the transaction's first record (the partition's last stable
offset). Seen in `bench cluster` (log 045): a broker fenced itself right after a commit
returned; the markers never landed, the projector's snapshot moved past the two events, and
the next owner's sweep aborted them: lost. So a snapshot cut is written only once the last
stable offset has passed the records it counts as published.

The last stable offset also stops at another producer's open transaction, which no tenure of
this log can end (the test that leaves one open on purpose). The records this producer
delivered tell the two apart: `OwnRecords` holds their offsets, and `verdict` says whose
record holds the stable offset back.
"""

from __future__ import annotations

import threading
from collections import deque
from enum import Enum

__all__ = ["OwnRecords", "Verdict"]


class Verdict(Enum):
    SETTLED = "settled"  # every record before the cut's end is readable
    OURS_OPEN = "ours open"  # one of this producer's records is still open: wait, then end
    OTHERS_OPEN = "others open"  # another producer's open record holds the offset back


class OwnRecords:
    """The offsets of the records one producer delivered to one partition, in order
    (delivery reports of one partition come in offset order), kept until the partition's
    last stable offset passes them: as runs of consecutive offsets (a transaction's records
    are one run, its commit marker ending it), so that what is kept grows with the
    transactions, not the records, while no cut is settled (Redis away)."""

    def __init__(self) -> None:
        self._runs: deque[list[int]] = deque()  # [first, last], ascending, disjoint
        # Delivery reports add (the loop's or a commit's thread); the snapshot writer asks.
        self._lock = threading.Lock()

    def add(self, offset: int) -> None:
        with self._lock:
            runs = self._runs
            if runs and runs[-1][1] == offset - 1:
                runs[-1][1] = offset
            else:
                runs.append([offset, offset])

    def __len__(self) -> int:
        with self._lock:
            return sum(last - first + 1 for first, last in self._runs)

    def verdict(self, stable: int, end: int) -> Verdict:
        """Whether the records before offset `end` are readable, the partition's last
        stable offset being `stable` (offsets below it are forgotten: they are settled)."""
        with self._lock:
            runs = self._runs
            while runs and runs[0][1] < stable:
                runs.popleft()
            if runs and runs[0][0] < stable:
                runs[0][0] = stable
            ours = bool(runs) and runs[0][0] == stable
        if stable >= end:
            return Verdict.SETTLED
        return Verdict.OURS_OPEN if ours else Verdict.OTHERS_OPEN
