"""Group commit: many appends from many threads share one transaction of the log.

`GroupCommitter.submit(record)` returns a future at once; a background thread takes every
record queued meanwhile (up to `max_batch`) and appends them in ONE `transact`, so they
share one fsync (embedded) or one produce/flush round trip (Kafka). Never skipped: a
future resolves only after its record is durable (invariant 14). When a batch is refused,
its records are retried one by one so each future gets its own answer.
"""

from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future

from producers.logs.base import Appended, Log
from schemas.records import Record

__all__ = ["GroupCommitter"]

log = logging.getLogger("memstream.producers.batching")

_CLOSE = object()


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
        if self._closed:
            raise RuntimeError("the group committer is closed")
        future: Future[Appended] = Future()
        self._queue.put((record, future))
        return future

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _CLOSE:
                return
            batch = [item]
            closing = False
            while len(batch) < self._max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _CLOSE:
                    closing = True
                    break
                batch.append(more)
            self._commit(batch)  # type: ignore[arg-type]
            if closing:
                return

    def _commit(self, batch: list[tuple[Record, Future[Appended]]]) -> None:
        records = [r for r, _ in batch]
        try:
            appended = self._log.append(records)
        except Exception as exc:
            if len(batch) == 1:
                batch[0][1].set_exception(exc)
                return
            log.debug("a batch of %d was refused; appending one by one", len(batch))
            for record, future in batch:
                try:
                    one = self._log.append([record])
                    future.set_result(one[0])
                except Exception as exc:
                    future.set_exception(exc)
            return
        for (_, future), done in zip(batch, appended, strict=True):
            future.set_result(done)

    def close(self) -> None:
        """Commit what is queued, then stop."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(_CLOSE)
        self._thread.join()
