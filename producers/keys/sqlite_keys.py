"""The embedded log's key store: a table of data-subject keys in the log's own SQLite file.

Kept in the log's file so a key is created in the same transaction (and the same fsync)
as the first record sealed under it, and destroyed in the same transaction as the Erasure
that records its destruction: no record without its key, no Erasure without the key gone.
The Merkle tree covers the `events` table only, so keys never enter the evidence.

Deleting really deletes: writer connections run with ``secure_delete`` (SQLite overwrites
deleted cells and freed pages with zeros) and an erasure ends with a TRUNCATE checkpoint,
which copies the WAL into the main file and truncates the WAL to zero bytes, so no earlier
page image holding the key survives in either file (`SqliteLog.purge`).

A key is 32 random bytes named by a key id (the time, then random digits: `new_key_id`;
the sealed value names the id, never the subject). ``event_id`` is NULL for a subject's
shared key; a key of a single event (one with `retain_until`, erased alone when its
retention elapses, or one that is its own subject) is made ahead with an empty subject and
event (`producers.keys.held_keys`), and older logs hold such keys under their subject and
event id. The table is WITHOUT ROWID (one B-tree by key id) and only shared
keys are indexed by subject. Keys of single events are made ahead, in batches, inside the
transaction of the append that first needs one (`producers.keys.held_keys`): key ids
begin with the time, so a batch fills neighbouring pages, and the other appends write no
key at all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from producers.keys.held_keys import UNASSIGNED, HeldKeys
from schemas.crypto.envelope import KEY_BYTES, new_key, new_key_id
from schemas.crypto.subjects import EVENT_SUBJECT_PREFIX
from schemas.errors import CorruptLogError

__all__ = ["KEYS_TABLE", "SqliteKeyStore"]

KEYS_TABLE = "subject_keys"
_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {KEYS_TABLE} (
    key_id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    event_id TEXT,
    key BLOB NOT NULL
) WITHOUT ROWID""",
    # Only the shared keys are looked up by subject; a key of one event is found through
    # the record sealed under it (erase reads those records anyway, for their leaf hashes).
    f"CREATE INDEX IF NOT EXISTS {KEYS_TABLE}_shared ON {KEYS_TABLE} (subject) "
    "WHERE event_id IS NULL",
)


_INSERT = f"INSERT INTO {KEYS_TABLE} (key_id, subject, event_id, key) VALUES (?, ?, ?, ?)"


class SqliteKeyStore(HeldKeys):
    """The keys of one encrypted log, over the log's connection.

    Methods run on that connection, so inside a log transaction they are part of it (a
    rollback undoes a key created or deleted there: the log then calls `forget_all`).
    Subjects' shared keys read are held in memory by id (`HeldKeys`); keys of single
    events are read from the table each time (a reader of a log of n such events would
    hold n keys); `forget_subject` drops a subject's keys from memory (after its erasure).
    """

    def __init__(self, conn: sqlite3.Connection, location: str) -> None:
        super().__init__()
        self._conn = conn
        self.location = location

    @staticmethod
    def present(conn: sqlite3.Connection) -> bool:
        """Whether the log behind `conn` is encrypted (has a key table)."""
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (KEYS_TABLE,)
        ).fetchone()
        return row is not None

    @staticmethod
    def create(conn: sqlite3.Connection) -> None:
        """Create the key table (inside the caller's transaction)."""
        for statement in _SCHEMA:
            conn.execute(statement)

    def _checked(self, key_id: str, subject: object, key: object) -> tuple[str, bytes]:
        if type(subject) is not str or type(key) is not bytes or len(key) != KEY_BYTES:
            raise CorruptLogError(
                f"log {self.location}: key store: the row of key {key_id} is damaged "
                f"(expected a subject and {KEY_BYTES} key bytes)"
            )
        return subject, key

    def key(self, key_id: str) -> bytes | None:
        """The key named `key_id`, or None when it was destroyed (or never existed)."""
        found = self._by_id.get(key_id)
        if found is not None:
            return found.key
        row = self._conn.execute(
            f"SELECT subject, event_id, key FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,)
        ).fetchone()
        if row is None:
            return None
        subject, key = self._checked(key_id, row[0], row[2])
        if row[1] is None:  # a subject's shared key: held; a key of one event is read once
            self._hold(key_id, subject, None, key)
        return key

    def key_for(self, subject: str, event_id: str | None = None) -> tuple[str, bytes]:
        """(key id, key) to seal an event of `subject` with: the subject's shared key
        (created on first use), or a new key of that one event when `event_id` is given."""
        if event_id is not None or subject.startswith(EVENT_SUBJECT_PREFIX):
            own_id, own, _ = self.own_key()
            return own_id, own
        key_id = self._shared.get(subject)
        if key_id is not None:
            found = self._by_id.get(key_id)
            if found is not None:
                return key_id, found.key
        row = self._conn.execute(
            f"SELECT key_id, key FROM {KEYS_TABLE} WHERE subject = ? AND event_id IS NULL",
            (subject,),
        ).fetchone()
        if row is not None:
            key_id = row[0]
            _, key = self._checked(key_id, subject, row[1])
            self._hold(key_id, subject, None, key)
            return key_id, key
        key_id, key = new_key_id(), new_key()
        self._conn.execute(_INSERT, (key_id, subject, None, key))
        # Held before the commit: if the transaction rolls back, the log calls
        # `forget_all`, and no stored record names the key.
        self._hold(key_id, subject, None, key)
        return key_id, key

    def own_key(self) -> tuple[str, bytes, AESGCM]:
        """A key of one event, with its context: one made ahead, or the first of a new
        batch, inserted in the caller's transaction (`producers.keys.held_keys`). Not
        held once handed out: it seals one event, and the table has it for any later read
        (held, keys of single events grew a writer by about 350 bytes an event)."""
        with self._lock:
            taken = self._take_ahead()
            if taken is None:
                batch = self._next_batch()
                self._conn.executemany(
                    _INSERT, [(key_id, UNASSIGNED, UNASSIGNED, key) for key_id, key in batch]
                )
                self._made_ahead(batch)
                taken = self._take_ahead()
                assert taken is not None
            self._by_id.pop(taken[0], None)
            return taken

    def shared_key_id(self, subject: str) -> str | None:
        """The id of `subject`'s shared key (None: none, or erased)."""
        row = self._conn.execute(
            f"SELECT key_id FROM {KEYS_TABLE} WHERE subject = ? AND event_id IS NULL",
            (subject,),
        ).fetchone()
        return None if row is None else str(row[0])

    def existing(self, key_ids: Iterable[str]) -> list[str]:
        """Those of `key_ids` that still exist, in order, once each."""
        found: list[str] = []
        for key_id in dict.fromkeys(key_ids):
            row = self._conn.execute(
                f"SELECT 1 FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,)
            ).fetchone()
            if row is not None:
                found.append(key_id)
        return found

    def shared_key_ids(self, key_ids: Iterable[str]) -> set[str]:
        """Those of `key_ids` that are a subject's shared key (not one event's)."""
        found: set[str] = set()
        for key_id in key_ids:
            row = self._conn.execute(
                f"SELECT event_id FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,)
            ).fetchone()
            if row is not None and row[0] is None:
                found.add(key_id)
        return found

    def delete(self, key_ids: Iterable[str]) -> int:
        """Delete keys (inside the caller's transaction); how many existed."""
        ids = list(key_ids)
        deleted = 0
        for key_id in ids:
            deleted += self._conn.execute(
                f"DELETE FROM {KEYS_TABLE} WHERE key_id = ?", (key_id,)
            ).rowcount
        self.forget_ids(ids)
        return deleted

    def forget_subject(self, subject: str) -> None:
        """Drop `subject`'s keys from this process's memory (another process erased it)."""
        self._forget_subject_here(subject)
