"""Retention, continuously: a thread beside the projector that sweeps a log every N seconds.

`RetentionSweeper(location, every, clock)` opens the log as a writer (`Memory`), and every
`every` seconds erases what `clock()` says is due (`Memory.sweep_retention`: audited Erasures
with the reason "retention period elapsed"). Sweeps of several processes (several projectors,
`memstream retention run`) take the log's erasure lock, so each event is erased once; a
sweep that finds nothing due appends nothing. A failed sweep is logged and tried again at
the next period. `memstream projector run --retention-every SECONDS` runs one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from producers.memory import Memory
from schemas.audit import Erasure, utc_now

__all__ = ["RetentionSweeper"]

log = logging.getLogger("memstream.projector.retention")


class RetentionSweeper:
    """Sweep `location` every `every` seconds over `clock` (default: the wall clock)."""

    def __init__(
        self,
        location: str,
        every: float,
        clock: Callable[[], datetime] = utc_now,
        agent_key: str | None = None,
    ) -> None:
        """`agent_key`: the key file of an agent enrolled on a signed log, whose name the
        sweep's Erasures carry and sign (None: an unsigned log)."""
        if not every > 0:
            raise ValueError(f"retention every: expected a positive number of seconds, got {every}")
        self.location = location
        self.every = every
        self.clock = clock
        self.agent_key = agent_key
        self.sweeps = 0
        self.erasures: list[Erasure] = []
        self.last_error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)

    def start(self) -> RetentionSweeper:
        self._thread.start()
        return self

    def sweep_once(self, memory: Memory) -> list[Erasure]:
        done = memory.sweep_retention(self.clock())
        self.sweeps += 1
        self.erasures.extend(done)
        for erasure in done:
            log.info(
                "retention: erased %d event(s) of subject %s (seq %s)",
                len(erasure.erased),
                erasure.subject,
                erasure.seq,
            )
        return done

    def _run(self) -> None:
        memory: Memory | None = None
        try:
            while not self._stop.is_set():
                try:
                    if memory is None:
                        memory = Memory(self.location, create=False, agent_key=self.agent_key)
                    self.sweep_once(memory)
                    self.last_error = None
                except Exception as exc:  # logged and tried again: the service carries on
                    self.last_error = exc
                    log.warning("retention sweep of the log failed: %s", exc)
                self._stop.wait(self.every)
        finally:
            if memory is not None:
                memory.close()

    def stop(self, timeout: float | None = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
