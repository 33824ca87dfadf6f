"""Redis: Debian's redis-server, installed with apt-get when missing, run by us on loopback."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from functools import partial

import memstream.stack.secure as secure
from memstream.stack.config import StackConfig, render_redis_conf
from memstream.stack.errors import StackError
from memstream.stack.health import redis_ping
from memstream.stack.paths import StackPaths
from memstream.stack.procs import (
    ProcessRecord,
    favour_session,
    favoured,
    is_ours,
    launch,
    port_open,
    read_stat,
    run_first,
    tail,
)
from memstream.stack.progress import LogReporter, Reporter

log = logging.getLogger(__name__)

PACKAGE = "redis-server"


def find_redis_server() -> str | None:
    # Debian installs it in /usr/bin; PATH may lack /usr/sbin-style dirs in minimal shells.
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def ensure_installed(reporter: Reporter | None = None) -> str:
    """The path of redis-server, installing Debian's package first if needed (root only)."""
    reporter = reporter or LogReporter()
    found = find_redis_server()
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise StackError(
            "redis-server is not installed and cannot be installed from here "
            "(needs apt-get as root): run `sudo apt-get install -y redis-server`"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with reporter.step("installing redis-server with apt-get"):
        for argv in (
            [apt, "update", "-q"],
            [apt, "install", "-y", "-q", "--no-install-recommends", PACKAGE],
        ):
            result = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if result.returncode != 0:
                output = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
                raise StackError(
                    f"`{' '.join(argv)}` failed (exit code {result.returncode}):\n{output}"
                )
    found = find_redis_server()
    if not found:
        raise StackError("apt-get installed redis-server but no redis-server binary was found")
    return found


def start(paths: StackPaths, cfg: StackConfig, reporter: Reporter | None = None) -> ProcessRecord:
    """Start redis-server as a detached child and return once it answers PING."""
    reporter = reporter or LogReporter()
    if port_open(cfg.host, cfg.redis_port):
        raise StackError(
            f"cannot start Redis: {cfg.host}:{cfg.redis_port} is already in use by a process "
            f"this stack did not start; choose another port (--redis-port or "
            f"MEMSTREAM_REDIS_PORT)"
        )
    binary = ensure_installed(reporter)
    paths.redis_home.mkdir(parents=True, exist_ok=True)
    aclfile = None
    if cfg.secure:
        aclfile = secure.acl_file(paths.root)
        if not aclfile.is_file():  # later users are kept there by ACL SAVE
            secure.write_private(aclfile, secure.redis_acl_text(secure.load_admin(paths.root)))
    paths.redis_config.write_text(
        render_redis_conf(cfg, paths.redis_home, paths.redis_pidfile, aclfile)
    )
    with reporter.step(f"starting Redis on {cfg.redis_url}"):
        record = launch(
            favoured([binary, str(paths.redis_config)]),
            paths.redis_log,
            marker=str(paths.redis_config),
            cwd=paths.redis_home,
            wait_ready=partial(wait_ready, paths, cfg),
            stop_timeout=5.0,
        )
        favour_session(record.pid)
        run_first(record.pid)
        return record


def wait_ready(paths: StackPaths, cfg: StackConfig, record: ProcessRecord) -> None:
    timeout = min(cfg.start_timeout, 30.0)
    deadline = time.monotonic() + timeout
    last_error = "the port never opened"
    while time.monotonic() < deadline:
        # Redis retitles itself after start-up; accept the pid until then by start time.
        if not is_ours(record) and not _starting(record):
            raise StackError(
                f"Redis (pid {record.pid}) exited while starting; last lines of "
                f"{paths.redis_log}:\n{tail(paths.redis_log)}"
            )
        if port_open(cfg.host, cfg.redis_port):
            try:
                if redis_ping(admin_url(paths, cfg)):
                    return
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = f"PING failed: {exc}"
        time.sleep(0.1)
    raise StackError(
        f"Redis did not answer PING within {timeout:.0f}s ({last_error}); last lines of "
        f"{paths.redis_log}:\n{tail(paths.redis_log)}"
    )


def admin_url(paths: StackPaths, cfg: StackConfig) -> str:
    """The URL the stack itself talks to Redis with: the admin's, on a secured stack."""
    if not cfg.secure:
        return cfg.redis_url
    return secure.load_admin(paths.root).redis_url(cfg.host, cfg.redis_port)


def _starting(record: ProcessRecord) -> bool:
    stat = read_stat(record.pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == record.starttime
