"""The report an import hands back: what was read, appended, found already there, skipped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from producers.logs.location import redact

__all__ = ["ImportReport", "Skip", "Progress"]

# (done, total): called as records are appended; the CLI draws a bar from it.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Skip:
    """A source record left out, where it was (``seq 12``, ``line 4``, ``items[3]``) and why."""

    where: str
    reason: str


@dataclass
class ImportReport:
    """The outcome of one import run.

    `read` source records were read; `appended` were appended by this run; `already` were
    found in the log from an earlier run of the same import (resumed, not appended twice);
    `skipped` were left out, each with its reason. `verified` says what the check after the
    import compared (None: not verified).
    """

    source: str
    location: str
    kind: str
    read: int = 0
    appended: int = 0
    already: int = 0
    skipped: list[Skip] = field(default_factory=list)
    verified: str | None = None
    first_seq: int | None = None
    last_seq: int | None = None
    # Seconds spent in each phase: read, check, append, verify.
    timings: dict[str, float] = field(default_factory=dict)

    def lines(self, max_skips: int = 20) -> list[str]:
        """The report as lines of text, at most `max_skips` skips listed one by one."""
        out = [
            f"import {self.kind} {self.source} -> {redact(self.location)}",
            f"  records read:     {self.read:,}",
            f"  appended:         {self.appended:,}"
            + (
                f" (seq {self.first_seq} to {self.last_seq})"
                if self.first_seq is not None and self.appended
                else ""
            ),
            f"  already in log:   {self.already:,}"
            + (" (resumed from an earlier run)" if self.already else ""),
            f"  skipped:          {len(self.skipped):,}",
        ]
        for skip in self.skipped[:max_skips]:
            out.append(f"    {skip.where}: {skip.reason}")
        if len(self.skipped) > max_skips:
            out.append(f"    ... and {len(self.skipped) - max_skips:,} more")
        out.append(f"  verified:         {self.verified or 'not verified'}")
        return out
