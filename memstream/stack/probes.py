"""Loopback ports and readiness waits, for whatever starts local servers: the benchmarks,
the tests, and the stack's own checks."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable

__all__ = ["free_port", "free_ports", "wait_http_ready", "ServerStartError"]


class ServerStartError(RuntimeError):
    """A server process exited, or did not answer its probe in time."""


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports free at the time of asking (held open together while
    chosen, so they differ)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
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
