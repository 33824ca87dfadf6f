"""up / down / status over the recorded state in `.stack/state.json`.

Only what `up` started is ever stopped: the state file holds each server's pid, start time
and command-line marker, and every action re-checks them against /proc first.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import memstream.stack.kafka as kafka
import memstream.stack.redis as redis
from memstream.stack.config import StackConfig, parse_env, render_env
from memstream.stack.errors import StackError
from memstream.stack.health import kafka_roundtrip, redis_ping, redis_version
from memstream.stack.paths import StackPaths, default_stack_dir
from memstream.stack.procs import ProcessRecord, is_ours, tail, terminate
from memstream.stack.progress import LogReporter, Reporter

log = logging.getLogger(__name__)

SERVERS = ("kafka", "redis")


@dataclass(frozen=True)
class ServerStatus:
    name: str
    up: bool
    pid: int | None
    address: str | None
    version: str | None


@dataclass(frozen=True)
class StackStatus:
    kafka: ServerStatus
    redis: ServerStatus

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
    return {k: v for k, v in data.items() if k in SERVERS and isinstance(v, dict)}


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
    try:
        if name == "kafka":
            kafka_roundtrip(address, timeout=15.0)
        elif not redis_ping(address):
            raise RuntimeError("PING did not answer PONG")
    except Exception as exc:  # noqa: BLE001 - reported with the server's log below
        log_path = paths.kafka_log if name == "kafka" else paths.redis_log
        raise StackError(
            f"{name} is running (pid {entry['pid']}, {address}) but fails its health check "
            f"({exc}); `memstream stack down` then `up` restarts it. Last lines of "
            f"{log_path}:\n{tail(log_path)}"
        ) from exc


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
        started: list[str] = []
        try:
            # Kafka first: the slow one, and what Redis caches.
            servers = (
                ("kafka", kafka.start, {"address": cfg.bootstrap, "version": cfg.kafka_version}),
                ("redis", redis.start, {"address": cfg.redis_url}),
            )
            for name, start, facts in servers:
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


def status(paths: StackPaths) -> StackStatus:
    state = _read_state(paths)
    k_entry = state.get("kafka") or {}
    r_entry = state.get("redis") or {}
    k_up = _running(k_entry) is not None
    r_up = _running(r_entry) is not None
    r_addr = r_entry.get("address")
    return StackStatus(
        kafka=ServerStatus(
            name="kafka",
            up=k_up,
            pid=k_entry.get("pid") if k_up else None,
            address=k_entry.get("address"),
            version=k_entry.get("version"),
        ),
        redis=ServerStatus(
            name="redis",
            up=r_up,
            pid=r_entry.get("pid") if r_up else None,
            address=r_addr,
            version=redis_version(r_addr) if r_up and r_addr else None,
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
