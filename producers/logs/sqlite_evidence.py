"""The embedded log's evidence: its Merkle tree, its signed checkpoints, proofs, `verify`.

What a leaf covers: leaf ``seq`` is ``SHA-256(0x00 || R)`` where ``R`` is exactly the
bytes of the ``record`` column of row ``seq`` of the ``events`` table (the record's
single-object Avro encoding, or the JSON envelope, as `schemas.codec` wrote it); the seq,
id, kind and checksum columns are not covered (the seq is the leaf's index, the others
are derived from ``R``). The tree is RFC 9162's (`schemas.evidence.merkle`).

The tree is kept in memory, derived from the stored bytes as the log folds them (at open,
and at each commit): one SHA-256 per record, for logs written before this existed too.
No leaf hash is stored: a stored copy would cost each append a second B-tree write, and
whoever can rewrite a record can rewrite its hash beside it.

Checkpoints: a writer with a signing key signs the tree at each commit, inside the same
transaction as the records, and stores the signed note in the ``checkpoints`` table
(``size`` primary key, ``note`` the note's text; append-only by triggers, as ``events``
is). The origin line is ``memstream/<UUID>``, the log's id, made by the first writer and
kept in the ``evidence`` table. The key is never in the file.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import uuid
from collections.abc import Iterable
from os import PathLike
from pathlib import Path
from urllib.parse import quote

from schemas.errors import LogNotFoundError, LogUnavailableError
from schemas.evidence.merkle import MerkleTree, leaf_hash
from schemas.evidence.note import (
    Checkpoint,
    CheckpointSigner,
    NoteSigner,
    NoteVerifier,
)
from schemas.evidence.proof import (
    ConsistencyProof,
    EvidenceMismatchError,
    InclusionProof,
    NoCheckpointError,
    ProofRangeError,
)
from schemas.evidence.verify import (
    Found,
    VerifyReport,
    judge,
    note_text,
    unsigned_checkpoint,
)

__all__ = ["SqliteEvidence", "VerifyReport", "verify_sqlite_log", "ORIGIN_PREFIX"]

log = logging.getLogger("memstream.producers.sqlite.evidence")

ORIGIN_PREFIX = "memstream/"
_LOG_FILE = "log.sqlite3"  # producers.logs.sqlite.LOG_FILE (not imported: it imports us)

# One statement each: they run inside the writer's open transaction, which
# `executescript` would commit first.
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS evidence (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS checkpoints (size INTEGER PRIMARY KEY, note TEXT NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_u BEFORE UPDATE ON checkpoints "
    "BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS checkpoints_append_only_d BEFORE DELETE ON checkpoints "
    "BEGIN SELECT RAISE(ABORT, 'checkpoints are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS evidence_append_only_u BEFORE UPDATE ON evidence "
    "BEGIN SELECT RAISE(ABORT, 'the log''s identity does not change'); END",
    "CREATE TRIGGER IF NOT EXISTS evidence_append_only_d BEFORE DELETE ON evidence "
    "BEGIN SELECT RAISE(ABORT, 'the log''s identity does not change'); END",
)
_HAS_TABLES = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'"
_ORIGIN = "SELECT CAST(value AS BLOB) FROM evidence WHERE name = 'origin'"
_LATEST = "SELECT size, CAST(note AS BLOB) FROM checkpoints ORDER BY size DESC LIMIT 1"
_AT = "SELECT size, CAST(note AS BLOB) FROM checkpoints WHERE size = ?"
_INSERT = "INSERT OR IGNORE INTO checkpoints (size, note) VALUES (?, ?)"
_LEAF = "SELECT CAST(record AS BLOB) FROM events WHERE seq = ?"

_LEAF_PREFIX = hashlib.sha256(b"\x00")


class SqliteEvidence:
    """The tree and checkpoints of one `SqliteLog`; every method runs under its lock.

    `add` takes each folded row's bytes, `sync` puts them in the tree; `cut` signs the
    tree inside an append's transaction; `rollback` undoes the leaves of a failed one.
    """

    def __init__(self, location: str) -> None:
        self.location = location
        self.tree = MerkleTree()
        self.signer: NoteSigner | None = None
        self.origin: str | None = None
        self._pending = bytearray()
        self._cutter: tuple[NoteSigner, str, CheckpointSigner] | None = None

    # Kept as the log folds

    def add(self, record: bytes) -> None:
        h = _LEAF_PREFIX.copy()
        h.update(record)
        self._pending += h.digest()

    def sync(self) -> None:
        if self._pending:
            self.tree.extend_packed(self._pending)
            self._pending = bytearray()

    def extend(self, records: Iterable[bytes]) -> None:
        for record in records:
            self.tree.append(leaf_hash(record))

    def rollback(self, size: int) -> None:
        self._pending = bytearray()
        if self.tree.size > size:
            self.tree.truncate(size)

    # Storage

    def create(self, conn: sqlite3.Connection) -> None:
        """The tables and the log's origin, in the writer's open transaction."""
        for statement in _SCHEMA:
            conn.execute(statement)
        if self.load(conn) is None:
            origin = f"{ORIGIN_PREFIX}{uuid.uuid4()}"
            conn.execute("INSERT INTO evidence (name, value) VALUES ('origin', ?)", (origin,))
            self.origin = origin

    def load(self, conn: sqlite3.Connection) -> str | None:
        """The log's origin, once a writer made it (None before)."""
        if self.origin is None and conn.execute(_HAS_TABLES).fetchone()[0]:
            row = conn.execute(_ORIGIN).fetchone()
            if row is not None:
                self.origin = _origin_text(row[0], self.location)
        return self.origin

    @property
    def signing(self) -> bool:
        """Whether `cut` signs a checkpoint (a signing key, and the tables exist)."""
        return self.signer is not None and self.origin is not None

    def cut(self, cursor: sqlite3.Cursor) -> None:
        """Sign the tree as it stands and store the note, in the open transaction; nothing
        without a signing key or before the tables exist."""
        if not self.signing:
            return
        signer, origin = self.signer, self.origin
        assert signer is not None and origin is not None  # `signing` says so
        cutter = self._cutter
        if cutter is None or cutter[0] is not signer or cutter[1] != origin:
            cutter = self._cutter = (signer, origin, CheckpointSigner(origin, signer))
        tree = self.tree
        cursor.execute(_INSERT, (tree.size, cutter[2].sign(tree.size, tree.root())))

    def latest(self, conn: sqlite3.Connection, size: int | None = None) -> tuple[int, str]:
        """(size, note) of the latest checkpoint, or of the one of `size`."""
        self.load(conn)
        if self.origin is None:
            raise NoCheckpointError(
                f"log {self.location}: no signed checkpoint: no writer with a signing key "
                "has committed to it (see `memstream keys init`, `memstream checkpoint`)"
            )
        row = conn.execute(_LATEST if size is None else _AT, () if size is None else (size,))
        found = row.fetchone()
        if found is None:
            if size is None:
                raise NoCheckpointError(
                    f"log {self.location}: no signed checkpoint yet: a writer with a signing "
                    "key cuts one at each commit, or `memstream checkpoint` now"
                )
            raise NoCheckpointError(f"log {self.location}: no signed checkpoint of size {size}")
        return int(found[0]), note_text(found[1], f"log {self.location}: checkpoint")

    def _checked(self, conn: sqlite3.Connection, size: int | None) -> tuple[Checkpoint, str]:
        """A stored checkpoint that this log's records agree with (signature unchecked)."""
        stored, note = self.latest(conn, size)
        where = f"log {self.location}: checkpoint of size {stored}"
        checkpoint = unsigned_checkpoint(note, where)
        if checkpoint.size != stored:
            raise EvidenceMismatchError(f"{where}: its note says size {checkpoint.size}")
        if checkpoint.origin != self.origin:
            raise EvidenceMismatchError(
                f"{where}: its origin is {checkpoint.origin!r}, the log's is {self.origin!r}"
            )
        if stored > self.tree.size:
            raise EvidenceMismatchError(
                f"{where}: the log holds only {self.tree.size} records: seq "
                f"{self.tree.size} to {stored - 1} are missing; run `memstream verify`"
            )
        if self.tree.root(stored) != checkpoint.root:
            raise EvidenceMismatchError(
                f"{where}: the log's records disagree with it: the log was altered; run "
                "`memstream verify` to find the first altered seq"
            )
        return checkpoint, note

    # Proofs

    def prove(self, conn: sqlite3.Connection, seq: int, size: int | None = None) -> InclusionProof:
        """An inclusion proof of record `seq` against the latest checkpoint (or the one of
        `size`)."""
        if type(seq) is not int or seq < 0:
            raise ProofRangeError(f"log {self.location}: seq {seq!r}: a seq is an int >= 0")
        head = self.tree.size - 1
        if seq > head:
            last = "the log is empty" if head < 0 else f"the last seq is {head}"
            raise ProofRangeError(f"log {self.location}: seq {seq} is past the head ({last})")
        checkpoint, note = self._checked(conn, size)
        if seq >= checkpoint.size:
            raise NoCheckpointError(
                f"log {self.location}: seq {seq} is not covered by the checkpoint of size "
                f"{checkpoint.size} yet (a writer with a signing key cuts one at each commit, "
                "or `memstream checkpoint`)"
            )
        row = conn.execute(_LEAF, (seq,)).fetchone()
        data = None if row is None else row[0]
        if type(data) is not bytes or leaf_hash(data) != self.tree.leaf(seq):
            raise EvidenceMismatchError(
                f"log {self.location}: seq {seq}: the stored record changed after it was "
                "read: the log was altered; run `memstream verify`"
            )
        return InclusionProof(
            note, seq, data, tuple(self.tree.inclusion_proof(seq, checkpoint.size))
        )

    def consistency(
        self, conn: sqlite3.Connection, old_size: int, new_size: int | None = None
    ) -> ConsistencyProof:
        """A consistency proof from the tree of `old_size` records to the checkpoint of
        `new_size` (the latest when None)."""
        for name, value in (("old_size", old_size), ("new_size", new_size)):
            if value is not None and (type(value) is not int or value < 0):
                raise ProofRangeError(f"log {self.location}: {name} {value!r}: an int >= 0")
        if new_size is not None and new_size > self.tree.size:
            raise ProofRangeError(
                f"log {self.location}: new_size {new_size}: the log holds {self.tree.size} records"
            )
        checkpoint, note = self._checked(conn, new_size)
        if old_size > checkpoint.size:
            raise ProofRangeError(
                f"log {self.location}: old_size {old_size} is past the checkpoint's size "
                f"{checkpoint.size}"
            )
        old_note = None
        if 0 < old_size < checkpoint.size:
            found = conn.execute(_AT, (old_size,)).fetchone()
            if found is not None:
                old_note = note_text(found[1], f"log {self.location}: checkpoint")
        elif old_size == checkpoint.size:
            old_note = note
        return ConsistencyProof(
            note,
            old_size,
            self.tree.root(old_size),
            old_note,
            tuple(self.tree.consistency_proof(old_size, checkpoint.size)),
        )


def _origin_text(raw: object, location: str) -> str:
    if type(raw) is not bytes or len(raw) > 1024:
        raise EvidenceMismatchError(f"log {location}: the stored origin is damaged")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise EvidenceMismatchError(f"log {location}: the stored origin is damaged") from None


# Verification: an auditor's read of the file, without folding it.


def _connect_read_only(path: Path, location: str) -> sqlite3.Connection:
    file = path / _LOG_FILE
    if not file.is_file():
        raise LogNotFoundError(f"log {location}: no embedded log there ({file} does not exist)")
    try:
        conn = sqlite3.connect(
            "file:" + quote(str(file.resolve())) + "?mode=ro", uri=True, isolation_level=None
        )
        conn.execute("BEGIN")  # one read snapshot for the whole check
        return conn
    except sqlite3.Error as exc:
        raise LogUnavailableError(f"log {location}: verify cannot read it: {exc}") from exc


def _leaves(records: list[tuple[object]]) -> bytes | None:
    """The packed leaf hashes of a run of stored records (None: one is not bytes)."""
    prefix = _LEAF_PREFIX
    out = []
    for (record,) in records:
        h = prefix.copy()
        h.update(record)  # type: ignore[arg-type]  # a NULL raises TypeError: caught below
        out.append(h.digest())
    return b"".join(out)


def _note_at(conn: sqlite3.Connection, size: int) -> object:
    found = conn.execute(_AT, (size,)).fetchone()
    return None if found is None else found[1]


def _rehash(conn: sqlite3.Connection) -> tuple[MerkleTree, str | None]:
    """The tree of the stored records, in seq order; a gap stops it (and says where)."""
    tree = MerkleTree()
    count, low, high = conn.execute("SELECT count(*), min(seq), max(seq) FROM events").fetchone()
    if count == 0 or (low == 0 and high == count - 1):
        # seq is the primary key, so dense: read the records alone, in order.
        cursor = conn.execute("SELECT CAST(record AS BLOB) FROM events ORDER BY seq")
        while rows := cursor.fetchmany(65536):
            try:
                tree.extend_packed(_leaves(rows))  # type: ignore[arg-type]
            except TypeError:
                break  # a record that is not bytes: found below, row by row
        else:
            return tree, None
        tree = MerkleTree()
    packed = bytearray()
    expected = 0
    gap = None
    prefix = _LEAF_PREFIX
    cursor = conn.execute("SELECT seq, CAST(record AS BLOB) FROM events ORDER BY seq")
    while rows := cursor.fetchmany(65536):
        for seq, record in rows:
            if seq != expected or type(record) is not bytes:
                gap = (
                    f"seq {expected} is missing (the next stored record is seq {seq})"
                    if seq != expected
                    else f"seq {seq}: the record is not bytes"
                )
                break
            h = prefix.copy()
            h.update(record)
            packed += h.digest()
            expected += 1
        tree.extend_packed(packed)
        packed = bytearray()
        if gap is not None:
            break
    return tree, gap


def verify_sqlite_log(
    path: str | PathLike[str],
    verifier: NoteVerifier,
    external: Iterable[tuple[str, str]] = (),
    *,
    all_signatures: bool = False,
) -> VerifyReport:
    """Re-hash the embedded log at `path` and check it against its signed checkpoints and
    the `external` ones ((where, note) pairs: checkpoints an auditor kept).

    Every checkpoint relied on has its signature checked by `verifier`, and its origin
    must be the log's: the latest stored one, each external one, and the two that bound
    the first disagreement (found by bisection over the stored sizes). Other stored
    checkpoints' signatures are checked only with `all_signatures` (each costs about as
    much as re-hashing a few hundred records); a forged one that agrees with the records
    proves nothing either way.
    """
    location = str(path)
    conn = _connect_read_only(Path(path), location)
    try:
        evidence = SqliteEvidence(location)
        try:
            origin = evidence.load(conn)
            has_events = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'events'"
            ).fetchone()[0]
            report = VerifyReport(location, origin)
            if has_events:
                tree, gap = _rehash(conn)
            else:
                tree, gap = MerkleTree(), None
            sizes = (
                [row[0] for row in conn.execute("SELECT size FROM checkpoints ORDER BY size")]
                if origin is not None
                else []
            )
        except sqlite3.Error as exc:
            raise LogUnavailableError(f"log {location}: verify cannot read it: {exc}") from exc
        report.size, report.root = tree.size, tree.root()
        report.stored_checkpoints = len(sizes)
        try:
            judge(
                report,
                tree,
                gap,
                sizes,
                verifier,
                list(external),
                all_signatures,
                lambda size: _note_at(conn, size),
            )
        except Found as found:
            report.problem = found.problem
            report.first_bad_seq = found.first_bad_seq
        except sqlite3.Error as exc:
            raise LogUnavailableError(f"log {location}: verify cannot read it: {exc}") from exc
        return report
    finally:
        conn.close()
