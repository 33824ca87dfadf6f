"""`memstream erase`, `memstream retention run`, `memstream reencrypt`: erasure on the command
line (`producers.erasure`, `producers.reencrypt`)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime

from producers.memory import Memory
from producers.reencrypt import reencrypt
from projector.authorship import AuthorshipError
from schemas.audit import Erasure
from schemas.crypto.graph_erasure import GraphErasure
from schemas.errors import MemstreamError

__all__ = ["register"]


def _receipt(erasure: Erasure | GraphErasure) -> str:
    return json.dumps(erasure.model_dump(mode="json"), sort_keys=True)


def _failed(verb: str, exc: BaseException, args: argparse.Namespace) -> int:
    hint = ""
    if isinstance(exc, AuthorshipError) and args.agent_key is None:
        hint = " (on a signed log, give --agent-key FILE: an enrolled agent's key)"
    print(f"memstream {verb}: {exc}{hint}", file=sys.stderr)
    return 1


def _erase(args: argparse.Namespace) -> int:
    try:
        with Memory(args.location, create=False, agent_key=args.agent_key) as memory:
            erasure = memory.erase(
                args.subject, args.reason, requested_by=args.requested_by, actor=args.actor
            )
    except (MemstreamError, ValueError) as exc:
        return _failed("erase", exc, args)
    print(_receipt(erasure))
    return 0


def _when(text: str | None) -> datetime | None:
    if text is None:
        return None
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise ValueError(f"--now {text!r}: give a time zone (e.g. 2027-01-01T00:00:00+00:00)")
    return value


def _retention(args: argparse.Namespace) -> int:
    try:
        now = _when(args.now)
        with Memory(args.location, create=False, agent_key=args.agent_key) as memory:
            while True:
                for erasure in memory.sweep_retention(now):
                    print(_receipt(erasure), flush=True)
                if args.every is None:
                    return 0
                time.sleep(args.every)
    except (MemstreamError, ValueError) as exc:
        return _failed("retention run", exc, args)
    except KeyboardInterrupt:
        return 0


def _reencrypt(args: argparse.Namespace) -> int:
    try:
        copied = reencrypt(args.source, args.target)
    except (MemstreamError, ValueError) as exc:
        print(f"memstream reencrypt: {exc}", file=sys.stderr)
        return 1
    print(f"copied {copied} records from {args.source} into the encrypted log {args.target}")
    return 0


_AGENT_KEY_HELP = (
    "on a signed log: the key file of the enrolled agent who erases (the Erasure is signed "
    "by it and names it as actor; `memstream agents create`)"
)


def register(sub: argparse._SubParsersAction) -> None:
    erase = sub.add_parser(
        "erase",
        help="make a data subject's content unreadable (crypto-shredding), with a receipt",
        description="Destroy the keys of a data subject (a session id, or event:ID) of an "
        "encrypted log and append an Erasure receipt; prints the receipt as JSON.",
    )
    erase.add_argument("location", help="the log (a path or kafka:// URL)")
    erase.add_argument(
        "--subject",
        required=True,
        help="the data subject: a session id (messages, documents), or a graph item's "
        "meta.subject or scope",
    )
    erase.add_argument("--reason", required=True, help="why (kept in the receipt)")
    erase.add_argument("--requested-by", default=None, help="who asked (kept in the receipt)")
    erase.add_argument("--actor", default=None, help="who erases (kept in the receipt)")
    erase.add_argument("--agent-key", default=None, metavar="FILE", help=_AGENT_KEY_HELP)
    erase.set_defaults(func=_erase)

    retention = sub.add_parser("retention", help="enforce retain_until")
    retention_sub = retention.add_subparsers(dest="retention_command", metavar="VERB")
    run = retention_sub.add_parser(
        "run",
        help="erase every event whose retain_until has passed, as audited Erasures",
        description="Erase every message and document whose retain_until has passed, one "
        "Erasure per subject with the reason 'retention period elapsed'; prints each receipt. "
        "Idempotent and safe to run from several processes.",
    )
    run.add_argument("location", help="the log (a path or kafka:// URL)")
    run.add_argument("--now", default=None, help="the time to sweep at (ISO-8601; default: now)")
    run.add_argument(
        "--every", type=float, default=None, help="sweep again every this many seconds"
    )
    run.add_argument("--agent-key", default=None, metavar="FILE", help=_AGENT_KEY_HELP)
    run.set_defaults(func=_retention)
    retention.set_defaults(func=lambda args: retention.print_help() or 2)

    copy = sub.add_parser(
        "reencrypt",
        help="copy a log written without encryption into a new encrypted log",
        description="Copy every record of SOURCE, in order, into a new encrypted log (embedded or "
        "Kafka) TARGET, where content can be erased; SOURCE is left as it is.",
    )
    copy.add_argument("source", help="the log to copy (a path or kafka:// URL)")
    copy.add_argument("target", help="the new encrypted log (a path or kafka:// URL)")
    copy.set_defaults(func=_reencrypt)
