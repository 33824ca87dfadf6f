"""up / down / status over the recorded state in `.stack/state.json`.

Only what `up` started is ever stopped: the state file holds each server's pid, start time
and command-line marker, and every action re-checks them against /proc first.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import memstream.stack.kafka as kafka
import memstream.stack.redis as redis
import memstream.stack.secure as secure
from memstream.stack.config import StackConfig, parse_env, render_env
from memstream.stack.errors import StackError
from memstream.stack.health import kafka_roundtrip, redis_ping, redis_version
from memstream.stack.paths import StackPaths, default_stack_dir
from memstream.stack.procs import ProcessRecord, is_ours, tail, terminate, wait_exit
from memstream.stack.progress import LogReporter, Reporter

log = logging.getLogger(__name__)

SERVERS = ("kafka", "redis")
# A cluster's nodes are recorded as kafka-1, kafka-2, ...; its shape under "cluster".
_NODE_KEY = re.compile(r"^kafka-([1-9][0-9]*)$")
CLUSTER = "cluster"


def node_key(node: int) -> str:
    return f"kafka-{node}"


@dataclass(frozen=True)
class ServerStatus:
    name: str
    up: bool
    pid: int | None
    address: str | None
    version: str | None


@dataclass(frozen=True)
class StackStatus:
    """`kafka` is the one broker, or for a cluster all its nodes together (up when every
    node is); `nodes` each node (the one broker alone on the default stack)."""

    kafka: ServerStatus
    redis: ServerStatus
    nodes: tuple[ServerStatus, ...] = field(default=())

    @property
    def up(self) -> bool:
        return self.kafka.up and self.redis.up

    @property
    def servers(self) -> tuple[ServerStatus, ServerStatus]:
        return (self.kafka, self.redis)


@dataclass(frozen=True)
class UpResult:
    bootstrap: str
    redis_url: str
    started: tuple[str, ...]  # servers this call started; empty when all were already up
    kafka_version: str
    env_file: Path


@contextmanager
def _locked(paths: StackPaths) -> Iterator[None]:
    # Several shells (or a test session and a developer) may share one .stack/.
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_state(paths: StackPaths) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(paths.state.read_text())
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError:
        log.warning("ignoring unreadable %s", paths.state)
        return {}
    if not isinstance(data, dict):
        log.warning("ignoring unreadable %s", paths.state)
        return {}
    return {
        k: v
        for k, v in data.items()
        if (k in SERVERS or k == CLUSTER or _NODE_KEY.match(k)) and isinstance(v, dict)
    }


def _write_state(paths: StackPaths, state: dict[str, dict[str, Any]]) -> None:
    tmp = paths.state.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, paths.state)


def _running(entry: dict[str, Any] | None) -> ProcessRecord | None:
    if not entry:
        return None
    try:
        record = ProcessRecord.from_json(entry)
    except (KeyError, ValueError):
        return None
    return record if is_ours(record) else None


def _check_running(name: str, entry: dict[str, Any], paths: StackPaths) -> None:
    """Health-check a server that is already up; `up` never restarts one behind its back."""
    address = str(entry["address"])
    admin = secure.load_admin(paths.root) if entry.get("secure") else None
    try:
        if name == "kafka":
            kafka_roundtrip(
                address,
                timeout=15.0,
                replication_factor=int(entry.get("rf", 1)),
                credentials=admin,
            )
        elif not redis_ping(address if admin is None else _with_password(address, admin)):
            raise RuntimeError("PING did not answer PONG")
    except Exception as exc:  # noqa: BLE001 - reported with the server's log below
        log_path = paths.kafka_log if name == "kafka" else paths.redis_log
        raise StackError(
            f"{name} is running (pid {entry['pid']}, {address}) but fails its health check "
            f"({exc}); `memstream stack down` then `up` restarts it. Last lines of "
            f"{log_path}:\n{tail(log_path)}"
        ) from exc


def _with_password(url: str, creds: secure.Credentials) -> str:
    host, _, port = url.removeprefix("redis://").split("/")[0].rpartition(":")
    return creds.redis_url(host, int(port))


def _check_security(state: dict[str, dict[str, Any]], cfg: StackConfig, paths: StackPaths) -> None:
    """A stack is secured or not from its first start on: never a plain server left running
    under a secured stack (or the reverse), nor a broker formatted without the admin's
    credential started with SASL."""
    for name in SERVERS:
        entry = state.get(name)
        if _running(entry) and entry is not None and bool(entry.get("secure")) != cfg.secure:
            was = "secured" if entry.get("secure") else "unsecured"
            raise StackError(
                f"{name} is running {was} in {paths.root}; `memstream stack down` first to "
                f"start it {'secured' if cfg.secure else 'unsecured'} (or use another --stack-dir)"
            )
    formatted = (paths.kafka_data / "meta.properties").is_file()
    if cfg.secure and formatted and not secure.admin_file(paths.root).is_file():
        raise StackError(
            f"the Kafka data in {paths.kafka_data} was formatted without SCRAM credentials; "
            "a secured stack needs its own (remove that folder or use another --stack-dir)"
        )


def up(
    cfg: StackConfig | None = None,
    paths: StackPaths | None = None,
    reporter: Reporter | None = None,
) -> UpResult:
    """Start Kafka and Redis unless already running; health-check both; write `.stack/env`.

    Idempotent: a server already running from this stack is left as it is. If this call
    fails, whatever it started is stopped again before the error propagates.
    """
    cfg = cfg or StackConfig.from_env()
    paths = paths or StackPaths(default_stack_dir())
    reporter = reporter or LogReporter()
    with _locked(paths):
        state = _read_state(paths)
        _check_shape(state, cfg)
        _check_security(state, cfg, paths)
        if cfg.secure:
            secure.ensure_admin(paths.root, cfg.bootstrap, cfg.host, cfg.redis_port)
        started: list[str] = []
        try:
            # Kafka first: the slow one, and what Redis caches.
            if cfg.brokers > 1:
                started += _up_cluster(state, cfg, paths, reporter)
                kafka_facts = {"address": cfg.bootstrap, "version": cfg.kafka_version}
                state["kafka"] = {**kafka_facts, "cluster": True}
                _write_state(paths, state)
            flag = {"secure": True} if cfg.secure else {}
            servers = (
                (
                    "kafka",
                    kafka.start,
                    {"address": cfg.bootstrap, "version": cfg.kafka_version, **flag},
                ),
                ("redis", redis.start, {"address": cfg.redis_url, **flag}),
            )
            for name, start, facts in servers:
                if name == "kafka" and cfg.brokers > 1:
                    continue
                entry = state.get(name)
                if _running(entry) and entry is not None:
                    _check_running(name, entry, paths)
                    reporter.note(f"{name} already up (pid {entry['pid']}, {entry['address']})")
                    continue
                record = start(paths, cfg, reporter)
                state[name] = {**record.to_json(), **facts}
                started.append(name)
                _write_state(paths, state)
        except BaseException:
            for name in started:
                entry = state.pop(name)
                terminate(ProcessRecord.from_json(entry), timeout=10.0)
            if cfg.brokers > 1 and not any(_NODE_KEY.match(k) for k in state):
                state.pop(CLUSTER, None)
                state.pop("kafka", None)
            _write_state(paths, state)
            raise
        bootstrap = str(state["kafka"]["address"])
        redis_url = str(state["redis"]["address"])
        paths.env_file.write_text(render_env(bootstrap, redis_url))
        return UpResult(
            bootstrap=bootstrap,
            redis_url=redis_url,
            started=tuple(started),
            kafka_version=str(state["kafka"]["version"]),
            env_file=paths.env_file,
        )


def down(paths: StackPaths, timeout: float = 30.0, reporter: Reporter | None = None) -> list[str]:
    """Stop the servers `up` started (by recorded pid, after checking it). Returns their names."""
    reporter = reporter or LogReporter()
    stopped: list[str] = []
    with _locked(paths):
        state = _read_state(paths)
        # Redis first: it is the cache in front of Kafka, and quick to stop.
        for name in ("redis", "kafka"):
            entry = state.pop(name, None)
            if name == "kafka" and CLUSTER in state:
                stopped += _down_cluster(state, paths, timeout, reporter)
                continue
            if not entry:
                continue
            record = _running(entry)
            if record is None:
                reporter.note(f"{name} was not running (pid {entry.get('pid')} is gone)")
                continue
            with reporter.step(f"stopping {name} (pid {record.pid})"):
                terminate(record, timeout=timeout)
            stopped.append(name)
            _write_state(paths, state)
        _write_state(paths, state)
        paths.env_file.unlink(missing_ok=True)
    return stopped


def _status_url(paths: StackPaths, entry: dict[str, Any]) -> str:
    address = str(entry["address"])
    if not entry.get("secure"):
        return address
    try:
        return _with_password(address, secure.load_admin(paths.root))
    except FileNotFoundError:
        return address  # its version then shows as unknown


def status(paths: StackPaths) -> StackStatus:
    state = _read_state(paths)
    k_entry = state.get("kafka") or {}
    r_entry = state.get("redis") or {}
    r_up = _running(r_entry) is not None
    r_addr = r_entry.get("address")
    if CLUSTER in state:
        nodes = _node_statuses(state)
        kafka_status = ServerStatus(
            name="kafka",
            up=bool(nodes) and all(n.up for n in nodes),
            pid=None,
            address=k_entry.get("address"),
            version=k_entry.get("version"),
        )
    else:
        k_up = _running(k_entry) is not None
        kafka_status = ServerStatus(
            name="kafka",
            up=k_up,
            pid=k_entry.get("pid") if k_up else None,
            address=k_entry.get("address"),
            version=k_entry.get("version"),
        )
        nodes = (kafka_status,)
    return StackStatus(
        nodes=nodes,
        kafka=kafka_status,
        redis=ServerStatus(
            name="redis",
            up=r_up,
            pid=r_entry.get("pid") if r_up else None,
            address=r_addr,
            version=redis_version(_status_url(paths, r_entry)) if r_up and r_addr else None,
        ),
    )


def read_env(paths: StackPaths) -> dict[str, str] | None:
    """KAFKA_BOOTSTRAP_SERVERS and REDIS_URL of a running stack, or None when it is not up."""
    if not status(paths).up:
        return None
    try:
        return parse_env(paths.env_file.read_text())
    except FileNotFoundError:
        return None


def require_up(paths: StackPaths) -> StackStatus:
    st = status(paths)
    if not st.up:
        down_names = [s.name for s in st.servers if not s.up]
        raise StackError(f"stack in {paths.root} is not up ({', '.join(down_names)} down)")
    return st


# --- a cluster of Kafka nodes ------------------------------------------------------------------


def _check_shape(state: dict[str, dict[str, Any]], cfg: StackConfig) -> None:
    """`up` adds to a stack only what it lacks, never a cluster to a single broker's stack or
    the reverse: that would be a second Kafka on the same data."""
    cluster = state.get(CLUSTER)
    single = _running(state.get("kafka")) is not None and cluster is None
    if cfg.brokers > 1 and single:
        raise StackError(
            f"this stack runs one Kafka broker; `memstream stack down` first to start "
            f"{cfg.brokers} nodes (or use another --stack-dir)"
        )
    if cluster is not None and int(cluster.get("brokers", 0)) != cfg.brokers:
        running = [k for k in state if _NODE_KEY.match(k) and _running(state[k])]
        if running:
            raise StackError(
                f"this stack runs a {cluster.get('brokers')}-node Kafka cluster; "
                f"`memstream stack down` first to start {cfg.brokers} (or use another "
                "--stack-dir)"
            )


def cluster_config(state: dict[str, dict[str, Any]]) -> StackConfig:
    """The config a cluster was started with, as recorded by `up`."""
    shape = state[CLUSTER]
    return StackConfig(
        host=str(shape["host"]),
        brokers=int(shape["brokers"]),
        kafka_ports=tuple(int(p) for p in shape["kafka_ports"]),
        controller_ports=tuple(int(p) for p in shape["controller_ports"]),
        kafka_port=int(shape["kafka_ports"][0]),
        controller_port=int(shape["controller_ports"][0]),
        redis_port=int(shape.get("redis_port", StackConfig.redis_port)),
        kafka_version=str(shape["kafka_version"]),
        kafka_heap=str(shape["kafka_heap"]),
        start_timeout=float(shape.get("start_timeout", 120.0)),
    )


def _cluster_id(paths: StackPaths) -> str:
    """The id all nodes of this stack's cluster share, made once."""
    path = paths.root / "kafka-cluster-id"
    if path.is_file():
        kept = path.read_text().strip()
        if len(kept) == 22 and not kept.startswith("-"):
            return kept
    cid = kafka.new_cluster_id()
    path.write_text(cid + "\n")
    return cid


def _up_cluster(
    state: dict[str, dict[str, Any]], cfg: StackConfig, paths: StackPaths, reporter: Reporter
) -> list[str]:
    """Start the nodes not running (all together: the quorum needs a majority), wait for
    each to join, then check a replicated round trip. Returns the keys of those started."""
    state[CLUSTER] = {
        "host": cfg.host,
        "brokers": cfg.brokers,
        "kafka_ports": list(cfg.broker_ports),
        "controller_ports": list(cfg.quorum_ports),
        "redis_port": cfg.redis_port,
        "kafka_version": cfg.kafka_version,
        "kafka_heap": cfg.kafka_heap,
        "start_timeout": cfg.start_timeout,
    }
    cluster_id = _cluster_id(paths)
    started: list[tuple[int, ProcessRecord]] = []
    with reporter.step(
        f"starting a {cfg.brokers}-node Kafka {cfg.kafka_version} cluster on {cfg.bootstrap}"
    ):
        try:
            missing = [
                node
                for node in range(1, cfg.brokers + 1)
                if _running(state.get(node_key(node))) is None
            ]
            # Formatting each node's storage starts a JVM: side by side, not one by one.
            with ThreadPoolExecutor(max_workers=max(1, len(missing))) as pool:
                futures = {
                    node: pool.submit(
                        kafka.spawn_node, paths.for_node(node), cfg.node(node), cluster_id, reporter
                    )
                    for node in missing
                }
            failed = [f.exception() for f in futures.values() if f.exception() is not None]
            for node, future in futures.items():
                if future.exception() is None:
                    started.append((node, future.result()))
                    state[node_key(node)] = {
                        **future.result().to_json(),
                        "address": cfg.node(node).node_address,
                    }
            if failed and failed[0] is not None:
                raise failed[0]
            for node, record in started:
                kafka.wait_node(paths.for_node(node), cfg.node(node), record)
            kafka_roundtrip(
                cfg.bootstrap, timeout=cfg.start_timeout, replication_factor=cfg.replication
            )
        except BaseException:
            _stop_all([record for _, record in started], timeout=10.0)
            for node, _ in started:
                state.pop(node_key(node), None)
            raise
    return [node_key(node) for node, _ in started]


def _stop_all(records: list[ProcessRecord], timeout: float) -> list[bool]:
    # Together: a node stopping alone waits for a quorum that the others' stops take away.
    if not records:
        return []
    with ThreadPoolExecutor(max_workers=len(records)) as pool:
        return list(pool.map(lambda r: terminate(r, timeout=timeout), records))


def _down_cluster(
    state: dict[str, dict[str, Any]], paths: StackPaths, timeout: float, reporter: Reporter
) -> list[str]:
    keys = sorted((k for k in state if _NODE_KEY.match(k)), key=lambda k: int(k.split("-")[1]))
    running = [(k, r) for k in keys if (r := _running(state[k])) is not None]
    with reporter.step(f"stopping Kafka nodes {', '.join(k for k, _ in running) or '(none up)'}"):
        _stop_all([r for _, r in running], timeout)
    for key in keys:
        state.pop(key, None)
    state.pop(CLUSTER, None)
    _write_state(paths, state)
    return [k for k, _ in running]


def _node_statuses(state: dict[str, dict[str, Any]]) -> tuple[ServerStatus, ...]:
    shape = state.get(CLUSTER) or {}
    out = []
    for node in range(1, int(shape.get("brokers", 0)) + 1):
        entry = state.get(node_key(node)) or {}
        up_now = _running(entry) is not None
        out.append(
            ServerStatus(
                name=node_key(node),
                up=up_now,
                pid=entry.get("pid") if up_now else None,
                address=entry.get("address") or f"{shape['host']}:{shape['kafka_ports'][node - 1]}",
                version=str(shape.get("kafka_version")),
            )
        )
    return tuple(out)


def _cluster_state(paths: StackPaths) -> dict[str, dict[str, Any]]:
    state = _read_state(paths)
    if CLUSTER not in state:
        raise StackError(
            f"the stack in {paths.root} is not a cluster (`memstream stack up --brokers 3`)"
        )
    return state


def kill_node(paths: StackPaths, node: int, sig: signal.Signals = signal.SIGKILL) -> int:
    """Send `sig` (SIGKILL: a crash, for fault tests) to cluster node `node` by its recorded
    pid, after checking it is still the process `up` started; wait for it to be gone when
    the signal ends it. Returns the pid."""
    with _locked(paths):
        state = _cluster_state(paths)
        cfg = cluster_config(state)
        cfg.node(node)  # ValueError naming the nodes there are
        entry = state.get(node_key(node))
        record = _running(entry)
        if record is None:
            raise StackError(f"Kafka node {node} is not running")
        os.kill(record.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            if not wait_exit(record, timeout=30.0):
                raise StackError(f"Kafka node {node} (pid {record.pid}) did not exit on {sig.name}")
        return record.pid


def start_node(paths: StackPaths, node: int, reporter: Reporter | None = None) -> int:
    """Start cluster node `node` again (its own config and data) and return its pid once it
    has joined the cluster; a node already running is left as it is."""
    reporter = reporter or LogReporter()
    with _locked(paths):
        state = _cluster_state(paths)
        cfg = cluster_config(state)
        node_cfg = cfg.node(node)
        key = node_key(node)
        running = _running(state.get(key))
        if running is not None:
            reporter.note(f"{key} already up (pid {running.pid})")
            return running.pid
        node_paths = paths.for_node(node)
        with reporter.step(f"starting Kafka node {node} on {node_cfg.node_address}"):
            record = kafka.spawn_node(node_paths, node_cfg, _cluster_id(paths), reporter)
            try:
                kafka.wait_node(node_paths, node_cfg, record)
            except BaseException:
                terminate(record, timeout=10.0)
                raise
        state[key] = {**record.to_json(), "address": node_cfg.node_address}
        _write_state(paths, state)
        return record.pid


@dataclass(frozen=True)
class PartitionLeader:
    """Who leads a topic's partition 0 (a memstream log is one partition), and who holds it."""

    topic: str
    leader: int  # -1 while no replica leads (too many nodes down)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def partition_leaders(bootstrap: str, timeout: float = 5.0) -> list[PartitionLeader]:
    """Every user topic's partition-0 leader, replicas and in-sync replicas, by name (Kafka's
    internal topics, named ``__*``, left out). Raises `StackError` when no node answers."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from producers.logs.kafka_client import client_conf, error_cause

    try:
        metadata = AdminClient(client_conf(bootstrap)).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise StackError(f"no Kafka node at {bootstrap} answered: {error_cause(exc)}") from None
    out = []
    for name in sorted(metadata.topics):
        partition = metadata.topics[name].partitions.get(0)
        if name.startswith("__") or partition is None:
            continue
        out.append(
            PartitionLeader(
                name, int(partition.leader), tuple(partition.replicas), tuple(partition.isrs)
            )
        )
    return out
