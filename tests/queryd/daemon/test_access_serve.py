"""`memstream queryd serve` with --tokens and TLS, as real processes: HTTPS with a
self-signed certificate, tokens checked, and no token in the daemon's output."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import signal
import ssl
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from daemon_support import MEMSTREAM, REPO_ROOT, seed, serve

from memstream.stack.probes import free_port
from producers.keys.token_store import TokenStore


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "memstream test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def issue(path: Path, log: str, scope: str, agent: str) -> str:
    with TokenStore.create(path) as store:
        token, _ = store.issue(
            log,
            scope,  # type: ignore[arg-type]
            agent,
            dt.datetime.now(dt.UTC) + dt.timedelta(days=1),
        )
    return token


def test_https_with_tokens(tmp_path: Path) -> None:
    location = str(tmp_path / "memory-db")
    seeded = seed(location)
    cert, key = self_signed(tmp_path)
    tokens = tmp_path / "tokens.db"
    token = issue(tokens, seeded.name, "recall", "agent:alice")
    port = free_port()
    out_path = tmp_path / "queryd.log"
    args = [
        str(MEMSTREAM),
        "queryd",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log",
        location,
        "--tokens",
        str(tokens),
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--log-format",
        "json",
    ]
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            args, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"https://127.0.0.1:{port}"
    try:
        with httpx.Client(verify=ssl.create_default_context(cafile=cert), timeout=5) as client:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, out_path.read_text()
                try:
                    if client.get(f"{base}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, out_path.read_text()
                time.sleep(0.2)
            assert client.get(f"{base}/logs/{seeded.name}/state").status_code == 401
            auth = {"Authorization": f"Bearer {token}"}
            answer = client.get(f"{base}/logs/{seeded.name}/state", headers=auth)
            assert answer.status_code == 200 and "dogs chase cats" in answer.text
            answer = client.post(
                f"{base}/logs/{seeded.name}/recall", json={"query": "cat"}, headers=auth
            )
            assert answer.status_code == 200 and answer.json()["recall"]["actor"] == "agent:alice"
        # plain HTTP to the TLS port gets no answer of the daemon's
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=3).raise_for_status()
        # a client that does not trust the certificate does not talk to it
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{base}/healthz", timeout=3)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    output = out_path.read_text()
    assert f"on https://127.0.0.1:{port}" in output
    assert "without access control" not in output
    assert f"/logs/{seeded.name}/recall" in output  # access lines were written...
    assert '"agent": "agent:alice"' in output  # ...naming who...
    assert token not in output and token.split("_", 2)[2] not in output  # ...without it


def test_serving_without_tokens_says_so_once(tmp_path: Path) -> None:
    location = str(tmp_path / "memory-db")
    seed(location)
    out_path = tmp_path / "queryd.log"
    with serve([location], output=out_path) as base:
        assert httpx.get(f"{base}/logs/memory-db/state").status_code == 200
    assert out_path.read_text().count("serving without access control") == 1


def test_serve_refuses_bad_stores_tls_pairs_and_keys_without_tokens(tmp_path: Path) -> None:
    location = str(tmp_path / "memory-db")
    seed(location)
    base = [str(MEMSTREAM), "queryd", "serve", "--log", location, "--port", str(free_port())]
    for extra, said in [
        (["--tokens", str(tmp_path / "none.db")], "none.db: no such file"),
        (["--tls-cert", str(tmp_path / "c.pem")], "give both --tls-cert and --tls-key"),
        (["--agent-keys", str(tmp_path / "no-dir")], "--agent-keys: no such directory"),
        (["--agent-keys", str(tmp_path)], "--agent-keys needs --tokens"),
    ]:
        done = subprocess.run(
            [*base, *extra], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr
    assert not (tmp_path / "none.db").exists()
