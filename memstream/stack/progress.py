"""How long steps report progress. The library only logs; the CLI supplies a reporter that
draws a spinner on a terminal or prints plain lines otherwise."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

log = logging.getLogger(__name__)


class Reporter(Protocol):
    def step(self, description: str) -> AbstractContextManager[None]:
        """Bracket a step that may take a while (fetching jars, waiting for a server)."""
        ...

    def note(self, message: str) -> None:
        """A one-line fact worth telling the user (e.g. 'kafka already up')."""
        ...


class LogReporter:
    """The default: progress goes to the `memstream.stack` loggers only."""

    def step(self, description: str) -> AbstractContextManager[None]:
        return _logged_step(description)

    def note(self, message: str) -> None:
        log.info("%s", message)


@contextmanager
def _logged_step(description: str) -> Iterator[None]:
    log.info("%s ...", description)
    yield
    log.info("%s: done", description)
