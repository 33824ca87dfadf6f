"""`memstream stack up|down|status|env`: the command-line face of memstream.stack."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from memstream.stack.config import PORT_STRIDE, StackConfig, render_env
from memstream.stack.errors import StackError
from memstream.stack.manager import (
    ServerStatus,
    down,
    kill_node,
    partition_leaders,
    read_env,
    start_node,
    status,
    up,
)
from memstream.stack.paths import StackPaths, default_stack_dir
from memstream.stack.progress import Reporter

# `status` exit code when a server is down, as LSB init scripts use for "not running".
EXIT_NOT_RUNNING = 3


class PlainReporter:
    """Plain lines, for logs and CI."""

    def step(self, description: str) -> AbstractContextManager[None]:
        return self._step(description)

    @contextmanager
    def _step(self, description: str) -> Iterator[None]:
        print(f"{description} ...", flush=True)
        started = time.monotonic()
        yield
        print(f"{description}: done in {time.monotonic() - started:.1f}s", flush=True)

    def note(self, message: str) -> None:
        print(message, flush=True)


class RichReporter:
    """A spinner with elapsed time on a terminal."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(highlight=False)

    def step(self, description: str) -> AbstractContextManager[None]:
        return self._step(description)

    @contextmanager
    def _step(self, description: str) -> Iterator[None]:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        started = time.monotonic()
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as progress:
            progress.add_task(description, total=None)
            yield
        self.console.print(f"[green]✓[/] {description} ({time.monotonic() - started:.1f}s)")

    def note(self, message: str) -> None:
        self.console.print(message)


def make_reporter() -> Reporter:
    return RichReporter() if sys.stdout.isatty() else PlainReporter()


def _paths(args: argparse.Namespace) -> StackPaths:
    root = Path(args.stack_dir).resolve() if args.stack_dir else default_stack_dir()
    return StackPaths(root)


def cmd_up(args: argparse.Namespace) -> int:
    try:
        cfg = StackConfig.from_env(
            kafka_port=args.kafka_port,
            controller_port=args.kafka_controller_port,
            redis_port=args.redis_port,
            kafka_version=args.kafka_version,
            kafka_heap=args.kafka_heap,
            start_timeout=args.timeout,
            brokers=args.brokers,
            secure=True if args.secure else None,
        )
        result = up(cfg, _paths(args), make_reporter())
    except (StackError, ValueError) as exc:
        print(f"memstream stack up: {exc}", file=sys.stderr)
        return 1
    state = "started " + ", ".join(result.started) if result.started else "already up"
    if cfg.brokers > 1:
        state += f" ({cfg.brokers}-node cluster)"
    print(f"stack {state}: Apache Kafka {result.kafka_version}")
    print(f"KAFKA_BOOTSTRAP_SERVERS={result.bootstrap}")
    print(f"REDIS_URL={result.redis_url}")
    print(f'(written to {result.env_file}; `eval "$(memstream stack env)"` exports them)')
    if cfg.secure:
        from memstream.stack.secure import admin_file

        print(
            f"secured: SASL/SCRAM and ACLs; the admin's credentials are in "
            f"{admin_file(_paths(args).root)} (mode 0600); add users with "
            "`memstream stack users add NAME --role agent|projector|reader`"
        )
    return 0


def cmd_users_add(args: argparse.Namespace) -> int:
    from memstream.stack.access import add_user

    try:
        path = add_user(_paths(args), args.name, args.role)
    except (StackError, ValueError, OSError) as exc:
        print(f"memstream stack users add: {exc}", file=sys.stderr)
        return 1
    print(f"user {args.name} ({args.role}) added; its credentials are in {path} (mode 0600)")
    print(f"  `. {path}` sets KAFKA_BOOTSTRAP_SERVERS, MEMSTREAM_KAFKA_USERNAME,")
    print("  MEMSTREAM_KAFKA_PASSWORD and REDIS_URL for it; grant it logs with")
    print(f"  `memstream acl grant {args.name} --log LOG`")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    try:
        stopped = down(_paths(args), timeout=args.timeout, reporter=make_reporter())
    except StackError as exc:
        print(f"memstream stack down: {exc}", file=sys.stderr)
        return 1
    print("stopped " + ", ".join(stopped) if stopped else "nothing to stop")
    return 0


def _server_line(server: ServerStatus) -> str:
    state = "up" if server.up else "down"
    pid = str(server.pid) if server.pid else "-"
    address = server.address if server.up and server.address else "-"
    version = server.version if server.version else "-"
    return f"{server.name:<6} {state:<5} pid={pid:<8} address={address:<26} version={version}"


def cmd_status(args: argparse.Namespace) -> int:
    st = status(_paths(args))
    cluster = len(st.nodes) > 1
    for server in st.servers:
        if cluster and server.name == "kafka":
            up_count = sum(n.up for n in st.nodes)
            print(
                f"kafka  {'up' if server.up else 'down':<5} cluster of {len(st.nodes)} nodes, "
                f"{up_count} up; bootstrap={server.address}"
            )
            for node in st.nodes:
                print("  " + _server_line(node))
        else:
            print(_server_line(server))
    if cluster and any(n.up for n in st.nodes):
        bootstrap = ",".join(str(n.address) for n in st.nodes if n.up)
        try:
            leaders = partition_leaders(bootstrap)
        except StackError as exc:
            print(f"logs: {exc}")
        else:
            print(f"logs: {len(leaders)} topics (partition 0: leader, replicas, in sync)")
            for p in leaders:
                leader = f"kafka-{p.leader}" if p.leader >= 0 else "NONE"
                print(
                    f"  {p.topic:<40} leader={leader:<8} replicas={','.join(map(str, p.replicas))}"
                    f" isr={','.join(map(str, p.isr))}"
                )
    return 0 if st.up else EXIT_NOT_RUNNING


def cmd_kill(args: argparse.Namespace) -> int:
    try:
        pid = kill_node(_paths(args), args.node)
    except (StackError, ValueError) as exc:
        print(f"memstream stack kill: {exc}", file=sys.stderr)
        return 1
    print(f"killed kafka-{args.node} (pid {pid}, SIGKILL)")
    return 0


def cmd_start(args: argparse.Namespace) -> int:
    try:
        pid = start_node(_paths(args), args.node, make_reporter())
    except (StackError, ValueError) as exc:
        print(f"memstream stack start: {exc}", file=sys.stderr)
        return 1
    print(f"kafka-{args.node} up (pid {pid})")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    env = read_env(_paths(args))
    if env is None:
        print(
            "memstream stack env: the stack is not up (run `memstream stack up`)", file=sys.stderr
        )
        return 1
    sys.stdout.write(render_env(env["KAFKA_BOOTSTRAP_SERVERS"], env["REDIS_URL"]))
    return 0


def register(sub: Any) -> None:
    """Add the `stack` verb and its subverbs to the `memstream` parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--stack-dir",
        metavar="DIR",
        help="where the stack keeps jars, data, logs and pids "
        "(env MEMSTREAM_STACK_DIR; default: .stack/ in the project root)",
    )
    stack = sub.add_parser(
        "stack",
        help="run Apache Kafka (KRaft) and Redis locally for memstream's distributed mode",
        description="Run Apache Kafka (KRaft) and Redis locally for memstream's distributed mode.",
    )
    verbs = stack.add_subparsers(dest="stack_command", metavar="SUBCOMMAND")
    stack.set_defaults(func=lambda args: (stack.print_help(), 2)[1])

    p_up = verbs.add_parser(
        "up",
        parents=[common],
        help="start Kafka and Redis (fetching Kafka once), health-check them, write .stack/env",
    )
    defaults = StackConfig()
    p_up.add_argument(
        "--kafka-port",
        type=int,
        metavar="PORT",
        help=f"broker port (env MEMSTREAM_KAFKA_PORT; default {defaults.kafka_port})",
    )
    p_up.add_argument(
        "--kafka-controller-port",
        type=int,
        metavar="PORT",
        help="KRaft controller port (env MEMSTREAM_KAFKA_CONTROLLER_PORT; "
        f"default {defaults.controller_port})",
    )
    p_up.add_argument(
        "--redis-port",
        type=int,
        metavar="PORT",
        help=f"Redis port (env MEMSTREAM_REDIS_PORT; default {defaults.redis_port})",
    )
    p_up.add_argument(
        "--kafka-version",
        metavar="VERSION",
        help=f"Kafka 4.x release (env MEMSTREAM_KAFKA_VERSION; default {defaults.kafka_version})",
    )
    p_up.add_argument(
        "--kafka-heap",
        metavar="SIZE",
        help=f"broker JVM -Xmx (env MEMSTREAM_KAFKA_HEAP; default {defaults.kafka_heap})",
    )
    p_up.add_argument(
        "--timeout",
        type=float,
        default=defaults.start_timeout,
        metavar="SECONDS",
        help="how long each server may take to pass its health check",
    )
    p_up.add_argument(
        "--brokers",
        type=int,
        metavar="N",
        help="Kafka nodes (env MEMSTREAM_KAFKA_BROKERS; default 1). With 3 or more: a KRaft "
        "cluster, every node broker and controller, replication 3, min.insync.replicas 2, node "
        f"k on the first node's ports + {PORT_STRIDE}*(k-1)",
    )
    p_up.add_argument(
        "--secure",
        action="store_true",
        help="SASL/SCRAM-SHA-512 and ACLs on the broker (StandardAuthorizer, nothing allowed "
        "unless granted), ACL users on Redis; secrets in STACK_DIR/secrets "
        "(env MEMSTREAM_STACK_SECURE=1)",
    )
    p_up.set_defaults(func=cmd_up)

    from memstream.stack.access import ROLES

    p_users = verbs.add_parser(
        "users", help="users of a secured stack (Kafka SCRAM credentials, Redis ACL users)"
    )
    users_verbs = p_users.add_subparsers(dest="users_command", metavar="SUBCOMMAND")
    p_users.set_defaults(func=lambda args: (p_users.print_help(), 2)[1])
    p_add = users_verbs.add_parser(
        "add",
        parents=[common],
        help="add a user with a new random password, written to STACK_DIR/secrets/users/NAME.env",
    )
    p_add.add_argument("name", metavar="NAME", help="the user (its Kafka principal is User:NAME)")
    p_add.add_argument(
        "--role",
        required=True,
        choices=ROLES,
        help="agent: writes and reads the logs granted; projector: reads logs, writes their "
        "lifecycle, checkpoint and derived topics and snapshots; reader: reads",
    )
    p_add.set_defaults(func=cmd_users_add)

    p_down = verbs.add_parser(
        "down",
        parents=[common],
        help="stop the Kafka and Redis processes that `stack up` started (by recorded pid)",
    )
    p_down.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="wait this long after SIGTERM before SIGKILL (default 30)",
    )
    p_down.set_defaults(func=cmd_down)

    p_status = verbs.add_parser(
        "status",
        parents=[common],
        help="show whether Kafka and Redis are up, their pids, addresses and versions "
        "(exit 3 if not all up)",
    )
    p_status.set_defaults(func=cmd_status)

    p_env = verbs.add_parser(
        "env",
        parents=[common],
        help="print `export KAFKA_BOOTSTRAP_SERVERS=... REDIS_URL=...` lines for eval",
    )
    p_env.set_defaults(func=cmd_env)

    for verb, func, text in (
        ("kill", cmd_kill, "SIGKILL one node of the cluster (by recorded pid), for fault tests"),
        ("start", cmd_start, "start one node of the cluster again and wait until it has joined"),
    ):
        p_node = verbs.add_parser(verb, parents=[common], help=text)
        p_node.add_argument("node", type=int, metavar="NODE", help="the node's number (1, 2, 3)")
        p_node.set_defaults(func=func)
