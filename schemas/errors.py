"""The root of memstream's own errors (the seeds' error types are kept where they name one)."""

from __future__ import annotations

__all__ = ["MemstreamError", "LocationError", "DecodeError"]


class MemstreamError(Exception):
    """Base class of errors raised by memstream itself."""


class LocationError(MemstreamError, ValueError):
    """A location string that names no log memstream can open."""


class DecodeError(MemstreamError, ValueError):
    """Bytes that are not a record memstream can read; the message says why."""
