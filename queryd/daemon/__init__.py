"""The query daemon: the imperative shell serving the pure queries of `queryd` over HTTP."""

from queryd.daemon.app import SEQ_HEADER, DaemonSettings, create_app
from queryd.daemon.handles import LogHandle, LogRegistry, log_name

__all__ = ["SEQ_HEADER", "DaemonSettings", "LogHandle", "LogRegistry", "create_app", "log_name"]
