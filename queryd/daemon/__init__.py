"""The query daemon: the imperative shell serving the pure queries of `queryd` over HTTP.

This package's names are the daemon's surface for the command line and tests; no module
of the package imports from it (each imports the module that defines a name)."""

from queryd.daemon.app import create_app
from queryd.daemon.handles import LogHandle, LogRegistry, log_name
from queryd.daemon.seq import SEQ_HEADER
from queryd.daemon.settings import DaemonSettings

__all__ = ["SEQ_HEADER", "DaemonSettings", "LogHandle", "LogRegistry", "create_app", "log_name"]
