"""Group commit: many appends from many threads share one transaction of the log.

`GroupCommitter.submit(record)` (or `submit_many(records)`, a unit appended all or none)
returns a future at once; a background thread takes every unit queued meanwhile (up to
about `max_batch` records) and appends them in ONE `append`, so they share one fsync
(embedded) or one produce/flush round trip (Kafka). Never skipped: a future resolves only
after its records are durable (acknowledged means durable). When a batch is refused, its units are
retried one by one so each future gets its own answer. Units are appended in the order
they were submitted.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple

from producers.logs.base import Appended, Log
from schemas.records import Record

__all__ = ["GroupCommitter"]

log = logging.getLogger("memstream.producers.batching")

_CLOSE = object()


class _Unit(NamedTuple):
    """Records appended all or none, and the future of their outcome."""

    records: list[Record]
    future: Future[Any]
    single: bool  # the future takes the one Appended, not a list

    def resolve(self, appended: list[Appended]) -> None:
        self.future.set_result(appended[0] if self.single else appended)


class GroupCommitter:
    def __init__(self, target: Log, *, max_batch: int = 2000) -> None:
        self._log = target
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._run, name="memstream-group-commit", daemon=True
        )
        self._closed = False
        self._thread.start()

    def submit(self, record: Record) -> Future[Appended]:
        future: Future[Appended] = Future()
        self._put([record], future, single=True)
        return future

    def submit_many(self, records: Sequence[Record]) -> Future[list[Appended]]:
        future: Future[list[Appended]] = Future()
        self._put(list(records), future, single=False)
        return future

    def _put(self, records: list[Record], future: Future[Any], *, single: bool) -> None:
        if self._closed:
            raise RuntimeError("the group committer is closed")
        self._queue.put(_Unit(records, future, single))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _CLOSE:
                return
            batch = [item]
            size = len(item.records)  # type: ignore[attr-defined]
            closing = False
            while size < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _CLOSE:
                    closing = True
                    break
                batch.append(more)
                size += len(more.records)  # type: ignore[attr-defined]
            self._commit(batch)  # type: ignore[arg-type]
            if closing:
                return

    def _commit(self, batch: list[_Unit]) -> None:
        records = [r for unit in batch for r in unit.records]
        try:
            appended = self._log.append(records) if records else []
        except Exception as exc:
            if len(batch) == 1:
                batch[0].future.set_exception(exc)
                return
            log.debug("a batch of %d was refused; appending unit by unit", len(batch))
            for unit in batch:
                try:
                    unit.resolve(self._log.append(unit.records))
                except Exception as exc:
                    unit.future.set_exception(exc)
            return
        start = 0
        for unit in batch:
            end = start + len(unit.records)
            unit.resolve(appended[start:end])
            start = end

    def close(self) -> None:
        """Commit what is queued, then stop."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_CLOSE)
        self._thread.join()
