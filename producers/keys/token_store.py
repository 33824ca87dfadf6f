"""queryd's token store: one SQLite file of token records (hashes, never tokens).

The file is named by ``--tokens PATH`` or ``MEMSTREAM_TOKENS``; `memstream tokens` writes
it and every queryd process given it reads it, so several daemons share one set of tokens
and a revocation reaches them all. SQLite in WAL mode: writers (the command line) and
readers (the daemons) on one machine or one shared disk never block each other, and a
created or revoked token is durable when the command returns (``synchronous=FULL``).

Only `TokenStore.create` creates the file (mode 0600, like key files); opening one that
does not exist fails, naming the path. Rows are data read back from a file: each is checked
(id form, hash length, scope, names, timestamps) before use, and a damaged row is left out
(it grants nothing) and reported, never trusted. Driver errors become a `TokenStoreError`
naming the path, the operation and the cause.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from schemas.errors import MemstreamError
from schemas.tokens import (
    HASH_BYTES,
    MAX_NAME_CHARS,
    SCOPES,
    TOKEN_ID,
    Scope,
    TokenRecord,
    check_name,
    new_token,
    token_hash,
)

__all__ = ["MAX_TOKENS", "Loaded", "TokenStore", "TokenStoreError"]

MAX_TOKENS = 100_000  # records loaded at most: a bigger file is refused, not read whole
_FORMAT = 1
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS tokens (
    id TEXT PRIMARY KEY,
    hash BLOB NOT NULL,
    log TEXT NOT NULL,
    scope TEXT NOT NULL,
    agent TEXT NOT NULL,
    created TEXT NOT NULL,
    expires TEXT NOT NULL
)""",
    # A revocation is a row of its own: the store is insert-only, so what it says of a
    # token (created, then revoked at) stays readable as a history.
    """CREATE TABLE IF NOT EXISTS revocations (
    id TEXT PRIMARY KEY REFERENCES tokens (id),
    revoked TEXT NOT NULL
)""",
)


class TokenStoreError(MemstreamError):
    """The token store cannot be created, opened, read or written: the message names the
    path, the operation and the cause (never a token)."""


@dataclass(frozen=True)
class Loaded:
    """The store's valid records by id, and the ids of rows left out as damaged."""

    records: dict[str, TokenRecord]
    damaged: list[str]


def _time(value: object) -> datetime | None:
    if type(value) is not str or len(value) > 40:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _record(row: tuple[object, ...]) -> TokenRecord | None:
    """A row as a record, or None when any field is not what the store writes."""
    token_id, digest, log, scope, agent, created, expires, revoked = row
    if type(token_id) is not str or not TOKEN_ID.fullmatch(token_id):
        return None
    if type(digest) is not bytes or len(digest) != HASH_BYTES:
        return None
    if scope not in SCOPES:
        return None
    for name in (log, agent):
        if type(name) is not str or not name or len(name) > MAX_NAME_CHARS:
            return None
    made, until = _time(created), _time(expires)
    ended = None if revoked is None else _time(revoked)
    if made is None or until is None or (revoked is not None and ended is None):
        return None
    assert isinstance(log, str) and isinstance(agent, str)  # checked above
    chosen: Scope = "read" if scope == "read" else "recall" if scope == "recall" else "admin"
    return TokenRecord(token_id, digest, log, chosen, agent, made, until, ended)


class TokenStore:
    """The token records in the SQLite file at `path` (see the module's docstring)."""

    def __init__(self, path: str | os.PathLike[str], conn: sqlite3.Connection) -> None:
        self.path = str(path)
        self._conn = conn
        self._lock = threading.Lock()

    # --- opening ----------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> TokenStore:
        """Open the store at `path`, creating the file (mode 0600) when there is none."""
        target = Path(path)
        try:
            fd = os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            pass
        except OSError as exc:
            raise TokenStoreError(
                f"token store {target}: cannot create the file: {exc.strerror}"
            ) from None
        else:
            os.close(fd)
        store = cls.open(target)
        try:
            with store._write("create its tables") as conn:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)", (str(_FORMAT),)
                )
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> TokenStore:
        """Open the existing store at `path`; a `TokenStoreError` when there is none (only
        `memstream tokens create` makes one)."""
        target = Path(path)
        if not target.is_file():
            raise TokenStoreError(
                f"token store {target}: no such file (create it with `memstream tokens "
                "create --tokens PATH ...`)"
            )
        try:
            conn = sqlite3.connect(
                target, timeout=5.0, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as exc:
            raise TokenStoreError(f"token store {target}: cannot open it: {exc}") from None
        return cls(target, conn)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> TokenStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------

    def version(self) -> int:
        """A number that changes when another connection commits to the file (SQLite's
        data_version): a reader reloads only when it moved."""
        try:
            with self._lock:
                row = self._conn.execute("PRAGMA data_version").fetchone()
        except sqlite3.Error as exc:
            raise TokenStoreError(f"token store {self.path}: cannot read it: {exc}") from None
        return int(row[0])

    def load(self) -> Loaded:
        """Every record, checked (damaged rows left out and named by id)."""
        try:
            with self._lock:
                count = self._conn.execute("SELECT count(*) FROM tokens").fetchone()[0]
                if count > MAX_TOKENS:
                    raise TokenStoreError(
                        f"token store {self.path}: {count} tokens, more than the "
                        f"{MAX_TOKENS} a daemon loads"
                    )
                rows = self._conn.execute(
                    "SELECT t.id, t.hash, t.log, t.scope, t.agent, t.created, t.expires, "
                    "r.revoked FROM tokens t LEFT JOIN revocations r ON r.id = t.id"
                ).fetchall()
        except sqlite3.Error as exc:
            raise TokenStoreError(f"token store {self.path}: cannot read it: {exc}") from None
        records: dict[str, TokenRecord] = {}
        damaged: list[str] = []
        for row in rows:
            record = _record(tuple(row))
            if record is None:
                damaged.append(str(row[0])[:40])
            else:
                records[record.id] = record
        return Loaded(records, damaged)

    def list(self) -> list[TokenRecord]:
        """Every valid record, oldest first."""
        return sorted(self.load().records.values(), key=lambda r: (r.created, r.id))

    # --- writing ----------------------------------------------------------------------------

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise TokenStoreError(f"token store {self.path}: cannot {what}: {exc}") from None

    def issue(
        self, log: str, scope: Scope, agent: str, expires: datetime, now: datetime | None = None
    ) -> tuple[str, TokenRecord]:
        """A new token for `agent` with `scope` on `log` until `expires`: (the token, its
        record). Only the record is stored; the token is returned once."""
        check_name("log", log)
        check_name("agent", agent)
        if scope not in SCOPES:
            raise ValueError(f"scope: expected one of {', '.join(SCOPES)}, got {scope!r}")
        made = (now or datetime.now(UTC)).replace(microsecond=0)
        if expires.tzinfo is None or expires <= made:
            raise ValueError("expires: expected a time in the future, with a time zone")
        token, token_id = new_token()
        record = TokenRecord(token_id, token_hash(token), log, scope, agent, made, expires)
        with self._write("add a token") as conn:
            conn.execute(
                "INSERT INTO tokens (id, hash, log, scope, agent, created, expires) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.hash,
                    log,
                    scope,
                    agent,
                    made.isoformat(),
                    expires.isoformat(),
                ),
            )
        return token, record

    def revoke(self, token_id: str, now: datetime | None = None) -> TokenRecord:
        """Revoke the token `token_id` (again: nothing changes); its record. A
        `TokenStoreError` when there is no such token."""
        if not TOKEN_ID.fullmatch(token_id):
            raise ValueError(
                f"id: expected 12 hex digits (as `tokens list` shows), got {token_id[:40]!r}"
            )
        when = (now or datetime.now(UTC)).replace(microsecond=0)
        with self._write("revoke a token") as conn:
            known = conn.execute("SELECT 1 FROM tokens WHERE id = ?", (token_id,)).fetchone()
            if known is not None:
                conn.execute(
                    "INSERT OR IGNORE INTO revocations (id, revoked) VALUES (?, ?)",
                    (token_id, when.isoformat()),
                )
        found = self.load().records.get(token_id)
        if found is None:
            raise TokenStoreError(f"token store {self.path}: no token {token_id}")
        return found
