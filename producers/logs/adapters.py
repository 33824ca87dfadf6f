"""Which adapter opens a location: a registry of log openers keyed by the location's scheme.

Each adapter module registers its opener when it is imported (`register_opener`): the
embedded SQLite log under the empty scheme (a filesystem path has none), `KafkaLog` under
``kafka``. `open_log` looks the location's scheme up; the modules of the adapters memstream
ships are named here by their dotted names and imported on first use, so a process that only
opens embedded logs never loads the Kafka client, and this module imports no adapter (the
adapters import it, to register).
"""

from __future__ import annotations

import importlib
from os import PathLike
from typing import Protocol

from producers.logs.base import Log
from producers.logs.location import KAFKA_SCHEME, PATH_SCHEME, scheme_of
from schemas.errors import LocationError

__all__ = ["LogOpener", "register_opener", "open_log"]


class LogOpener(Protocol):
    def __call__(self, location: str | PathLike[str], *, create: bool) -> Log:
        """The log at `location`; created when absent if `create`, else `LogNotFoundError`."""
        ...


_OPENERS: dict[str, LogOpener] = {}
# The adapters memstream ships, by scheme: the module that registers each one's opener.
_ADAPTER_MODULES = {PATH_SCHEME: "producers.logs.sqlite", KAFKA_SCHEME: "producers.logs.kafka"}


def register_opener(scheme: str, opener: LogOpener) -> None:
    """Make `opener` open the locations of `scheme` (the empty scheme: filesystem paths)."""
    _OPENERS[scheme] = opener


def open_log(location: str | PathLike[str], *, create: bool = True) -> Log:
    """The log at `location`. Writers create it when absent (`create=True`); readers pass
    `create=False` and get `LogNotFoundError` for a log that does not exist. A location of
    a scheme no adapter opens raises `LocationError`."""
    scheme = scheme_of(location)
    opener = _OPENERS.get(scheme)
    if opener is None and scheme in _ADAPTER_MODULES:
        importlib.import_module(_ADAPTER_MODULES[scheme])  # registers its opener
        opener = _OPENERS.get(scheme)
    if opener is None:
        raise LocationError(
            f"location {str(location)!r}: expected a filesystem path or kafka://HOST:PORT/LOG"
        )
    return opener(location, create=create)
