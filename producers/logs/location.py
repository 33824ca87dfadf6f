"""Location strings: a filesystem path for the embedded log, a kafka:// URL otherwise."""

from __future__ import annotations

from os import PathLike

from producers.logs.base import AuditLog
from schemas.errors import LocationError

__all__ = ["open_log"]


def open_log(location: str | PathLike[str]) -> AuditLog:
    text = str(location)
    if text.startswith("kafka://"):
        raise LocationError(f"location {text!r}: the Kafka log is not available yet")
    if "://" in text:
        raise LocationError(
            f"location {text!r}: expected a filesystem path or kafka://HOST:PORT/LOG"
        )
    from producers.logs.sqlite import SqliteLog

    return SqliteLog(location)
