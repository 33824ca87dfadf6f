"""Loopback ports and readiness waits, for whatever starts local servers: the benchmarks,
the tests, and the stack's own checks."""

from __future__ import annotations

import random
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["free_port", "free_ports", "wait_http_ready", "ServerStartError"]


class ServerStartError(RuntimeError):
    """A server process exited, or did not answer its probe in time."""


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for clients' local ports (Linux; its default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free at the time of asking (held open together while
    chosen, so they differ), below the kernel's ephemeral range.

    Why below: a server that is killed and started again on its port (the fault tests)
    finds that port taken when a client's connection, given the same number as its local
    port, holds it meanwhile (or connects to itself: TCP's simultaneous open); a CI run
    failed so when a Kafka node's port was an ephemeral one that dozens of reconnecting
    clients drew from. A port outside that range is never handed to a client."""
    low, _ = _ephemeral_range()
    first = 10000 if low > 12000 else 1024
    socks: list[socket.socket] = []
    try:
        tries = 0
        while len(socks) < n:
            s = socket.socket()
            socks.append(s)
            tries += 1
            try:
                if tries > 2000:  # nothing free below the range: any port the kernel gives
                    s.bind(("127.0.0.1", 0))
                else:
                    s.bind(("127.0.0.1", random.randrange(first, low)))
            except OSError:
                socks.pop().close()
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    """One loopback port free at the time of asking."""
    return free_ports(1)[0]


def wait_http_ready(
    url: str,
    proc: subprocess.Popen[bytes],
    *,
    timeout: float = 120.0,
    output: Callable[[], str] | None = None,
) -> None:
    """Return once GET `url` answers 200; raise `ServerStartError` if `proc` exits first
    or `timeout` seconds pass (its message ends with `output()`, the server's log, if
    given)."""
    import httpx

    def failed(why: str) -> ServerStartError:
        tail = f":\n{output()}" if output is not None else ""
        return ServerStartError(f"{why}{tail}")

    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise failed(f"the server exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise failed(f"{url} did not answer 200 within {timeout:g} s")
        time.sleep(0.1)
