"""`memstream tokens create|list|revoke` and the token store file: the token is printed
once and stored nowhere; the file is the daemon's and is read as untrusted bytes."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from memstream.cli import main
from producers.keys.token_store import TokenStore, TokenStoreError


def create(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["tokens", "create", "--tokens", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_create_prints_the_token_once_and_stores_only_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens.db"
    code, out, err = create(
        capsys,
        path,
        "--log",
        "memory-db",
        "--scope",
        "recall",
        "--agent",
        "agent:alice",
        "--expires",
        "30d",
    )
    assert code == 0
    token = out.strip()
    assert token.startswith("mst_") and "\n" not in token
    assert "recall" in err and "agent:alice" in err and token not in err
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # the plaintext token, or its secret part, is in no byte of the store (file, WAL, SHM)
    secret = token.split("_", 2)[2]
    pieces = [secret[i : i + 12].encode() for i in range(len(secret) - 11)]
    for file in tmp_path.iterdir():
        data = file.read_bytes()
        assert not [p for p in pieces if p in data], file.name  # not even 12 characters
    with TokenStore.open(path) as store:
        (record,) = store.list()
    assert (record.log, record.scope, record.agent, record.revoked) == (
        "memory-db",
        "recall",
        "agent:alice",
        None,
    )
    assert 29 <= (record.expires - record.created).days <= 30
    assert main(["tokens", "list", "--tokens", str(path)]) == 0
    listed = capsys.readouterr().out
    assert record.id in listed and "active" in listed and token not in listed


def test_revoke_and_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.db"
    monkeypatch.setenv("MEMSTREAM_TOKENS", str(path))
    assert main(["tokens", "create", "--log", "l", "--scope", "read", "--agent", "a"]) == 0
    token = capsys.readouterr().out.strip()
    token_id = token.split("_")[1]
    assert main(["tokens", "revoke", token_id]) == 0
    assert f"token {token_id} revoked" in capsys.readouterr().out
    assert main(["tokens", "list"]) == 0
    assert "revoked" in capsys.readouterr().out
    assert main(["tokens", "revoke", "0" * 12]) == 2
    assert "no token 000000000000" in capsys.readouterr().err
    assert main(["tokens", "revoke", "nothex"]) == 2
    assert "expected 12 hex digits" in capsys.readouterr().err
    for extra, said in [
        (["--expires", "forever"], "expires: expected a number and a unit"),
        (["--expires", "9999d"], "at most 3650d"),
        (["--agent", "bad\nname"], "agent: expected 1 to 255 characters"),
    ]:
        args = ["tokens", "create", "--log", "l", "--scope", "read", "--agent", "a", *extra]
        assert main(args) == 2
        assert said in capsys.readouterr().err
    monkeypatch.delenv("MEMSTREAM_TOKENS")
    assert main(["tokens", "list"]) == 2
    assert "--tokens PATH or MEMSTREAM_TOKENS" in capsys.readouterr().err
    assert main(["tokens", "list", "--tokens", str(tmp_path / "missing.db")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "missing.db").exists()  # listing never creates a store


def test_damaged_rows_grant_nothing(tmp_path: Path) -> None:
    """A row edited behind the store's back (bad hash length, unknown scope, no time zone)
    is left out and named, never trusted; a file that is not a store is a clear error."""
    from datetime import UTC, datetime, timedelta

    path = tmp_path / "tokens.db"
    later = datetime.now(UTC) + timedelta(days=1)
    with TokenStore.create(path) as store:
        _, good = store.issue("l", "read", "a", later)
    conn = sqlite3.connect(path)
    rows = [
        ("aaaaaaaaaaaa", b"short", "l", "read", "a", good.created.isoformat(), later.isoformat()),
        ("bbbbbbbbbbbb", bytes(32), "l", "root", "a", good.created.isoformat(), later.isoformat()),
        ("cccccccccccc", bytes(32), "l", "admin", "a", "2026-01-01T00:00:00", later.isoformat()),
        ("not an id", bytes(32), "l", "admin", "a", good.created.isoformat(), later.isoformat()),
    ]
    conn.executemany("INSERT INTO tokens VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    with TokenStore.open(path) as store:
        loaded = store.load()
    assert set(loaded.records) == {good.id}
    assert sorted(loaded.damaged) == sorted(r[0] for r in rows)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(TokenStoreError, match="junk.db"):
        TokenStore.open(junk).load()
    assert os.path.getsize(junk) == 2100
