"""Issue 11, item 17: small injections against a real daemon.

- A ``%0A`` (or an escape sequence) in a path must not forge lines in the text access log.
- Any HTTP method, any path: the request metrics keep a bounded set of series.
- The Host header is checked: a name the daemon is not served under (DNS rebinding) is a
  400 in JSON; the allowed names are configurable by flag and by environment variable.
- A request body over the limit is a 413 in JSON, and changes nothing.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from daemon_support import serve

from producers.memory import Memory
from schemas.audit import Message


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("injections")
    location = str(root / "memory-db")
    with Memory(location) as writer:
        writer.add_message(Message(speaker="u", content="hello injections"))
    output = root / "queryd.log"
    with serve([location], output=output) as base:
        yield {
            "base": base,
            "port": int(base.rsplit(":", 1)[1]),
            "log": output,
            "location": location,
        }


def raw_request(port: int, head: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head.encode("latin-1"))
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_a_path_cannot_forge_access_log_lines(daemon: dict[str, Any]) -> None:
    forged = "2030-01-01 00:00:00,000 INFO memstream.queryd.access: GET /admin 200 0.1ms"
    target = "/logs/memory-db/search%0A" + forged.replace(" ", "%20") + "%1B[31m%0D?q=x"
    answer = raw_request(
        daemon["port"], f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 404")
    httpx.get(f"{daemon['base']}/healthz")  # one more line after it, so it was written
    lines = Path(daemon["log"]).read_text().splitlines()
    assert not any(line.startswith("2030-01-01") for line in lines), "a forged line"
    assert not any("\x1b" in line or "\r" in line for line in lines)
    (access,) = [line for line in lines if "GET /logs/memory-db/search\\n2030" in line]
    assert "\\x1b[31m\\r 404" in access


def test_any_method_and_path_keep_the_metrics_bounded(daemon: dict[str, Any]) -> None:
    with httpx.Client(base_url=daemon["base"], timeout=10) as http:
        for i in range(300):
            http.request(f"M{i}X", f"/logs/memory-db/nowhere-{i}")
            http.request("GET", f"/made-up/{i}")
        text = http.get("/metrics").text
    series = {
        line.split(" ")[0]
        for line in text.splitlines()
        if line.startswith("memstream_queryd_request_seconds_count")
    }
    methods = {m for s in series for m in re.findall(r'method="([^"]*)"', s)}
    routes = {r for s in series for r in re.findall(r'route="([^"]*)"', s)}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other"}
    assert "other" in methods and not any(r.startswith("/made-up") for r in routes)
    assert len(series) < 15, sorted(series)  # before: one series per method and status


@pytest.mark.parametrize(
    ("host", "status"),
    [
        ("localhost", 200),
        ("localhost:{port}", 200),
        ("127.0.0.1:{port}", 200),
        ("[::1]:{port}", 200),
        ("LOCALHOST.:{port}", 200),
        ("attacker.example:{port}", 400),  # DNS rebinding: a name that resolves to us
        ("attacker.example", 400),
        ("localhost.attacker.example", 400),
        ("127.0.0.1.nip.io:{port}", 400),
        ("", 400),
    ],
)
def test_only_allowed_hosts_are_served(daemon: dict[str, Any], host: str, status: int) -> None:
    value = host.format(port=daemon["port"])
    answer = raw_request(
        daemon["port"],
        f"GET /logs/memory-db/state HTTP/1.1\r\nHost: {value}\r\nConnection: close\r\n\r\n",
    )
    assert answer.startswith(f"HTTP/1.1 {status}".encode()), answer[:300]
    if status == 400:
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert "header.Host" in body["message"] and "--allowed-host" in body["message"]
        # liveness stays reachable under any name (an orchestrator probes by address)
        health = raw_request(
            daemon["port"], f"GET /healthz HTTP/1.1\r\nHost: {value}\r\nConnection: close\r\n\r\n"
        )
        assert health.startswith(b"HTTP/1.1 200")


def test_allowed_hosts_by_flag_and_by_environment(
    embedded_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(embedded_location) as writer:
        writer.add_message(Message(speaker="u", content="x"))

    def status(base: str, host: str) -> int:
        return httpx.get(f"{base}/logs/memory-db/state", headers={"Host": host}).status_code

    with serve([embedded_location], "--allowed-host", "queryd.internal") as base:
        assert status(base, "queryd.internal") == 200 and status(base, "localhost") == 200
        assert status(base, "other.internal") == 400
    monkeypatch.setenv("MEMSTREAM_QUERYD_ALLOWED_HOSTS", "*.corp.example,queryd")
    with serve([embedded_location]) as base:
        assert status(base, "api.corp.example") == 200 and status(base, "queryd:80") == 200
        assert status(base, "corp.example.evil") == 400
    monkeypatch.setenv("MEMSTREAM_QUERYD_ALLOWED_HOSTS", "*")
    with serve([embedded_location]) as base:
        assert status(base, "anything.example") == 200


def test_a_body_over_the_limit_is_413_and_appends_nothing(daemon: dict[str, Any]) -> None:
    with Memory(daemon["location"]) as memory:
        before = memory.log.state().last_seq
    with httpx.Client(base_url=daemon["base"], timeout=30) as http:
        big = http.post(
            "/logs/memory-db/recall",
            content=b'{"query": "' + b"a" * 2_000_000 + b'"}',
            headers={"content-type": "application/json"},
        )
        assert big.status_code == 413, big.text
        assert "body" in big.json()["message"] and "bytes" in big.json()["message"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams in
            yield b'{"query": "'
            for _ in range(40):
                yield b"b" * 65536
            yield b'"}'

        streamed = http.post(
            "/logs/memory-db/recall", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413, streamed.text
        assert http.post("/logs/memory-db/recall", json={"query": "hello"}).status_code == 200
    with Memory(daemon["location"]) as memory:
        assert memory.log.state().last_seq == before + 1  # only the small recall
