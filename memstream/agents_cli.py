"""`memstream agents create|enrol|revoke|list` and `memstream log create`: provable authorship.

- ``agents create NAME`` writes the agent's Ed25519 key (a signed-note key named NAME, the
  format of `memstream keys init`) to a file the agent keeps (mode 0600, never
  overwritten) and prints its verifier key, which an admin enrols.
- ``log create LOCATION --admin-key FILE`` creates a log that requires signatures (the
  default for logs created by this command; ``--unsigned`` for one that does not), its
  admins fixed: the key given and every ``--admin VERIFIER``.
- ``agents enrol`` / ``agents revoke`` append the enrolment records, signed by an admin.
- ``agents list LOCATION`` prints who may sign, and since when (the log's own history).

Exit status: 0 done, 2 bad input (refused: nothing appended).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from producers.keys.agent_keys import agent_key_file, default_agent_keys_dir
from producers.logs import open_log
from producers.logs.location import redact
from producers.logs.signing_key import init_key, load_verifier
from producers.memory import Memory
from projector.authorship import KINDS
from schemas.errors import LogNotFoundError, MemstreamError

__all__ = ["register", "default_agent_key_path"]


def default_agent_key_path(name: str) -> Path:
    """``~/.config/memstream/agents/NAME.key`` (characters other than letters, digits,
    ``.-_@`` written as ``_``)."""
    return agent_key_file(default_agent_keys_dir(), name)


def _fail(verb: str, exc: BaseException) -> int:
    print(f"memstream {verb}: {exc}", file=sys.stderr)
    return 2


def _create(args: argparse.Namespace) -> int:
    path = Path(args.key) if args.key else default_agent_key_path(args.name)
    try:
        signer = init_key(path, args.name)
    except MemstreamError as exc:
        return _fail("agents create", exc)
    print(f"agent key written to {path} (mode 0600; the agent keeps it, secret)")
    print(f"verifier key (an admin enrols it): {signer.verifier.text()}")
    return 0


def _exists(location: str) -> bool:
    try:
        log = open_log(location, create=False)
    except LogNotFoundError:
        return False
    try:
        return log.head() is not None
    finally:
        log.close()


def _log_create(args: argparse.Namespace) -> int:
    try:
        if _exists(args.location):
            raise MemstreamError(f"log {redact(args.location)} exists already (holds records)")
        if args.unsigned:
            with Memory(args.location, key=args.key or None):
                pass
            print(f"log {args.location}: created without required signatures")
            return 0
        admins = [load_verifier(a) for a in args.admin]
        with Memory(
            args.location,
            key=args.key or None,
            agent_key=args.admin_key,
            signed=True,
            admins=admins,
        ) as memory:
            auth = memory.authorship
    except MemstreamError as exc:
        return _fail("log create", exc)
    assert auth is not None
    print(f"log {args.location}: requires signatures (log id {auth.log_id})")
    for verifier in auth.admins.values():
        print(f"admin: {verifier.text()}")
    return 0


def _enrol(args: argparse.Namespace) -> int:
    try:
        verifier = load_verifier(args.agent)
        with Memory(args.location, create=False, agent_key=args.admin_key) as memory:
            seq = memory.enrol(verifier, may=args.may)
    except MemstreamError as exc:
        return _fail("agents enrol", exc)
    print(f"enrolled {verifier.name} at seq {seq}: {verifier.text()}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    try:
        with Memory(args.location, create=False, agent_key=args.admin_key) as memory:
            seq = memory.revoke(args.name, args.reason)
    except MemstreamError as exc:
        return _fail("agents revoke", exc)
    print(f"revoked {args.name} at seq {seq}: records it signs after seq {seq} are refused")
    return 0


def _rotate_admin(args: argparse.Namespace) -> int:
    try:
        verifier = load_verifier(args.new_key)
        with Memory(args.location, create=False, agent_key=args.admin_key) as memory:
            seq = memory.rotate_admin(verifier)
    except MemstreamError as exc:
        return _fail("agents rotate-admin", exc)
    print(
        f"rotated {verifier.name}'s key at seq {seq}: {verifier.text()} (what its old key "
        f"signs after seq {seq} is refused)"
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    try:
        with Memory(args.location, create=False) as memory:
            auth = memory.authorship
    except MemstreamError as exc:
        return _fail("agents list", exc)
    if auth is None:
        print(
            f"log {args.location}: does not require signatures (created without them): "
            "its records' actors are claimed, not proved"
        )
        return 0
    print(f"log {args.location}: requires signatures (log id {auth.log_id})")
    print("seq       action  name / key")
    for seq, action, name, key in auth.history:
        print(f"{seq:<9} {action:<7} {name}  {key}")
    for agent in auth.agents.values():
        state = "active" if agent.revoked_seq is None else f"revoked at seq {agent.revoked_seq}"
        print(f"agent {agent.name}: {state}; may append {', '.join(sorted(agent.may))}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    agents = sub.add_parser(
        "agents", help="agents' signing keys and their enrolment on signed logs"
    )
    verbs = agents.add_subparsers(dest="agents_command", metavar="ACTION", required=True)

    p = verbs.add_parser("create", help="write a new agent key (Ed25519) to a file the agent keeps")
    p.add_argument("name", help="the agent's name (no spaces, no '+'), e.g. agent:alice")
    p.add_argument("--key", help="the key file (default ~/.config/memstream/agents/NAME.key)")
    p.set_defaults(func=_create)

    p = verbs.add_parser("enrol", help="enrol an agent on a signed log (an admin's key signs)")
    p.add_argument("location", help="the log's location")
    p.add_argument("agent", help="the agent's verifier key (NAME+ID+KEY), or its key file")
    p.add_argument("--admin-key", required=True, metavar="FILE", help="an admin's key file")
    p.add_argument(
        "--may",
        nargs="+",
        choices=KINDS,
        help="what it may append (default: everything)",
    )
    p.set_defaults(func=_enrol)

    p = verbs.add_parser("revoke", help="revoke an agent: its later records are refused")
    p.add_argument("location", help="the log's location")
    p.add_argument("name", help="the agent's name")
    p.add_argument("--admin-key", required=True, metavar="FILE", help="an admin's key file")
    p.add_argument("--reason", default="revoked", help="why (kept in the log)")
    p.set_defaults(func=_revoke)

    p = verbs.add_parser(
        "rotate-admin",
        help="replace an admin's key on a signed log (an admin's current key signs)",
    )
    p.add_argument("location", help="the log's location")
    p.add_argument(
        "new_key",
        help="the admin's new verifier key (NAME+ID+KEY, NAME the admin's), or its key file",
    )
    p.add_argument("--admin-key", required=True, metavar="FILE", help="an admin's current key file")
    p.set_defaults(func=_rotate_admin)

    p = verbs.add_parser("list", help="who may sign a log's records, and since which seq")
    p.add_argument("location", help="the log's location")
    p.set_defaults(func=_list)

    logs = sub.add_parser("log", help="create a log (requiring signatures by default)")
    log_verbs = logs.add_subparsers(dest="log_command", metavar="ACTION", required=True)
    p = log_verbs.add_parser(
        "create", help="create a new log that requires signatures (--unsigned: one that does not)"
    )
    p.add_argument("location", help="the new log's location (a path, or kafka://...)")
    p.add_argument("--admin-key", metavar="FILE", help="the creating admin's key file")
    p.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="VERIFIER",
        help="another admin's verifier key (NAME+ID+KEY) or key file; repeatable",
    )
    p.add_argument(
        "--unsigned",
        action="store_true",
        help="create a log that does not require signatures (as Memory(path) does)",
    )
    p.add_argument("--key", help="the checkpoint signing key (as for every writer)")
    p.set_defaults(func=_log_create_checked)


def _log_create_checked(args: argparse.Namespace) -> int:
    if not args.unsigned and not args.admin_key:
        print(
            "memstream log create: a signed log needs --admin-key FILE (make one with "
            "`memstream agents create NAME`), or pass --unsigned",
            file=sys.stderr,
        )
        return 2
    return _log_create(args)
