"""The root of memstream's own errors (the seeds' error types are kept where they name one)."""

from __future__ import annotations

__all__ = [
    "MemstreamError",
    "LocationError",
    "DecodeError",
    "LogNotFoundError",
    "CorruptLogError",
    "RecordTooLargeError",
    "RecordTooDeepError",
    "LogUnavailableError",
    "AppendFailedError",
    "AppendOutcomeUnknownError",
    "EncryptionError",
    "UnknownSubjectError",
]


class MemstreamError(Exception):
    """Base class of errors raised by memstream itself."""


class LocationError(MemstreamError, ValueError):
    """A location string that names no log memstream can open."""


class DecodeError(MemstreamError, ValueError):
    """Bytes that are not a record memstream can read; the message says why."""


class LogNotFoundError(MemstreamError):
    """A reader asked for a log that does not exist (only writers create logs)."""


class CorruptLogError(MemstreamError):
    """A stored record that a log wrote itself no longer decodes or checks: the message
    names the log and the seq."""


class RecordTooLargeError(MemstreamError, ValueError):
    """A record whose encoded size is over the limit both logs share; nothing was
    appended. The message names the record and both sizes."""


class LogUnavailableError(MemstreamError):
    """The storage under a log failed (broker or Redis unreachable, disk full, read-only
    media): the message names the log, the operation and the cause."""


class AppendFailedError(LogUnavailableError):
    """Records the log's storage did not take. The message names the log, the cause and
    what became of each record; the ids are also attributes: `not_appended` (certainly not
    in the log: appending them again is safe), `unknown` (see `AppendOutcomeUnknownError`)
    and `appended` (ids that did land, with their seqs: a Kafka batch is not atomic once
    sent)."""

    def __init__(
        self,
        message: str,
        *,
        not_appended: tuple[str, ...] = (),
        unknown: tuple[str, ...] = (),
        appended: tuple[tuple[str, int], ...] = (),
    ) -> None:
        super().__init__(message)
        self.not_appended = not_appended
        self.unknown = unknown
        self.appended = appended


class AppendOutcomeUnknownError(AppendFailedError):
    """Some records may have reached the storage without being acknowledged: the log may
    hold them or not, and may still come to hold them. Look for the ids in `unknown` before
    appending them again."""


class RecordTooDeepError(MemstreamError, ValueError):
    """A record whose JSON nests deeper than records may (`schemas.codec.MAX_JSON_DEPTH`);
    nothing was appended. The message names the record and both depths."""


class EncryptionError(MemstreamError):
    """Encryption or erasure asked of a log that cannot give it: one written without
    encryption, or a kind of log that does not encrypt yet."""


class UnknownSubjectError(MemstreamError, ValueError):
    """An erasure of a data subject the log holds no key of (unknown, or already erased)."""
