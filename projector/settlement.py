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
    last stable offset passes them."""

    def __init__(self) -> None:
        self._offsets: deque[int] = deque()

    def add(self, offset: int) -> None:
        self._offsets.append(offset)

    def __len__(self) -> int:
        return len(self._offsets)

    def verdict(self, stable: int, end: int) -> Verdict:
        """Whether the records before offset `end` are readable, the partition's last
        stable offset being `stable` (offsets below it are forgotten: they are settled)."""
        offsets = self._offsets
        while offsets and offsets[0] < stable:
            offsets.popleft()
        if stable >= end:
            return Verdict.SETTLED
        if offsets and offsets[0] == stable:
            return Verdict.OURS_OPEN
        return Verdict.OTHERS_OPEN
