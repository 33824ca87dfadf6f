"""`memstream tokens create|list|revoke`: queryd's bearer tokens, in a token store file.

The store is named by ``--tokens PATH`` or ``MEMSTREAM_TOKENS`` (the same file the daemons
are given with ``queryd serve --tokens``). `create` prints the new token once, on standard
output, and nothing else there (so ``TOKEN=$(memstream tokens create ...)`` works); the
store keeps only its SHA-256.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["register"]

ENV = "MEMSTREAM_TOKENS"


def _path(args: argparse.Namespace) -> str | None:
    path: str | None = args.tokens or os.environ.get(ENV) or None
    if path is None:
        print(f"memstream tokens: give the store with --tokens PATH or {ENV}", file=sys.stderr)
    return path


def _create(args: argparse.Namespace) -> int:
    from producers.keys.token_store import TokenStore, TokenStoreError
    from schemas.tokens import DEFAULT_LIFETIME, parse_lifetime

    path = _path(args)
    if path is None:
        return 2
    try:
        lifetime = DEFAULT_LIFETIME if args.expires is None else parse_lifetime(args.expires)
        now = datetime.now(UTC).replace(microsecond=0)
        with TokenStore.create(path) as store:
            token, record = store.issue(args.log, args.scope, args.agent, now + lifetime, now)
    except (ValueError, TokenStoreError) as exc:
        print(f"memstream tokens create: {exc}", file=sys.stderr)
        return 2
    print(token)
    print(
        f"token {record.id}: scope {record.scope} on log {record.log!r} for agent "
        f"{record.agent!r}, expires {record.expires.isoformat()} (shown once; the store "
        f"{path} keeps only its hash)",
        file=sys.stderr,
    )
    return 0


def _status(expires: datetime, revoked: datetime | None, now: datetime) -> str:
    if revoked is not None:
        return f"revoked {revoked.isoformat()}"
    return "expired" if now >= expires else "active"


def _list(args: argparse.Namespace) -> int:
    from producers.keys.token_store import TokenStore, TokenStoreError

    path = _path(args)
    if path is None:
        return 2
    try:
        with TokenStore.open(path) as store:
            records = store.list()
    except TokenStoreError as exc:
        print(f"memstream tokens list: {exc}", file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    print("id            scope   log / agent / created / expires / status")
    for r in records:
        print(
            f"{r.id}  {r.scope:<7} {r.log!r} {r.agent!r} {r.created.isoformat()} "
            f"{r.expires.isoformat()} {_status(r.expires, r.revoked, now)}"
        )
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from producers.keys.token_store import TokenStore, TokenStoreError

    path = _path(args)
    if path is None:
        return 2
    try:
        with TokenStore.open(path) as store:
            record = store.revoke(args.id)
    except (ValueError, TokenStoreError) as exc:
        print(f"memstream tokens revoke: {exc}", file=sys.stderr)
        return 2
    assert record.revoked is not None
    print(f"token {record.id} revoked at {record.revoked.isoformat()}")
    return 0


def register(sub: Any) -> None:
    """Add `tokens create|list|revoke` to the `memstream` parser."""
    from schemas.tokens import SCOPES

    tokens = sub.add_parser(
        "tokens",
        help="queryd's bearer tokens: create, list, revoke",
        description="queryd's bearer tokens (one scope on one log for one agent), kept "
        f"hashed in a token store file (--tokens PATH or {ENV}).",
    )
    verbs = tokens.add_subparsers(dest="tokens_command", metavar="SUBCOMMAND")
    tokens.set_defaults(func=lambda args: (tokens.print_help(), 2)[1])

    def store_flag(p: argparse.ArgumentParser) -> None:
        p.add_argument("--tokens", metavar="PATH", help=f"the token store file (env {ENV})")

    p = verbs.add_parser(
        "create",
        help="print a new token (once; only its hash is stored)",
        description="Create a token granting SCOPE on log NAME to agent AGENT and print it "
        "once; the store (created if missing, mode 0600) keeps only its SHA-256.",
    )
    store_flag(p)
    p.add_argument("--log", required=True, metavar="NAME", help="the log (as queryd names it)")
    p.add_argument(
        "--scope",
        required=True,
        choices=SCOPES,
        help="read: every read; recall: reads and recalls; admin: everything",
    )
    p.add_argument(
        "--agent", required=True, metavar="NAME", help="who acts with it (a Recall's actor)"
    )
    p.add_argument(
        "--expires",
        metavar="DURATION",
        help="its lifetime: 30d, 12h, 90m, 2w (default 90d, at most 3650d)",
    )
    p.set_defaults(func=_create)

    p = verbs.add_parser("list", help="the tokens: id, scope, log, agent, expiry, status")
    store_flag(p)
    p.set_defaults(func=_list)

    p = verbs.add_parser("revoke", help="revoke a token by id (daemons refuse it within 1 s)")
    store_flag(p)
    p.add_argument("id", help="the token's id (12 hex digits, as `tokens list` shows)")
    p.set_defaults(func=_revoke)
