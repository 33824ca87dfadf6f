"""`memstream acl grant NAME --log LOG`: grant a log to a user of a secured stack."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from memstream.stack.access import describe, grant
from memstream.stack.errors import StackError
from memstream.stack.paths import StackPaths, default_stack_dir
from schemas.errors import LocationError


def cmd_grant(args: argparse.Namespace) -> int:
    paths = StackPaths(Path(args.stack_dir).resolve() if args.stack_dir else default_stack_dir())
    try:
        role, acls = grant(paths, args.name, args.log)
    except (StackError, LocationError, OSError) as exc:
        print(f"memstream acl grant: {exc}", file=sys.stderr)
        return 1
    print(f"granted log {args.log} to {args.name} ({role}):")
    for binding in acls:
        print(f"  {describe(binding)}")
    keys = "read and write" if role == "projector" else "read"
    print(f"  Redis user {args.name} may {keys} keys memstream:{args.log}:*")
    return 0


def register(sub: Any) -> None:
    """Add the `acl` verb and its subverbs to the `memstream` parser."""
    acl = sub.add_parser(
        "acl",
        help="grant logs to the users of a secured stack (Kafka ACLs, Redis key patterns)",
        description="Grant logs to the users of a secured stack (`memstream stack up --secure`).",
    )
    verbs = acl.add_subparsers(dest="acl_command", metavar="SUBCOMMAND")
    acl.set_defaults(func=lambda args: (acl.print_help(), 2)[1])
    p_grant = verbs.add_parser(
        "grant",
        help="grant log LOG to user NAME as its role allows (agent: write and read; "
        "projector: read, and write the derived topics and snapshots; reader: read)",
    )
    p_grant.add_argument("name", metavar="NAME", help="a user added with `stack users add`")
    p_grant.add_argument("--log", required=True, metavar="LOG", help="the log (its topic name)")
    p_grant.add_argument(
        "--stack-dir",
        metavar="DIR",
        help="the secured stack's folder (env MEMSTREAM_STACK_DIR; default: .stack/)",
    )
    p_grant.set_defaults(func=cmd_grant)
