"""`memstream queryd serve`: the query daemon over one or several logs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

log = logging.getLogger("memstream.queryd")

__all__ = ["register", "serve"]


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


def _env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else default


def _allowed_hosts(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The Host names served: the localhost names, the bind address, and those given with
    --allowed-host (or MEMSTREAM_QUERYD_ALLOWED_HOSTS); None when one of them is '*'."""
    from queryd.daemon.guards import default_allowed_hosts

    given = args.allowed_host or [
        h for h in os.environ.get("MEMSTREAM_QUERYD_ALLOWED_HOSTS", "").split(",") if h.strip()
    ]
    names = [*default_allowed_hosts(args.host), *(h.strip() for h in given)]
    return None if "*" in names else tuple(dict.fromkeys(names))


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from queryd.daemon import DaemonSettings, LogRegistry, create_app
    from queryd.daemon.connections import (
        BACKLOG,
        ConnectionGuard,
        default_max_connections,
        guarded_protocol,
    )
    from queryd.daemon.jsonlog import configure_logging
    from schemas.errors import LocationError

    level = logging.DEBUG if getattr(args, "verbose", False) else logging.INFO
    configure_logging(args.log_format, level)
    locations = args.log or [
        location for location in os.environ.get("MEMSTREAM_QUERYD_LOGS", "").split(",") if location
    ]
    if not locations:
        print("memstream queryd serve: give at least one --log LOCATION", file=sys.stderr)
        return 2
    for flag, value in (
        ("--min-seq-timeout", args.min_seq_timeout),
        ("--read-timeout", args.read_timeout),
        ("--keep-alive-timeout", args.keep_alive_timeout),
        ("--max-streams", args.max_streams),
        ("--max-body-bytes", args.max_body_bytes),
        ("--idle-seconds", 1 if args.idle_seconds is None else args.idle_seconds),
    ):
        if value <= 0:
            print(f"memstream queryd serve: {flag} must be positive", file=sys.stderr)
            return 2
    max_connections = (
        default_max_connections() if args.max_connections is None else args.max_connections
    )
    if max_connections <= 0:
        print("memstream queryd serve: --max-connections must be positive", file=sys.stderr)
        return 2
    # --- access control and TLS (issue 15) ---
    tokens = args.tokens or os.environ.get("MEMSTREAM_TOKENS") or None
    if (args.tls_cert is None) != (args.tls_key is None):
        print("memstream queryd serve: give both --tls-cert and --tls-key", file=sys.stderr)
        return 2
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path is not None and not os.path.isfile(path):
            print(f"memstream queryd serve: {flag}: no such file: {path}", file=sys.stderr)
            return 2
    agent_keys = args.agent_keys or os.environ.get("MEMSTREAM_AGENT_KEYS") or None
    if agent_keys is not None and not os.path.isdir(agent_keys):
        print(
            f"memstream queryd serve: --agent-keys: no such directory: {agent_keys}",
            file=sys.stderr,
        )
        return 2
    if agent_keys is not None and tokens is None:
        print(
            "memstream queryd serve: --agent-keys needs --tokens: queryd signs a Recall as "
            "the agent of a bearer token, never as an actor a caller names",
            file=sys.stderr,
        )
        return 2
    # --- end access control and TLS ---
    settings = DaemonSettings(
        min_seq_timeout=args.min_seq_timeout,
        poll_interval=args.poll_interval,
        sse_keepalive=args.sse_keepalive,
        max_streams=args.max_streams,
        allowed_hosts=_allowed_hosts(args),
        max_body_bytes=args.max_body_bytes,
        idle_seconds=args.idle_seconds,
        tokens=tokens,
        agent_keys=agent_keys,
    )
    try:
        registry = LogRegistry.from_locations(
            locations,
            poll_interval=settings.poll_interval,
            probe_interval=settings.probe_interval,
            probe_timeout=settings.probe_timeout,
            reopen_interval=settings.reopen_interval,
            idle_seconds=settings.idle_seconds,
        )
    except LocationError as exc:
        print(f"memstream queryd serve: {exc}", file=sys.stderr)
        return 2
    from producers.keys.token_store import TokenStoreError

    try:
        app = create_app(registry, settings)
    except TokenStoreError as exc:
        print(f"memstream queryd serve: --tokens: {exc}", file=sys.stderr)
        return 2
    if tokens is None:
        log.warning(
            "serving without access control: anyone who can reach this daemon reads every "
            "log and recalls as any actor (turn it on with --tokens PATH)"
        )
    elif args.tls_cert is None and args.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "access control is on but TLS is off on %s: bearer tokens cross the network in "
            "clear text (give --tls-cert and --tls-key)",
            args.host,
        )
    guard = ConnectionGuard(max_connections, args.read_timeout)
    if settings.max_streams >= max_connections:
        log.warning(
            "--max-streams %d is not below --max-connections %d: open lifecycle streams can "
            "take every connection (raise the open-file limit, or lower --max-streams)",
            settings.max_streams,
            max_connections,
        )
    app.state.daemon.metrics.logs.connections = lambda: guard
    log.info(
        "serving %s on %s://%s:%d (at most %d connections, %d lifecycle streams; Host: %s)",
        ", ".join(f"{h.name} ({h.mode})" for h in registry.handles.values()),
        "http" if args.tls_cert is None else "https",
        args.host,
        args.port,
        max_connections,
        settings.max_streams,
        ", ".join(settings.allowed_hosts or ["any"]),
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        http=guarded_protocol(guard),
        ws="none",  # no websockets: an Upgrade is served as plain HTTP
        timeout_keep_alive=args.keep_alive_timeout,
        backlog=BACKLOG,  # small: see queryd.daemon.connections
        h11_max_incomplete_event_size=16 * 1024,  # a request head of at most 16 KiB
        log_config=None,  # our handlers (text or JSON) take uvicorn's records too
        access_log=False,  # the daemon logs its own access lines (memstream.queryd.access)
        workers=1,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    uvicorn.Server(config).run()
    return 0


def register(sub: Any) -> None:
    """Add the `queryd` verb and `queryd serve` to the `memstream` parser."""
    queryd = sub.add_parser(
        "queryd",
        help="the query daemon: serve memstream logs over HTTP",
        description="The query daemon: serve memstream logs over HTTP.",
    )
    verbs = queryd.add_subparsers(dest="queryd_command", metavar="SUBCOMMAND")
    queryd.set_defaults(func=lambda args: (queryd.print_help(), 2)[1])
    p = verbs.add_parser(
        "serve",
        help="serve reads of one or several logs over HTTP (OpenAPI at /openapi.json)",
        description="Serve reads of one or several logs over HTTP; each log under its name "
        "(/logs/NAME/...): the directory name, or the Kafka topic. A web view of them is "
        "under /ui/.",
    )
    p.add_argument(
        "--log",
        action="append",
        metavar="LOCATION",
        help="a log to serve: a directory (embedded) or kafka://HOST:PORT/LOG?redis=... "
        "(repeat for several; env MEMSTREAM_QUERYD_LOGS, comma-separated)",
    )
    p.add_argument(
        "--host",
        default=os.environ.get("MEMSTREAM_QUERYD_HOST", "127.0.0.1"),
        help="address to listen on (env MEMSTREAM_QUERYD_HOST; default 127.0.0.1)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("MEMSTREAM_QUERYD_PORT", "8000")),
        help="port to listen on (env MEMSTREAM_QUERYD_PORT; default 8000)",
    )
    p.add_argument(
        "--min-seq-timeout",
        type=float,
        metavar="SECONDS",
        default=_env_float("MEMSTREAM_QUERYD_MIN_SEQ_TIMEOUT", 5.0),
        help="how long a read with min_seq waits for the state to get there before a 504 "
        "(env MEMSTREAM_QUERYD_MIN_SEQ_TIMEOUT; default 5)",
    )
    p.add_argument(
        "--idle-seconds",
        type=float,
        metavar="SECONDS",
        default=None,
        help="drop a log no request named for this long from memory; the next request "
        "hydrates it again from its snapshot (default: never)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        metavar="SECONDS",
        default=0.02,
        help="how often each log is checked for new records (default 0.02)",
    )
    p.add_argument(
        "--sse-keepalive",
        type=float,
        metavar="SECONDS",
        default=15.0,
        help="a comment line on idle lifecycle streams this often (default 15)",
    )
    p.add_argument(
        "--max-streams",
        type=int,
        metavar="N",
        default=_env_int("MEMSTREAM_QUERYD_MAX_STREAMS", 100),
        help="lifecycle streams open at once, all logs together; more get a 503 "
        "(env MEMSTREAM_QUERYD_MAX_STREAMS; default 100)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        metavar="N",
        default=_env_int("MEMSTREAM_QUERYD_MAX_CONNECTIONS", None),
        help="HTTP connections open at once; at the cap a new one closes the oldest idle one "
        "(env MEMSTREAM_QUERYD_MAX_CONNECTIONS; default: the open-file limit less a reserve)",
    )
    p.add_argument(
        "--read-timeout",
        type=float,
        metavar="SECONDS",
        default=_env_float("MEMSTREAM_QUERYD_READ_TIMEOUT", 10.0),
        help="a request (head and body) must arrive whole this soon after its first byte, "
        "or the connection is closed (env MEMSTREAM_QUERYD_READ_TIMEOUT; default 10)",
    )
    p.add_argument(
        "--keep-alive-timeout",
        type=int,
        metavar="SECONDS",
        default=_env_int("MEMSTREAM_QUERYD_KEEP_ALIVE_TIMEOUT", 5),
        help="close a connection idle this long between requests (env "
        "MEMSTREAM_QUERYD_KEEP_ALIVE_TIMEOUT; default 5)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        metavar="N",
        default=_env_int("MEMSTREAM_QUERYD_MAX_BODY_BYTES", 1024 * 1024),
        help="the largest request body; larger is a 413 (env MEMSTREAM_QUERYD_MAX_BODY_BYTES; "
        "default 1 MiB)",
    )
    p.add_argument(
        "--allowed-host",
        action="append",
        metavar="HOST",
        help="a Host name this daemon is served under, besides the localhost names and "
        "--host (repeat; '*.example.com' for a domain, '*' for any; env "
        "MEMSTREAM_QUERYD_ALLOWED_HOSTS, comma-separated); other Hosts get a 400",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("MEMSTREAM_QUERYD_LOG_FORMAT", "text"),
        help="text lines, or one JSON object a line (env MEMSTREAM_QUERYD_LOG_FORMAT)",
    )
    p.add_argument(
        "--tokens",
        metavar="PATH",
        help="turn access control on: every route but /healthz, /readyz and /metrics needs "
        "a bearer token of this token store (`memstream tokens create`; env MEMSTREAM_TOKENS)",
    )
    p.add_argument(
        "--agent-keys",
        metavar="DIR",
        help="sign an HTTP recall on a signed log as the token's agent, with that agent's key "
        "file AGENT.key in DIR (as `memstream agents create` writes them); needs --tokens "
        "(env MEMSTREAM_AGENT_KEYS)",
    )
    p.add_argument("--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
    p.set_defaults(func=serve)
