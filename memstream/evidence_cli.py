"""`memstream keys init|show`, `memstream checkpoint`, `memstream prove`, `memstream verify`:
the log's signing key, its signed checkpoints and proofs, and an auditor's check of it.

Exit status: 0 when done (verify: the log agrees with every checkpoint it was checked
against), 1 when verify finds the log and a checkpoint disagree or a checkpoint forged,
2 for bad input (no such log, an unreadable key, a proof that cannot be given).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import Any

from producers.authorship import AuthorshipReport, verify_authorship
from producers.logs.kafka_evidence import verify_kafka_log
from producers.logs.location import is_kafka_location
from producers.logs.signing_key import (
    KEY_ENV,
    default_key_path,
    init_key,
    load_signer,
    load_verifier,
)
from producers.logs.sqlite_evidence import verify_sqlite_log
from producers.memory import Memory
from schemas.errors import MemstreamError
from schemas.evidence.note import MAX_NOTE_BYTES

__all__ = ["register"]


def _fail(verb: str, exc: BaseException) -> int:
    print(f"memstream {verb}: {exc}", file=sys.stderr)
    return 2


def _keys_init(args: argparse.Namespace) -> int:
    path = Path(args.key) if args.key else default_key_path()
    try:
        signer = init_key(path, args.name)
    except MemstreamError as exc:
        return _fail("keys init", exc)
    print(f"signing key written to {path} (mode 0600; keep it secret, and outside the log)")
    print(f"verifier key (publish it): {signer.verifier.text()}")
    return 0


def _keys_show(args: argparse.Namespace) -> int:
    path = Path(args.key) if args.key else default_key_path()
    try:
        print(load_signer(path).verifier.text())
    except MemstreamError as exc:
        return _fail("keys show", exc)
    return 0


def _kafka(verb: str, location: str) -> int | None:
    if is_kafka_location(location):
        print(
            f"memstream {verb}: on Kafka the projector signs the checkpoints as it folds "
            "(`memstream projector run --key FILE`); `memstream checkpoint --latest "
            "LOCATION` prints the latest",
            file=sys.stderr,
        )
        return 2
    return None


def _checkpoint(args: argparse.Namespace) -> int:
    if not args.latest and (status := _kafka("checkpoint", args.location)) is not None:
        return status
    try:
        if args.latest:
            with Memory(args.location, create=False, key=False) as memory:
                sys.stdout.write(memory.latest_checkpoint())
            return 0
        with Memory(args.location, create=False, key=args.key or True) as memory:
            sys.stdout.write(memory.checkpoint())
    except MemstreamError as exc:
        return _fail("checkpoint", exc)
    return 0


def _prove(args: argparse.Namespace) -> int:
    if (args.seq is None) == (args.consistency is None):
        print("memstream prove: give a SEQ, or --consistency OLD_SIZE", file=sys.stderr)
        return 2
    try:
        with Memory(args.location, create=False, key=False) as memory:
            if args.seq is not None:
                proof = memory.prove(args.seq, size=args.size).to_json()
            else:
                proof = memory.consistency(args.consistency, args.size).to_json()
    except MemstreamError as exc:
        return _fail("prove", exc)
    print(json.dumps(proof, indent=2))
    return 0


def _read_note(path: str) -> str:
    file = Path(path)
    try:
        with open(file, "rb") as f:
            data = f.read(MAX_NOTE_BYTES + 1)
    except OSError as exc:
        raise MemstreamError(f"checkpoint file {file}: {exc.strerror or exc}") from None
    if len(data) > MAX_NOTE_BYTES:
        raise MemstreamError(f"checkpoint file {file}: over {MAX_NOTE_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise MemstreamError(f"checkpoint file {file}: not UTF-8 text") from None


def _verify(args: argparse.Namespace) -> int:
    try:
        verifier = load_verifier(args.key)
        external = [(f"checkpoint file {p}", _read_note(p)) for p in args.checkpoint]
        verify = verify_kafka_log if is_kafka_location(args.location) else verify_sqlite_log
        report = verify(args.location, verifier, external, all_signatures=args.all_signatures)
        admins = [load_verifier(a) for a in args.admin] if args.admin else None
        authorship = verify_authorship(args.location, admins)
    except MemstreamError as exc:
        return _fail("verify", exc)
    ok = report.ok and authorship.ok
    if args.json:
        print(
            json.dumps(
                {
                    "location": report.location,
                    "origin": report.origin,
                    "ok": report.ok,
                    "size": report.size,
                    "root": base64.b64encode(report.root).decode(),
                    "stored_checkpoints": report.stored_checkpoints,
                    "signatures_checked": report.signatures_checked,
                    "covered": report.covered,
                    "first_bad_seq": report.first_bad_seq,
                    "problem": report.problem,
                    "key": verifier.text(),
                    "authorship": _authorship_json(authorship),
                }
            )
        )
    else:
        print(f"log {report.location} (origin {report.origin})")
        print(f"re-hashed {report.size:,} records: root {base64.b64encode(report.root).decode()}")
        print(
            f"checkpoints stored in the log: {report.stored_checkpoints:,}; signatures "
            f"checked with {verifier.text()}: sizes {report.signatures_checked}"
        )
        if report.ok:
            print("OK: the log agrees with every signed checkpoint checked")
            if report.covered < report.size:
                print(
                    f"note: seq {report.covered} to {report.size - 1} are after the latest "
                    "signed checkpoint: nothing vouches for them yet"
                )
        else:
            where = "" if report.first_bad_seq is None else f" at seq {report.first_bad_seq}"
            print(f"FAILED{where}: {report.problem}")
        _print_authorship(authorship)
    return 0 if ok else 1


def _authorship_json(report: AuthorshipReport) -> dict[str, Any]:
    auth = report.authorship
    return {
        "requires_signatures": report.signed,
        "log_id": None if auth is None else auth.log_id,
        "admins": [] if auth is None else [v.text() for v in auth.admins.values()],
        "admins_match": report.admins_match,
        "history": [] if auth is None else [list(h) for h in auth.history],
        "signed_records": report.signed_records,
        "refused": [{"seq": r.seq, "reason": r.reason} for r in report.refused],
        "ok": report.ok,
        "problem": report.problem,
    }


def _print_authorship(report: AuthorshipReport) -> None:
    auth = report.authorship
    if auth is None:
        print(
            "authorship: this log does not require signatures (created without them): "
            "its records' actors are claimed, not proved"
        )
    else:
        held = {
            None: "not compared with keys you hold (--admin)",
            True: "the keys given",
            False: "NOT the keys given",
        }[report.admins_match]
        print(
            f"authorship: the log requires signatures (log id {auth.log_id}); admins "
            f"{', '.join(sorted(auth.admins))} ({held})"
        )
        enrolled = sum(1 for h in auth.history if h[1] == "enrol")
        revoked = sum(1 for h in auth.history if h[1] == "revoke")
        print(
            f"signatures checked: {report.signed_records:,} of {report.size:,} records "
            f"signed by a key valid at their seq; {enrolled} enrolment(s), {revoked} "
            f"revocation(s)"
        )
        for rejection in report.refused:
            print(f"refused at seq {rejection.seq} (not state): {rejection.reason}")
    if report.problem is not None:
        print(f"FAILED: authorship: {report.problem}")


def register(sub: argparse._SubParsersAction) -> None:
    keys = sub.add_parser("keys", help="make or show the signing key of the logs' checkpoints")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    key_help = f"the key file (default ${KEY_ENV}, else ~/.config/memstream/signing.key)"
    init = keys_sub.add_parser("init", help="make a new Ed25519 signing key (never overwrites)")
    init.add_argument("--name", help="the key's name in signatures (default memstream@HOST)")
    init.add_argument("--key", help=key_help)
    init.set_defaults(func=_keys_init)
    show = keys_sub.add_parser("show", help="print the public verifier key (NAME+ID+KEY)")
    show.add_argument("--key", help=key_help)
    show.set_defaults(func=_keys_show)

    checkpoint = sub.add_parser(
        "checkpoint",
        help="sign a checkpoint of an embedded log as it stands now (--latest: print a log's "
        "latest, embedded or Kafka)",
    )
    checkpoint.add_argument("location", help="the log's location")
    checkpoint.add_argument("--key", help=key_help)
    checkpoint.add_argument(
        "--latest",
        action="store_true",
        help="print the latest signed checkpoint instead (no key needed): keep it elsewhere",
    )
    checkpoint.set_defaults(func=_checkpoint)

    prove = sub.add_parser(
        "prove", help="print an inclusion (or consistency) proof against a signed checkpoint"
    )
    prove.add_argument("location", help="the log's location")
    prove.add_argument("seq", type=int, nargs="?", help="the seq of the record to prove")
    prove.add_argument(
        "--consistency",
        type=int,
        metavar="OLD_SIZE",
        help="prove instead that the first OLD_SIZE records are a prefix of the checkpoint",
    )
    prove.add_argument(
        "--size", type=int, help="against the checkpoint of this size (default: the latest)"
    )
    prove.set_defaults(func=_prove)

    verify = sub.add_parser(
        "verify",
        help="re-hash a log and check it against its signed checkpoints (exit 1 if it differs)",
    )
    verify.add_argument("location", help="the log's location")
    verify.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="FILE",
        help="also check against this signed checkpoint (a note kept outside the log)",
    )
    verify.add_argument(
        "--key",
        help="the verifier key (NAME+ID+KEY), or a file holding it or the signing key "
        f"(default: the public half of ${KEY_ENV} / ~/.config/memstream/signing.key)",
    )
    verify.add_argument(
        "--all-signatures",
        action="store_true",
        help="check the signature of every stored checkpoint, not only those relied on",
    )
    verify.add_argument(
        "--admin",
        action="append",
        default=[],
        metavar="VERIFIER",
        help="an admin key you hold (NAME+ID+KEY, or a key file); repeatable: the log's "
        "admins must be exactly these (exit 1 otherwise)",
    )
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.set_defaults(func=_verify)
