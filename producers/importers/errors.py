"""What an import or export can fail with; every one is a `MemstreamError`."""

from __future__ import annotations

from schemas.errors import MemstreamError

__all__ = [
    "ImportSourceError",
    "SourceNotFoundError",
    "CorruptSourceError",
    "UnsupportedSourceError",
    "LogNotEmptyError",
    "ImportConflictError",
    "VerificationError",
    "MissingExtraError",
    "ImportInterruptedError",
    "ReaderFailedError",
]


class ImportSourceError(MemstreamError, ValueError):
    """A source that cannot be imported as it is; nothing was appended. The message names
    the source and the record (seq, line or position) that is wrong."""


class SourceNotFoundError(ImportSourceError, FileNotFoundError):
    """The source path does not exist (or is not what the importer reads)."""


class CorruptSourceError(ImportSourceError):
    """A source record that does not read or check: damaged bytes, a gap in the seqs, a
    field that contradicts another, a reference that dangles."""


class ReaderFailedError(ImportSourceError):
    """The process that reads the source ended without an answer (the engine it runs
    faulted, or it was killed) or answered with something that is not one; nothing was
    read and nothing appended. The message says how the reader ended."""


class UnsupportedSourceError(ImportSourceError):
    """A source of a version or shape this importer does not read."""


class LogNotEmptyError(MemstreamError):
    """The target log holds records that did not come from this source; importing after
    them needs ``append=True`` (``--append``)."""


class ImportConflictError(ImportSourceError):
    """A source record that the target log refuses (an id already there with other content,
    a command the log's state rejects)."""


class SignedLogError(MemstreamError):
    """The target log requires signatures: an import keeps each source record's author,
    and on a signed log a record's author is its signer, whose key the importer does not
    hold. Nothing was appended."""


class VerificationError(MemstreamError):
    """The log after the import does not replay to the source's state; the message says
    what differs."""


class MissingExtraError(MemstreamError, ImportError):
    """An optional dependency the importer needs is not installed."""


class ImportInterruptedError(MemstreamError):
    """The log failed in the middle of an import. The batches appended before stay (each is
    all or none); running the same import again resumes after them. `report` is the
    import's report up to the failure."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report
