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


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from queryd.daemon import DaemonSettings, LogRegistry, create_app
    from queryd.daemon.jsonlog import configure_logging
    from schemas.errors import LocationError

    level = logging.DEBUG if getattr(args, "verbose", False) else logging.INFO
    configure_logging(args.log_format, level)
    locations = args.log or [
        loc for loc in os.environ.get("MEMSTREAM_QUERYD_LOGS", "").split(",") if loc
    ]
    if not locations:
        print("memstream queryd serve: give at least one --log LOCATION", file=sys.stderr)
        return 2
    if args.min_seq_timeout <= 0:
        print("memstream queryd serve: --min-seq-timeout must be positive", file=sys.stderr)
        return 2
    settings = DaemonSettings(
        min_seq_timeout=args.min_seq_timeout,
        poll_interval=args.poll_interval,
        sse_keepalive=args.sse_keepalive,
    )
    try:
        registry = LogRegistry.from_locations(locations, poll_interval=settings.poll_interval)
    except LocationError as exc:
        print(f"memstream queryd serve: {exc}", file=sys.stderr)
        return 2
    app = create_app(registry, settings)
    log.info(
        "serving %s on http://%s:%d",
        ", ".join(f"{h.name} ({h.mode})" for h in registry.handles.values()),
        args.host,
        args.port,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_config=None,  # our handlers (text or JSON) take uvicorn's records too
        access_log=False,  # the daemon logs its own access lines (memstream.queryd.access)
        workers=1,
    )
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
        "(/logs/NAME/...): the directory name, or the Kafka topic.",
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
        "--log-format",
        choices=("text", "json"),
        default=os.environ.get("MEMSTREAM_QUERYD_LOG_FORMAT", "text"),
        help="text lines, or one JSON object a line (env MEMSTREAM_QUERYD_LOG_FORMAT)",
    )
    p.set_defaults(func=serve)
