"""How the daemon waits, probes and bounds what it serves."""

from __future__ import annotations

from dataclasses import dataclass, field

from queryd.daemon.guards import LOCAL_HOSTS
from queryd.daemon.streams import HubSettings

__all__ = ["DaemonSettings", "MAX_PAGE", "STATE_PAGE"]

MAX_PAGE = 10_000  # the largest `limit` a paged route takes
STATE_PAGE = 1_000  # content events in a /state page unless `limit` says otherwise


@dataclass(frozen=True)
class DaemonSettings:
    """How the daemon waits, probes and bounds what it serves.

    `min_seq_timeout`: how long a read with `min_seq` waits; `poll_interval`: how often
    each log is checked for new records; `probe_interval` / `probe_timeout`: how often the
    log's storage is asked for its head, and how long an unanswered probe takes to make
    the log unavailable; `reopen_interval`: at most this long between attempts to open a
    log that cannot be opened (one that does not exist yet included); `max_streams`:
    lifecycle streams open at once, all logs together (503 beyond); `allowed_hosts`: the
    Host names served (None or "*": any); `max_body_bytes`: the largest request body;
    `heavy_workers`: threads that build large answers; `idle_seconds`: a log no request
    named for that long is dropped from memory, and hydrated again when named (None: never);
    `tokens`: the token store's path, which turns access control on
    (`queryd.daemon.access`; None: off), re-read when it changed every `tokens_refresh`
    seconds; `agent_keys`: a directory of agents' key files (``NAME.key``), with which an
    HTTP recall on a signed log is signed as the token's agent (None: such a recall is
    refused).
    """

    min_seq_timeout: float = 5.0
    poll_interval: float = 0.02
    sse_keepalive: float = 15.0
    probe_interval: float = 1.0
    probe_timeout: float = 2.0
    reopen_interval: float = 10.0
    max_streams: int = 100
    allowed_hosts: tuple[str, ...] | None = LOCAL_HOSTS
    max_body_bytes: int = 1024 * 1024
    heavy_workers: int = 2
    idle_seconds: float | None = None
    hub: HubSettings = field(default_factory=HubSettings)
    tokens: str | None = None
    tokens_refresh: float = 1.0
    agent_keys: str | None = None
