"""Processes the stack starts: spawn detached, recognise by pid, stop by pid.

A recorded pid is trusted only while /proc says it is still the same process: its start time
matches what we recorded and its command line contains our marker (a path under `.stack/`).
So `down` never signals a process that merely reused the pid, and never acts by name.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Children started by this Python process, kept so they can be reaped (no zombies, no
# "subprocess still running" warnings) when the same process stops them, as tests do.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class ProcessRecord:
    pid: int
    starttime: int  # /proc/PID/stat field 22, in clock ticks since boot
    marker: str  # a string our process has in its command line

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ProcessRecord:
        return cls(
            pid=int(str(data["pid"])),
            starttime=int(str(data["starttime"])),
            marker=str(data["marker"]),
        )


def read_cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def read_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time) of a live pid, or None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    return rest[0], int(rest[19])


def is_ours(record: ProcessRecord) -> bool:
    """True while `record.pid` is the very process we started and it has not exited."""
    stat = read_stat(record.pid)
    if stat is None:
        return False
    state, starttime = stat
    if state in ("Z", "X") or starttime != record.starttime:
        return False
    cmdline = read_cmdline(record.pid)
    if not cmdline:
        return False
    return record.marker in " ".join(cmdline)


# The niceness of a server the clients of one machine all wait on (Redis: every lease
# renewal, snapshot and status), and of its session (`favour_session`): one thread among
# the hundreds of a loaded projector group's, at equal weight it went unscheduled for over
# a second and 188 renewals in one `bench cluster` run timed out (1.5 s), each lapse a
# tenure restarted. -5 until 7 December; -10 since, with its session.
FAVOURED_NICENESS = -10


def favour_session(pid: int) -> bool:
    """Give the session of `pid` (started by `spawn`, a session of its own) the weight of
    `FAVOURED_NICENESS`, when the kernel groups sessions for the scheduler (autogroup:
    ``/proc/PID/autogroup``) and this process may raise a priority (root); whether it did.

    With autogroup on, a process's niceness weighs only against the other processes of
    its session; sessions share the CPU as equals. Redis at niceness -5 in a session of
    its own still waited to run 1.0-1.8 s at a time while a `bench cluster` loaded the
    machine (its scheduler statistics; PINGs from another process went unanswered for
    up to 8 s when two runs overlapped); with its session at -10, PINGs waited 0.6 s at
    most."""
    if os.geteuid() != 0:
        return False
    try:
        with open(f"/proc/{pid}/autogroup", "w") as autogroup:
            autogroup.write(str(FAVOURED_NICENESS))
        return True
    except OSError:  # no autogroup (disabled, or not this kernel), or the process is gone
        return False


# Redis's main thread runs under the real-time round-robin policy, at its lowest priority,
# where this process may set it (`run_first`). A niceness, even with its session's, is a
# share of the CPU among the runnable: while `bench cluster` kept the broker's 48 threads
# and the projectors' runnable at once (7 December, twenty-fourth session), Redis at -10
# with its session at -10 still waited in the run queue 60-90% of whole seconds, PINGs from
# another process took up to 2.3 s and 99-137 lease renewals a run timed out (1.5 s). Under
# SCHED_RR it runs as soon as it is woken (at the kernel's next preemption point): PINGs
# took 64 ms at most in three runs, and no renewal timed out in 19. It spends little CPU (under a
# second of a whole `bench cluster` run, its command statistics), and the kernel's
# real-time throttling (sched_rt_runtime_us, 95% of a period) bounds a runaway command.
REALTIME_PRIORITY = 1


def run_first(pid: int) -> bool:
    """Put the main thread of `pid` (Redis runs its commands there) under SCHED_RR at
    `REALTIME_PRIORITY`, where the kernel lets this process (root, or CAP_SYS_NICE);
    whether it did. Nothing changes elsewhere: its niceness and session still apply."""
    setscheduler = getattr(os, "sched_setscheduler", None)
    if setscheduler is None:  # not Linux
        return False
    try:
        setscheduler(pid, os.SCHED_RR, os.sched_param(REALTIME_PRIORITY))
        return True
    except OSError:  # no right to (not root, a container without CAP_SYS_NICE), or gone
        return False


def run_threads_first(pid: int, wanted: Callable[[str], bool]) -> list[int]:
    """`run_first` for each thread of `pid` whose name (``/proc/PID/task/TID/comm``)
    `wanted` accepts; the thread ids it was set for (none where the kernel refuses)."""
    done: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # not Linux, or the process is gone
        return done
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = comm.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if wanted(name) and run_first(int(tid)):
            done.append(int(tid))
    return done


def favoured(argv: Sequence[str]) -> list[str]:
    """`argv` run at `FAVOURED_NICENESS` through coreutils' ``nice`` when this process
    may raise a priority (root); unchanged otherwise."""
    nice = shutil.which("nice")
    if nice is None or os.geteuid() != 0:
        return list(argv)
    return [nice, "-n", str(FAVOURED_NICENESS), *argv]


def spawn(
    argv: Sequence[str], log_path: Path, marker: str, cwd: Path | None = None
) -> ProcessRecord:
    """Start `argv` in its own session (it outlives the CLI), output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
    _CHILDREN[proc.pid] = proc
    stat = read_stat(proc.pid)
    starttime = stat[1] if stat else 0
    # Right after exec the new command line can read as empty for a moment: wait until it
    # shows, so is_ours() is reliable from the first check on.
    deadline = time.monotonic() + 5.0
    while proc.poll() is None and time.monotonic() < deadline:
        if marker in " ".join(read_cmdline(proc.pid) or []):
            break
        time.sleep(0.005)
    log.debug("started pid %d: %s", proc.pid, " ".join(argv))
    return ProcessRecord(pid=proc.pid, starttime=starttime, marker=marker)


def launch(
    argv: Sequence[str],
    log_path: Path,
    marker: str,
    cwd: Path,
    wait_ready: Callable[[ProcessRecord], None],
    stop_timeout: float,
) -> ProcessRecord:
    """Start a server as `spawn` does, its previous log kept as ``*.log.1`` (one log per
    start keeps errors easy to find), and return once `wait_ready` does; when it raises,
    the server is stopped again and the error goes to the caller."""
    if log_path.exists():
        log_path.replace(log_path.with_suffix(".log.1"))
    record = spawn(argv, log_path, marker=marker, cwd=cwd)
    try:
        wait_ready(record)
    except BaseException:
        terminate(record, timeout=stop_timeout)
        raise
    return record


def _exited(record: ProcessRecord) -> bool:
    """True once the process has finished exiting: reaped, gone, or a zombie (whose files,
    listening sockets included, are closed). Its command line empties earlier, when its
    memory is released, while its sockets may still be open: a JVM with a large heap and
    mapped segment files takes seconds there, and a node started again on its port found
    the port still taken."""
    proc = _CHILDREN.get(record.pid)
    if proc is not None:
        if proc.poll() is None:
            return False
        _CHILDREN.pop(record.pid, None)
        return True
    stat = read_stat(record.pid)
    return stat is None or stat[0] in ("Z", "X") or stat[1] != record.starttime


def wait_exit(record: ProcessRecord, timeout: float) -> bool:
    """Wait up to `timeout` seconds for the process to have finished exiting (see
    `_exited`); True if it has."""
    deadline = time.monotonic() + timeout
    while True:
        if not is_ours(record) and _exited(record):
            return True
        if time.monotonic() >= deadline:
            if not is_ours(record):
                log.warning("pid %d did not finish exiting within %gs", record.pid, timeout)
            return False
        time.sleep(0.05)


def terminate(record: ProcessRecord, timeout: float = 30.0) -> bool:
    """SIGTERM, then SIGKILL after `timeout`. Returns True if a process of ours was stopped."""
    if not is_ours(record):
        if record.pid in _CHILDREN and read_stat(record.pid) is None:
            _CHILDREN.pop(record.pid, None)
        return False
    log.info("stopping pid %d with SIGTERM", record.pid)
    _signal(record.pid, signal.SIGTERM)
    if wait_exit(record, timeout):
        return True
    log.warning("pid %d still running %.0fs after SIGTERM: sending SIGKILL", record.pid, timeout)
    if is_ours(record):  # checked again: never signal a pid that has been reused since
        _signal(record.pid, signal.SIGKILL)
    wait_exit(record, 10.0)
    return True


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file, or a note that there is none."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return f"(no log at {path})"
    text = data[-64 * 1024 :].decode(errors="replace")
    return "\n".join(text.splitlines()[-lines:])
