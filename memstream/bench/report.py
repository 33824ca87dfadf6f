"""The one table every benchmark suite prints: measured, seed system, memstream, ratio."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rich.console import Console
from rich.table import Table

__all__ = ["Row", "append_all", "print_table", "best_of", "once", "per_call", "per_second", "ms"]

T = TypeVar("T")


@dataclass(frozen=True)
class Row:
    what: str
    seed: float | None  # the seed system's figure, None where it has none
    ours: float | None  # None on a row that only shows the seed system at another size
    unit: str
    higher_is_better: bool = False
    goal: str = ""

    @property
    def ratio(self) -> str:
        if not self.seed or not self.ours:
            return "-"
        ratio = self.ours / self.seed if self.higher_is_better else self.seed / self.ours
        return f"{ratio:,.1f}x"


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 1:
        return f"{value:,.2f} {unit}"
    return f"{value:.4f} {unit}"


def print_table(
    title: str, seed_name: str, rows: list[Row], console: Console | None = None
) -> None:
    table = Table(title=title)
    table.add_column("measured")
    table.add_column(seed_name, justify="right")
    table.add_column("memstream", justify="right")
    table.add_column("memstream vs seed", justify="right")
    table.add_column("goal")
    for row in rows:
        table.add_row(
            row.what, _fmt(row.seed, row.unit), _fmt(row.ours, row.unit), row.ratio, row.goal
        )
    (console or Console(width=160)).print(table)


def once(fn: Callable[[], T]) -> tuple[float, T]:
    """One run of `fn`: (seconds, its result).

    Garbage is collected first, so that no system pays for another's; the result is
    returned (freed after the timing), so no figure includes tearing down what it built.
    """
    gc.collect()
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    """The fastest of `repeat` runs, in seconds (the least disturbed by the machine), each
    timed as `once`."""
    return min(once(fn)[0] for _ in range(repeat))


def per_call(fn: Callable[[], object], calls: int, repeat: int = 3) -> float:
    """Seconds per call of `fn`: the fastest of `repeat` runs of `calls` calls each.

    For calls of a millisecond or less: one call timed alone after a collection measures
    cold caches and the timer more than the call.
    """

    def run() -> None:
        for _ in range(calls):
            fn()

    return best_of(run, repeat) / calls


def per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def ms(seconds: float) -> float:
    return seconds * 1000.0


R = TypeVar("R")


def append_all(records: list[R], state: object) -> tuple[list[R], None]:
    """A transaction (with `functools.partial`) that appends `records` whatever the state."""
    return records, None


def appends_one_by_one(location: str, count: int, *, encrypt: bool, sessions: bool) -> float:
    """Messages appended one by one per second on a new log at `location` (`encrypt`: an
    encrypted log; `sessions`: of 8 sessions, else none, so each event is its own subject
    with a key of its own when encrypted)."""
    from memstream import Memory, Message

    with Memory(location, encrypt=encrypt) as memory:
        messages = [
            Message(
                speaker="agent",
                content=f"append number {i}",
                session_id=f"session{i % 8}" if sessions else None,
            )
            for i in range(count)
        ]
        start = time.perf_counter()
        for message in messages:
            memory.add_message(message)
        return per_second(count, time.perf_counter() - start)
