"""`memstream projector run --log LOCATION`: the projection service on the command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from schemas.errors import MemstreamError

# A projector group member's session (`projector.group.ProjectorGroup`'s default too): a
# dead member's logs move this long after its last heartbeat.
SESSION_MS = 4_000
# A group member's lifecycle transactions a second, in all (`projector.group`'s
# DEFAULT_COMMITS_PER_S too; `projector.commit_pacer`).
COMMITS_PER_S = 100

log = logging.getLogger("memstream.projector.cli")


class _PlainProgress:
    """A line every few seconds while the projector is behind (off a terminal)."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self, position: int, end: int) -> None:
        now = time.monotonic()
        if end > position and now - self.last >= 5:
            self.last = now
            print(f"catching up: seq {position} of {end}", flush=True)

    def close(self) -> None:
        pass


class _RichProgress:
    """A progress bar on a terminal while the projector catches up a long log."""

    def __init__(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(
            TextColumn("catching up"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            transient=True,
        )
        self.task: Any = None

    def __call__(self, position: int, end: int) -> None:
        if self.task is None:
            if end - position < 1000:
                return
            self.progress.start()
            self.task = self.progress.add_task("catch-up", total=end)
        self.progress.update(self.task, completed=position, total=end)
        if position >= end:
            self.close()

    def close(self) -> None:
        if self.task is not None:
            self.progress.stop()
            self.task = None


def cmd_run(args: argparse.Namespace) -> int:
    from projector.service import Projector

    logs: list[str] = args.log or []
    if len(logs) > 1 or args.logs_matching or args.group:
        return _run_group(args, logs)
    location = logs[0] if logs else os.environ.get("MEMSTREAM_LOG")
    if not location:
        print(
            "memstream projector run: --log LOCATION (or MEMSTREAM_LOG) is required",
            file=sys.stderr,
        )
        return 2
    progress = _RichProgress() if sys.stdout.isatty() else _PlainProgress()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        projector = Projector(
            location,
            every_records=args.snapshot_records,
            every_ms=args.snapshot_ms,
            progress=progress,
            key=args.key,
            checkpoint_ms=args.checkpoint_ms,
            commit_linger_ms=args.commit_linger_ms,
        )
        sweeper = None
        if args.retention_every is not None:
            from projector.retention import RetentionSweeper

            sweeper = RetentionSweeper(
                location, args.retention_every, agent_key=args.agent_key
            ).start()
        try:
            state = projector.run(stop, until_caught_up=args.until_caught_up)
        finally:
            if sweeper is not None:
                sweeper.stop()
    except (MemstreamError, ValueError) as exc:
        progress.close()
        print(f"memstream projector: {exc}", file=sys.stderr)
        return 1
    progress.close()
    s = projector.stats
    print(
        f"projector stopped at seq {state.last_seq}: folded {s.folded}, "
        f"published {s.published} lifecycle events (skipped {s.skipped} already published), "
        f"{s.snapshots} snapshots, {s.rebuilds} rebuilds, {s.restarts} restarts, "
        f"{len(state.rejections)} rejections, {s.checkpoints} signed checkpoints",
        flush=True,
    )
    if s.evidence_halted:
        print(f"memstream projector: no checkpoint signed: {s.evidence_halted}", file=sys.stderr)
    return 0


# --- many logs (issue 17): a member of a projector group -------------------------------------


def _run_group(args: argparse.Namespace, logs: list[str]) -> int:
    """Many logs, shared with the other processes of the group (`projector.group`)."""
    from projector.group import DEFAULT_GROUP, ProjectorGroup

    if args.until_caught_up:
        print("memstream projector: --until-caught-up follows one --log only", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        group = ProjectorGroup(
            logs,
            pattern=args.logs_matching,
            group=args.group or DEFAULT_GROUP,
            refresh_s=args.refresh_seconds,
            group_protocol=args.group_protocol,
            session_timeout_ms=args.group_session_ms,
            heartbeat_ms=min(500, args.group_session_ms // 4),
            commits_per_s=args.max_commits_per_s or None,
            projector={
                "every_records": args.snapshot_records,
                "every_ms": args.snapshot_ms,
                "key": args.key,
                "checkpoint_ms": args.checkpoint_ms,
                "commit_linger_ms": args.commit_linger_ms,
            },
        )
        print(f"projector group {group.group!r}: following logs (Ctrl-C to stop)", flush=True)
        group.run(stop)
    except MemstreamError as exc:
        print(f"memstream projector: {exc}", file=sys.stderr)
        return 1
    s = group.stopped
    print(
        f"projector group {group.group!r} stopped: {group.handovers} log tenures, folded "
        f"{s.folded}, published {s.published} lifecycle events (skipped {s.skipped}) in "
        f"{s.commits} transactions, {s.snapshots} snapshots, {s.rebuilds} rebuilds, "
        f"{s.restarts} restarts",
        flush=True,
    )
    return 0


def _count(least: int) -> Any:
    """An argparse type: a whole number of at least `least` (an interval of 0 or less would
    cut a snapshot, or commit, on every round of the loop)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is less than {least}")
        return value

    return parse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("projector", help="the projection service: fold a log into Redis")
    verbs = parser.add_subparsers(dest="projector_command", metavar="VERB", required=True)
    run = verbs.add_parser(
        "run",
        help="follow a Kafka log: fold, snapshot to Redis, publish lifecycle events",
    )
    run.add_argument(
        "--log",
        action="append",
        help="kafka://HOST:PORT/LOG?redis=redis://HOST:PORT/DB (env MEMSTREAM_LOG); "
        "repeat it to follow many logs as a member of a projector group",
    )
    run.add_argument(
        "--logs-matching",
        metavar="PATTERN",
        help="follow every log whose topic matches: kafka://HOST:PORT/GLOB?redis=... "
        "(GLOB: '*', '[...]'; derived and internal topics never match), new ones included",
    )
    run.add_argument(
        "--group",
        metavar="NAME",
        help="the projector group (Kafka consumer group) whose members share the logs "
        "(default memstream-projectors)",
    )
    run.add_argument(
        "--group-protocol",
        choices=("consumer", "classic"),  # projector.group.GROUP_PROTOCOLS, not imported here
        default="consumer",
        help="the group's protocol: consumer (KIP-848, Kafka 4: the broker assigns; the "
        "default) or classic (the members rejoin on every change)",
    )
    run.add_argument(
        "--group-session-ms",
        type=_count(1000),
        default=SESSION_MS,
        metavar="T",
        help="a member that stops heartbeating is taken out of the group, its logs given to "
        f"the others, after T ms (default {SESSION_MS}; the broker bounds it: see "
        "group.consumer.min.session.timeout.ms)",
    )
    run.add_argument(
        "--commit-linger-ms",
        type=_count(0),
        default=1,
        metavar="T",
        help="at a log's end, commit its lifecycle events once the transaction is T ms old "
        "(default 1; more: fewer transactions for the broker, later events)",
    )
    run.add_argument(
        "--max-commits-per-s",
        type=_count(0),
        default=COMMITS_PER_S,
        metavar="N",
        help="a member of a projector group commits at most N lifecycle transactions a "
        f"second for all its logs (default {COMMITS_PER_S}; 0: no budget): under load each "
        "transaction holds more events, and the broker does less work",
    )
    run.add_argument(
        "--refresh-seconds",
        type=float,
        default=3.0,
        metavar="S",
        help="look for new logs every S seconds (default 3)",
    )
    run.add_argument(
        "--snapshot-records",
        type=_count(1),
        default=20_000,
        metavar="N",
        help="write a snapshot at least every N records (default 20000)",
    )
    run.add_argument(
        "--snapshot-ms",
        type=_count(1),
        default=1000,
        metavar="T",
        help="and at least every T milliseconds when there is news (default 1000)",
    )
    run.add_argument(
        "--key",
        help="the signing key file of the log's checkpoints (default $MEMSTREAM_SIGNING_KEY, "
        "else ~/.config/memstream/signing.key when it exists; none: no checkpoints)",
    )
    run.add_argument(
        "--checkpoint-ms",
        type=int,
        default=1000,
        metavar="T",
        help="cut a signed checkpoint at most every T milliseconds (default 1000)",
    )
    run.add_argument(
        "--retention-every",
        type=float,
        default=None,
        metavar="SECONDS",
        help="also enforce retain_until: sweep the log every SECONDS (an encrypted log; "
        "as `memstream retention run`)",
    )
    run.add_argument(
        "--agent-key",
        default=None,
        metavar="FILE",
        help="on a signed log: the key file of the enrolled agent the retention sweep "
        "erases as (its Erasures are signed by it and name it as actor)",
    )
    run.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once the log's end (as of the start) is folded",
    )
    run.set_defaults(func=cmd_run)
