"""Appending an import's records in batches: all or none per batch, progress after each."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from producers.importers.errors import ImportInterruptedError, SignedLogError
from producers.importers.report import ImportReport, Progress
from producers.logs.base import Log
from producers.logs.location import redact
from schemas.errors import MemstreamError
from schemas.gc_guard import no_cyclic_gc

__all__ = ["append_batches", "refuse_signed"]

log = logging.getLogger("memstream.import")


def refuse_signed(log: Log, location: str) -> None:
    """`SignedLogError` when the log at `location` requires signatures (see the error)."""
    if log.state().authorship is not None:
        raise SignedLogError(
            f"log {redact(location)} requires signatures: an import keeps each source "
            "record's author, and on a signed log a record's author is its signer, whose key "
            "the import does not hold; import into a log created without signatures. "
            "Nothing was appended"
        )


def append_batches(
    records: Sequence[Any],
    append: Callable[[list[Any]], list[int]],
    *,
    batch_size: int,
    progress: Progress | None,
    report: ImportReport,
) -> None:
    """Append `records` in order, `batch_size` at a time, through `append` (which returns
    the seqs it gave); counts them in `report`.

    A failure of the log raises `ImportInterruptedError` saying how many were appended:
    those batches stay in the log, and a new run of the import recognizes them.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    total = len(records)
    if progress is not None:
        progress(0, total)
    # The cycle detector off while the log folds what it appends: with the whole source
    # in memory, each of its collections would walk all of it, and they cost more than
    # the appends (measured: 12.7 s against 6.0 s for 100k events).
    with no_cyclic_gc():
        _append_all(records, append, batch_size, progress, report)


def _append_all(
    records: Sequence[Any],
    append: Callable[[list[Any]], list[int]],
    batch_size: int,
    progress: Progress | None,
    report: ImportReport,
) -> None:
    total = len(records)
    for start in range(0, total, batch_size):
        batch = list(records[start : start + batch_size])
        try:
            seqs = append(batch)
        except (MemstreamError, ValueError) as exc:
            raise ImportInterruptedError(
                f"the import stopped after appending {report.appended:,} of {total:,} "
                f"records: {exc}. The records appended stay in the log; run the same "
                "import again to resume after them",
                report,
            ) from exc
        if seqs:
            if report.first_seq is None:
                report.first_seq = seqs[0]
            report.last_seq = seqs[-1]
        report.appended += len(batch)
        log.debug("appended %d of %d", report.appended, total)
        if progress is not None:
            progress(report.appended, total)
