"""The stack's error type."""

from __future__ import annotations

from schemas.errors import MemstreamError


class StackError(MemstreamError, RuntimeError):
    """A server could not be fetched, started, health-checked or stopped.

    The message says which server, what was expected, and ends with the last lines of its
    log where there is one.
    """
