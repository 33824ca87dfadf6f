"""The embedded log: an append-only SQLite table, WAL mode, fsync on every commit.

Several processes may append at once: an append takes SQLite's write lock
(BEGIN IMMEDIATE), catches up with what others wrote, checks, then inserts at the next
seq. Processes that find the lock busy wait in line (`producers.logs.writers_line`)
rather than in SQLite's sleeping busy handler: the next in line folds what the holder
commits while it waits and takes the lock as soon as the holder pauses, so the lock
passes from writer to writer without idling and the next writer starts caught up
(`SqliteLog._begin_contended`). Triggers refuse any UPDATE or DELETE, so the table is
append-only even to sqlite3.
Rows hold the record bytes exactly as the Kafka log would (`schemas.codec`), and the state
is the same total fold of them.

An append's own records are folded on a helper thread while its COMMIT waits on the fsync
(sqlite3 lets go of the GIL meanwhile): the fold then costs an append nothing, and the
append still returns only once its commit is durable and folded.

Every record was checked before it was written, so the log is replayed strictly: a stored
row whose seq is not the next one, whose checksum (CRC-32 of its seq and bytes) does not
match, whose id or kind columns disagree with its record, or whose record no longer
decodes or checks is corruption, and raises `CorruptLogError` naming the log and the seq;
the embedded log holds no rejections. The checksum catches damage, not tampering: an edit
that rewrites a record and its checksum together, or removes records from the end, is
caught only by the audit-grade log's signed checkpoints.

Faults of the storage never reach a caller as sqlite3 errors: damage is
`CorruptLogError`; a full disk, read-only media, I/O errors, a lock held too long are
`LogUnavailableError` naming the log, the operation and the cause. A log on read-only
media (an auditor's archive) opens read-only: everything reads, appends are refused.
"""

from __future__ import annotations

import logging
import os
import queue
import sqlite3
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from os import PathLike
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import quote

from producers.keys.cipher import (
    SealedError,
    check_receipt,
    encode_sealed,
    open_record,
)
from producers.keys.sqlite_keys import SqliteKeyStore
from producers.logs.adapters import register_opener
from producers.logs.base import (
    Appended,
    LifecycleRecord,
    StopFlag,
    Transaction,
    prepare,
    sign_encoded,
)
from producers.logs.location import PATH_SCHEME
from producers.logs.low_priority import Cancelled, run_at_low_priority
from producers.logs.signing_key import KeySpec, SigningKeyError, resolve_signer
from producers.logs.sqlite_evidence import SqliteEvidence
from producers.logs.writers_line import WritersLine
from projector.authorship import AuthorshipError
from projector.lifecycle import lifecycle_envelope
from projector.record_fold import (
    FoldResult,
    LogState,
    apply_record,
    check_signed,
    empty_state,
    reject_record,
)
from schemas.codec import MAX_JSON_DEPTH, decode_record, record_id, record_kind
from schemas.errors import (
    CorruptLogError,
    DecodeError,
    EncryptionError,
    LogNotFoundError,
    LogUnavailableError,
    MemstreamError,
)
from schemas.evidence.note import NoteSigner
from schemas.evidence.proof import ConsistencyProof, InclusionProof
from schemas.records import Record
from schemas.signing import SIGNED_MAGIC

__all__ = ["SqliteLog", "LOG_FILE", "record_checksum"]

log = logging.getLogger("memstream.producers.sqlite")

T = TypeVar("T")
LOG_FILE = "log.sqlite3"
_POLL_S = 0.05
# How long an append waits for the write lock another process holds (SQLite's busy
# timeout, and the retries of `_begin_contended`) before LogUnavailableError.
_LOCK_WAIT_S = 60
# A plain BEGIN that took longer than this waited in SQLite's busy handler: the next
# appends take the lock by `_begin_contended`, until it is free this many times in a row.
_CONTENDED_S = 0.0005
_UNCONTENDED_RUN = 64
# The writer next in line (`_begin_contended`) looks for new commits this often, folds
# them at most this often, and takes the lock at the first try this long after it became
# next, even if the holder never paused.
_NEXT_POLL_S = 0.002
_FOLD_EVERY_S = 0.01
_TURN_S = 0.25
# Rows read at a time by a catch-up (`SqliteLog._rows`).
_READ_BATCH = 1000
_INSERT = "INSERT INTO events (seq, id, kind, record, crc) VALUES (?, ?, ?, ?, ?)"
# CAST: a damaged row may hold text that is not UTF-8, which sqlite3 would fail to decode
# without saying where; as bytes every value reaches the checks below.
_ROWS = (
    "SELECT seq, CAST(id AS BLOB), CAST(kind AS BLOB), CAST(record AS BLOB), {crc} "
    "FROM events WHERE seq >= ? ORDER BY seq"
)

# The table's column names, as bytes: a damaged schema may hold text that is not UTF-8.
_COLUMNS = "SELECT CAST(name AS BLOB) FROM pragma_table_info('events') ORDER BY cid"
# SQLite's structural check, its findings as bytes (they may quote damaged text).
_QUICK_CHECK = "SELECT CAST(quick_check AS BLOB) FROM pragma_quick_check(5)"
# The columns of the table now, and before checksums were added.
_SHAPES = ([b"seq", b"id", b"kind", b"record", b"crc"], [b"seq", b"id", b"kind", b"record"])

# No index on id: every read is served by the folded state, and an index would cost a
# second B-tree write on each append. `crc` is the row's checksum (`record_checksum`);
# logs written before it had none, and get the column (NULL in their old rows) from the
# first writer that opens them.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL,
    kind TEXT NOT NULL,
    record BLOB NOT NULL,
    crc INTEGER
);
CREATE TRIGGER IF NOT EXISTS events_append_only_u BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_append_only_d BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the log is append-only'); END;
"""


def record_checksum(seq: int, record: bytes) -> int:
    """The checksum stored beside a record: CRC-32 of its seq (8 bytes, little-endian)
    and its bytes. It finds damage (any burst of up to 32 bits, most others), not
    tampering: anyone who can edit the file can recompute it."""
    return zlib.crc32(record, zlib.crc32(seq.to_bytes(8, "little", signed=True)))


# SQLite's primary result codes (extended codes carry them in their low byte).
_SQLITE_BUSY, _SQLITE_CORRUPT, _SQLITE_NOTADB = 5, 11, 26
_CAUSES = {
    3: "permission denied",
    5: "the log is locked by another connection",
    6: "the log is locked by another connection",
    7: "out of memory",
    8: "the log is on read-only storage",
    10: "the storage failed (I/O error)",
    13: "the disk is full",
    14: "the log's files cannot be opened",
    18: "a record is too large for SQLite",
    23: "permission denied",
}


# sqlite3 raises UnicodeDecodeError for a message of SQLite's it cannot decode: a damaged
# schema is quoted in its error ("malformed database schema (\xeavents)").
_DRIVER_ERRORS = (sqlite3.Error, UnicodeDecodeError)


def _driver_error(
    location: str, operation: str, exc: sqlite3.Error | UnicodeDecodeError
) -> MemstreamError:
    """The memstream error for a sqlite3 error: damage or an unavailable log."""
    if isinstance(exc, UnicodeDecodeError):
        return CorruptLogError(
            f"log {location}: {operation} failed: {LOG_FILE} is damaged (SQLite reported "
            f"text that is not UTF-8: {exc.object[:200]!r})"
        )
    code = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    primary = None if code is None else code & 0xFF
    if primary in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return CorruptLogError(
            f"log {location}: {operation} failed: {LOG_FILE} is damaged ({name}: {exc})"
        )
    cause = _CAUSES.get(primary or 0, "SQLite failed")
    return LogUnavailableError(f"log {location}: {operation} failed: {cause} ({name}: {exc})")


class _Row(NamedTuple):
    seq: int
    id: Any  # bytes as stored (see _ROWS); anything, in a damaged row
    kind: Any
    record: Any
    crc: Any  # an int, or None in rows written before checksums


_KIND_BYTES = {
    kind: kind.encode()
    for kind in ("message", "document", "recall", "deletion", "erasure", "envelope")
}


class _Checker:
    """Checks stored rows in seq order before they are folded (see the module's doc).

    `checksummed` is set by the first row that has a checksum: rows written before
    checksums existed (NULL) may only come before it.
    """

    __slots__ = ("location", "next_seq", "checksummed", "keys")

    def __init__(
        self,
        location: str,
        next_seq: int,
        checksummed: bool = False,
        keys: SqliteKeyStore | None = None,
    ) -> None:
        self.location = location
        self.next_seq = next_seq
        self.checksummed = checksummed
        # An encrypted log's key store: sealed content is opened before the fold.
        self.keys = keys

    def corrupt(self, seq: int, what: str) -> CorruptLogError:
        return CorruptLogError(
            f"log {self.location}: seq {seq}: {what}; the log is corrupt (every record "
            "was checked before it was written)"
        )

    def bytes_of(self, row: _Row) -> bytes:
        """The row's record bytes, once its seq and checksum check."""
        seq = row.seq
        if seq != self.next_seq:
            if seq > self.next_seq:
                raise self.corrupt(self.next_seq, f"missing: the next stored record has seq {seq}")
            raise self.corrupt(seq, f"stored out of order, after seq {self.next_seq - 1}")
        record = row.record
        if type(record) is not bytes:
            raise self.corrupt(seq, f"the record is not bytes but {type(record).__name__}")
        crc = row.crc
        if crc is None:
            if self.checksummed:
                raise self.corrupt(
                    seq,
                    "the checksum is missing after rows that have one (damaged, or "
                    "appended by a memstream from before checksums)",
                )
        elif crc != record_checksum(seq, record):
            raise self.corrupt(seq, "the checksum does not match: the stored bytes changed")
        else:
            self.checksummed = True
        self.next_seq = seq + 1
        return record

    def fold(self, state: LogState, row: _Row) -> FoldResult:
        """The strict fold of the row onto `state` (which ends just before it).

        Writers check every record, so a record that no longer checks is damage, except
        on a signed log (or a signed record on any): a record whose authorship does not
        check (unsigned, badly signed, revoked, replayed, forged names: what writers
        bypassing memstream can put in the file) is a rejection with its reason, as on
        Kafka, never state."""
        data = self.bytes_of(row)
        seq = row.seq
        signer = None
        try:
            if data[:2] == SIGNED_MAGIC:
                record, signer = check_signed(state, seq, data)
            else:
                record = decode_record(data, max_depth=MAX_JSON_DEPTH)
        except AuthorshipError as exc:
            return reject_record(state, seq, exc)
        except DecodeError as exc:
            raise self.corrupt(seq, f"the stored record does not decode: {exc}") from None
        kind = record_kind(record)
        if row.kind != _KIND_BYTES.get(kind):
            raise self.corrupt(seq, f"the kind column says {row.kind!r}, the record is a {kind}")
        if row.id != record_id(record).encode():
            raise self.corrupt(
                seq, f"the id column says {row.id!r}, the record's id is {record_id(record)}"
            )
        if self.keys is not None:
            try:
                record = open_record(self.keys, record)
            except SealedError as exc:
                raise self.corrupt(seq, f"the sealed content does not open: {exc}") from None
        try:
            return apply_record(state, seq, record, erasable=self.keys is not None, signer=signer)
        except AuthorshipError as exc:
            return reject_record(state, seq, exc)
        except Exception as exc:
            raise self.corrupt(seq, f"the stored record no longer checks: {exc}") from None


def _fold_appended(
    state: LogState, first: int, records: list[Record], erasable: bool, signer: str | None
) -> tuple[LogState, list[Appended]]:
    """Fold records a transaction checked against `state` and appends at `first` on."""
    appended: list[Appended] = []
    for seq, record in zip(range(first, first + len(records)), records, strict=True):
        # Checked against this very state, so the strict fold cannot refuse.
        state, lifecycle = apply_record(
            state, seq, record, checked=True, erasable=erasable, signer=signer
        )
        stored = record if record_kind(record) == "envelope" else lifecycle[0].subject
        appended.append(Appended(seq, stored, lifecycle))
    return state, appended


class _FoldThread:
    """A thread that folds an append's records while the appending thread waits on its
    COMMIT's fsync (sqlite3 lets go of the GIL meanwhile).

    `start` hands a job over; `wait` gives its (result, None) or (None, error). One job at
    a time: the log's lock orders its callers.
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._jobs: queue.SimpleQueue[Callable[[], Any] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[Any, BaseException | None]] = queue.SimpleQueue()
        self.thread = threading.Thread(
            target=self._run,
            args=(self._jobs, self._done),
            name="memstream-sqlite-fold",
            daemon=True,
        )
        self.thread.start()

    @staticmethod
    def _run(
        jobs: queue.SimpleQueue[Callable[[], Any] | None],
        done: queue.SimpleQueue[tuple[Any, BaseException | None]],
    ) -> None:
        # Static, holding only the queues: the thread keeps no log alive.
        while (job := jobs.get()) is not None:
            try:
                done.put((job(), None))
            except BaseException as exc:  # handed to the appending thread, which raises it
                done.put((None, exc))

    def start(self, job: Callable[[], Any]) -> None:
        self._jobs.put(job)

    def wait(self) -> tuple[Any, BaseException | None]:
        return self._done.get()

    def stop(self) -> None:
        self._jobs.put(None)


class SqliteLog:
    """A log in `path/log.sqlite3`, folded incrementally into a `LogState`.

    Raises `LogNotFoundError` when `create` is false and there is no log; opening a log
    on storage it cannot write (read-only media) opens it read-only, and its appends
    raise `LogUnavailableError`. Damage raises `CorruptLogError`, from here or later reads.
    """

    def __init__(
        self, path: str | PathLike[str], *, create: bool = True, key: KeySpec = None
    ) -> None:
        self.path = Path(path)
        self.location = str(path)
        file = self.path / LOG_FILE
        if not create and not file.is_file():
            raise LogNotFoundError(
                f"log {self.location}: no embedded log there ({file} does not "
                "exist); only writers create logs"
            )
        # Why appends are refused (None: they are not), and the URI of a read-only open.
        self.read_only: str | None = None
        self._uri: str | None = None
        if not file.is_file():
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise LogUnavailableError(
                    f"log {self.location}: create failed: cannot make {self.path}: "
                    f"{exc.strerror or exc}"
                ) from exc
            if not os.access(self.path, os.W_OK):
                raise LogUnavailableError(
                    f"log {self.location}: create failed: cannot write in {self.path} "
                    "(read-only storage, or no permission)"
                )
        elif not (os.access(self.path, os.W_OK) and os.access(file, os.W_OK)):
            self._open_read_only(file)
        self._lock = threading.RLock()
        # Evidence (sqlite_evidence): the tree as folded; the signing key, found at the
        # first append unless given (`use_signing_key`).
        self.evidence = SqliteEvidence(self.location)
        self._key: KeySpec = key
        self._key_resolved = False
        # The agent key this writer signs its records with (`use_agent_key`), or None.
        self._agent: NoteSigner | None = None
        self._state = empty_state()
        self._data_version = -1
        self._folder: _FoldThread | None = None
        # Other processes may be appending too: take the write lock by `_begin_contended`
        # (a writer starts so, and goes to the plain BEGIN once the lock stays free), in
        # line with the other waiting processes of this path.
        self._contended = True
        self._free_runs = 0
        self._line = WritersLine(self.path)
        self._conn = self._connect()
        try:
            self._rows_sql = self._prepare_table()
            self._check_structure()
            # One cursor for the statements of every append (under the lock), rather than
            # a new one per statement. Each runs to its end, so none holds a read snapshot.
            self._cursor = self._conn.cursor()
            self.keys: SqliteKeyStore | None = None
            if self._rows_sql is not None and SqliteKeyStore.present(self._conn):
                self.keys = SqliteKeyStore(self._conn, self.location)
            self._checker = _Checker(self.location, 0, keys=self.keys)
            self._catch_up()
        except BaseException:
            self._conn.close()
            raise

    def _open_read_only(self, file: Path) -> None:
        """Choose how to read a log this process cannot write (read-only media, or files
        it has no write permission on)."""
        wal = file.with_name(f"{LOG_FILE}-wal")
        shm = file.with_name(f"{LOG_FILE}-shm")
        uri = "file:" + quote(str(file.resolve()))
        try:
            media_read_only = bool(os.statvfs(self.path).f_flag & os.ST_RDONLY)
            pending = wal.is_file() and wal.stat().st_size > 0
        except OSError as exc:
            raise LogUnavailableError(
                f"log {self.location}: open failed: {exc.strerror or exc}"
            ) from exc
        if pending and media_read_only and not shm.is_file():
            # Records may still be in the write-ahead log, which SQLite reads only through
            # its -shm index, and cannot make one here; reading without would drop them.
            raise LogUnavailableError(
                f"log {self.location}: open failed: it is on read-only storage with a "
                f"write-ahead log ({wal.name}) but no {shm.name}, so committed records may "
                "be unreadable here; copy the directory to writable storage to read it"
            )
        if media_read_only and not pending:
            # Nothing can change the file, and all of it is in the main file: SQLite then
            # needs no lock and no -shm file, which it could not create here.
            self._uri = uri + "?immutable=1"
            why = "it is on read-only storage"
        else:
            self._uri = uri + "?mode=ro"
            why = "it is on read-only storage" if media_read_only else "its files are not writable"
        self.read_only = f"the log is opened read-only: {why}"

    def _connect(self) -> sqlite3.Connection:
        try:
            if self._uri is not None:
                return sqlite3.connect(
                    self._uri,
                    uri=True,
                    isolation_level=None,
                    check_same_thread=False,
                    timeout=_LOCK_WAIT_S,
                )
            conn = sqlite3.connect(
                self.path / LOG_FILE,
                isolation_level=None,
                check_same_thread=False,
                timeout=_LOCK_WAIT_S,
            )
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                # FULL: every commit is fsynced before an append returns.
                conn.execute("PRAGMA synchronous=FULL")
                # A checkpoint every 128 pages (default 1000), so the WAL is reused from its
                # start soon: a fresh WAL file grows with every commit until then, and
                # fsyncing a growing file costs about twice fsyncing one overwritten in
                # place. Each checkpoint costs a few fsyncs, a small share of 128 commits.
                conn.execute("PRAGMA wal_autocheckpoint=128")
                # Deleted cells and freed pages are overwritten: a destroyed subject key
                # leaves no copy in the file (erasure; producers.keys.sqlite_keys).
                conn.execute("PRAGMA secure_delete=ON")
            except BaseException:
                conn.close()
                raise
            return conn
        except _DRIVER_ERRORS as exc:
            raise _driver_error(self.location, "open", exc) from exc

    def _prepare_table(self) -> str | None:
        """Create the table (a writer), give an older log its checksum column; the query
        of the rows, or None for a log without a table yet (read-only: nothing to read)."""
        conn = self._conn
        try:
            if self.read_only is None:
                conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA)
                try:
                    columns = self._check_columns(conn)
                    if b"crc" not in columns:
                        conn.execute("ALTER TABLE events ADD COLUMN crc INTEGER")
                    self.evidence.create(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                return _ROWS.format(crc="crc")
            columns = self._check_columns(conn)
            self.evidence.load(conn)
        except _DRIVER_ERRORS as exc:
            raise _driver_error(self.location, "open", exc) from exc
        if not columns:
            return None  # a writer created the file and died before its table
        return _ROWS.format(crc="crc" if b"crc" in columns else "NULL")

    def _check_structure(self) -> None:
        """SQLite's own check of the file's structure, once at open: damage that leaves
        every row readable may still drop rows (a page's cell count changed), which no
        check of the rows could see. It costs a small share of the fold that follows."""
        try:
            problems = self._conn.execute(_QUICK_CHECK).fetchall()
        except _DRIVER_ERRORS as exc:
            raise _driver_error(self.location, "open", exc) from exc
        if problems != [(b"ok",)]:
            found = "; ".join(row[0].decode(errors="replace") for row in problems)
            raise CorruptLogError(
                f"log {self.location}: {LOG_FILE} is damaged (SQLite's quick_check: {found})"
            )

    def _check_columns(self, conn: sqlite3.Connection) -> set[bytes]:
        """The events table's columns (none: no table yet); CorruptLogError unless they
        are this version's or the one's before checksums."""
        names = [row[0] for row in conn.execute(_COLUMNS)]
        if names and names not in _SHAPES:
            raise CorruptLogError(
                f"log {self.location}: the events table of {LOG_FILE} has the columns "
                f"{names}, expected {_SHAPES[0]}: the file is damaged or not a memstream log"
            )
        return set(names)

    def _rows(self, conn: sqlite3.Connection, from_seq: int) -> Iterator[_Row]:
        """Stored rows from `from_seq` on, read `_READ_BATCH` at a time, each batch whole
        before it is handed on: no read transaction stays open while rows are folded,
        which would keep the writers' checkpoints from starting the WAL over (its file
        then grows, and each commit's fsync costs more)."""
        sql = self._rows_sql
        if sql is None:
            return
        sql += f" LIMIT {_READ_BATCH}"
        while True:
            batch = conn.execute(sql, (from_seq,)).fetchall()
            yield from map(_Row._make, batch)
            if len(batch) < _READ_BATCH:
                return
            from_seq = batch[-1][0] + 1

    def _catch_up(self) -> None:
        """Fold what other connections appended since we last looked, checked strictly."""
        try:
            version = self._cursor.execute("PRAGMA data_version").fetchone()[0]
            if version == self._data_version:
                return
            state = self._state
            checker = self._checker
            evidence = self.evidence
            try:
                for row in self._rows(self._conn, state.next_seq):
                    state = checker.fold(state, row).state
                    self._state = state  # what checked so far stays folded
                    evidence.add(row.record)  # bytes: the checker saw to it
            finally:
                evidence.sync()
        except _DRIVER_ERRORS as exc:
            raise _driver_error(self.location, "read", exc) from exc
        except CorruptLogError:
            self._checker = _Checker(
                self.location, self._state.next_seq, checker.checksummed, self.keys
            )
            raise
        self._data_version = version

    def state(self, min_seq: int | None = None) -> LogState:
        with self._lock:
            self._catch_up()
            return self._state

    def _fold_thread(self) -> _FoldThread:
        folder = self._folder
        if folder is None or folder.pid != os.getpid():  # none yet, or a forked child's
            folder = self._folder = _FoldThread()
            weakref.finalize(self, folder.stop)  # a log dropped unclosed stops it too
        return folder

    def transact(
        self, build: Transaction[T], *, agent: NoteSigner | None = None, ask_end: bool = True
    ) -> tuple[list[Appended], T]:
        # `ask_end` changes nothing here: under the write lock the state is the log's end.
        with self._lock:
            if self.read_only is not None:
                raise LogUnavailableError(f"log {self.location}: append refused: {self.read_only}")
            if not self._key_resolved:
                self.use_signing_key(self._key)
            cursor = self._cursor
            try:
                if self._contended:
                    self._catch_up()  # others' records folded before the lock, not under it
                    self._begin_contended(cursor)
                else:
                    started = time.perf_counter()
                    cursor.execute("BEGIN IMMEDIATE")
                    # SQLite's own busy handler slept: another process holds the lock.
                    self._contended = time.perf_counter() - started > _CONTENDED_S
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "append", exc) from exc
            try:
                self._catch_up()
                state = self._state
                erasable = self.keys is not None
                # The caller's errors as-is.
                agent = agent or self._agent
                seal = partial(self._sealed, state) if erasable else None
                records, encoded, value = prepare(
                    state, build, erasable=erasable, agent=agent, seal=seal
                )
                encoded = sign_encoded(agent, state, records, encoded)
                signer = None if agent is None else agent.name
                first = state.next_seq
                try:
                    if len(records) == 1:  # execute: executemany's set-up costs more
                        record, data = records[0], encoded[0]
                        cursor.execute(
                            _INSERT,
                            (
                                first,
                                record_id(record),
                                record_kind(record),
                                data,
                                record_checksum(first, data),
                            ),
                        )
                    else:
                        cursor.executemany(
                            _INSERT,
                            [
                                (
                                    seq,
                                    record_id(record),
                                    record_kind(record),
                                    data,
                                    record_checksum(seq, data),
                                )
                                for seq, record, data in zip(
                                    range(first, first + len(records)),
                                    records,
                                    encoded,
                                    strict=True,
                                )
                            ],
                        )
                    evidence = self.evidence
                    signing = evidence.signing
                    if signing:
                        # The tree takes the bytes just stored, and is signed in this commit.
                        evidence.extend(encoded)
                        evidence.cut(cursor)

                    def fold() -> tuple[LogState, list[Appended]]:
                        if not signing:  # no checkpoint to cut: grown during the fsync
                            evidence.extend(encoded)
                        return _fold_appended(state, first, records, erasable, signer)

                    folder = self._fold_thread()
                    folder.start(fold)
                    try:
                        cursor.execute("COMMIT")  # the fsync; the fold runs meanwhile
                    except BaseException:
                        folder.wait()  # nothing else may fold before this fold is over
                        raise
                except _DRIVER_ERRORS as exc:
                    raise _driver_error(self.location, "append", exc) from exc
            except BaseException:
                self.evidence.rollback(self._state.next_seq)  # the leaves of this append
                self._rollback()
                raise
            folded, error = folder.wait()
            if error is not None:
                # Committed, yet the fold refused a record it had checked (a bug): the
                # next read folds the log's rows as every reader does, so the state still
                # is the log's.
                self._data_version = -1
                self.evidence.rollback(self._state.next_seq)  # the refold re-adds them
                raise error
            # data_version does not move for this connection's own commits, so the
            # next catch-up still sees exactly what others add.
            self._state, appended = folded
            self._checker.next_seq = self._state.next_seq
            self._checker.checksummed = True
            return appended, value

    def _begin_contended(self, cursor: sqlite3.Cursor) -> None:
        """BEGIN IMMEDIATE for a writer that expects others to be appending: at once when
        the lock is free; else in line (`producers.logs.writers_line`) until
        `_LOCK_WAIT_S` have passed.

        Next in line, it folds what the holder commits, and tries the lock every
        `_NEXT_POLL_S` once the holder has paused (no commit since the last poll) or
        `_TURN_S` after it became next: a writer appending without pause keeps the lock
        for a run of appends, and the next one starts caught up. SQLite's own busy
        handler is off meanwhile (busy_timeout 0), and restored whatever happens.
        Appends that find the lock free `_UNCONTENDED_RUN` times in a row go back to the
        plain BEGIN, which costs nothing extra when one process writes. The waiting runs
        in a helper thread at the lowest CPU priority (`_wait_in_line`,
        `producers.logs.low_priority`) while this thread waits for it.
        """
        cursor.execute("PRAGMA busy_timeout=0")
        try:
            busy = self._try_begin(cursor)
            if busy is None:
                self._free_runs += 1
                if self._free_runs >= _UNCONTENDED_RUN:
                    self._contended = False
                    self._free_runs = 0
                return
            self._free_runs = 0
            deadline = time.monotonic() + _LOCK_WAIT_S
            try:
                # The wait runs at the lowest CPU priority, so that it never keeps the
                # holder's threads waiting for a core (`low_priority`).
                run_at_low_priority(
                    partial(self._wait_in_line, cursor, deadline, busy),
                    "memstream-sqlite-waiting",
                )
            except BaseException:
                if self._conn.in_transaction:  # began just as the wait was interrupted
                    cursor.execute("ROLLBACK")
                raise
        finally:
            cursor.execute(f"PRAGMA busy_timeout={_LOCK_WAIT_S * 1000:.0f}")

    def _wait_in_line(
        self,
        cursor: sqlite3.Cursor,
        deadline: float,
        busy: sqlite3.OperationalError,
        cancelled: threading.Event,
    ) -> None:
        """Wait in line, then as the next in line, until BEGIN IMMEDIATE succeeds (see
        `_begin_contended`); `busy` raised at `deadline`, `Cancelled` when `cancelled`."""
        if not self._line.join(deadline, cancelled):
            if cancelled.is_set():
                raise Cancelled(f"log {self.location}: waiting for the write lock was interrupted")
            raise busy
        try:  # next in line
            now = time.monotonic()
            turn_ends = now + _TURN_S
            fold_at = now
            seen = None
            while not cancelled.is_set():
                version = cursor.execute("PRAGMA data_version").fetchone()[0]
                now = time.monotonic()
                if version == seen or now > turn_ends:
                    refused = self._try_begin(cursor)
                    if refused is None:
                        return
                    busy = refused
                if now >= fold_at:
                    self._catch_up()  # what the holder committed, folded while waiting
                    fold_at = now + _FOLD_EVERY_S
                seen = version
                if now > deadline:
                    raise busy
                time.sleep(_NEXT_POLL_S)
            raise Cancelled(f"log {self.location}: waiting for the write lock was interrupted")
        finally:
            self._line.leave()

    @staticmethod
    def _try_begin(cursor: sqlite3.Cursor) -> sqlite3.OperationalError | None:
        """BEGIN IMMEDIATE once: None when it began, SQLite's busy error when another
        connection holds the lock (any other error is raised)."""
        try:
            cursor.execute("BEGIN IMMEDIATE")
            return None
        except sqlite3.OperationalError as exc:
            if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF != _SQLITE_BUSY:
                raise
            return exc

    def _sealed(self, state: LogState, records: list[Record]) -> list[bytes]:
        """An encrypted log's records' stored bytes: content sealed, keys created in this
        transaction (`producers.keys`). A receipt is refused unless it tells the truth:
        the keys of what it names are gone in this transaction, and its leaf hashes are
        those of their stored records."""
        keys = self.keys
        assert keys is not None
        return encode_sealed(
            keys, records, lambda receipt: self._check_receipt(state, receipt), state.graph
        )

    def _check_receipt(self, state: LogState, receipt: Record) -> None:
        assert self.keys is not None
        check_receipt(self.keys, state, receipt, self.stored_records)

    # --- encryption and erasure (producers.keys, producers.erasure) ---------------------

    def enable_encryption(self) -> None:
        """Make this log encrypted: only an empty log may become one (its records would
        otherwise stay readable forever); `EncryptionError` for one holding records."""
        with self._lock:
            if self.keys is not None:
                return
            if self.read_only is not None:
                raise LogUnavailableError(f"log {self.location}: encrypt refused: {self.read_only}")
            try:
                self._cursor.execute("BEGIN IMMEDIATE")
                try:
                    count = self._conn.execute("SELECT count(*) FROM events").fetchone()[0]
                    if count:
                        raise EncryptionError(
                            f"log {self.location}: holds {count} records written without "
                            "encryption, which cannot be erased; copy it into a new "
                            "encrypted log with `memstream reencrypt SRC DST`"
                        )
                    SqliteKeyStore.create(self._conn)
                    self._cursor.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "encrypt", exc) from exc
            self.keys = SqliteKeyStore(self._conn, self.location)
            self._checker.keys = self.keys

    def stored_records(self, seqs: Sequence[int]) -> dict[int, bytes]:
        """The stored bytes of the records at `seqs` (inside a transaction: as of it)."""
        with self._lock:
            found: dict[int, bytes] = {}
            try:
                for seq in seqs:
                    row = self._conn.execute(
                        "SELECT CAST(record AS BLOB) FROM events WHERE seq = ?", (seq,)
                    ).fetchone()
                    if row is not None:
                        found[seq] = row[0]
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "read", exc) from exc
            return found

    def purge(self, attempts: int = 50) -> bool:
        """Leave no earlier copy of deleted bytes (a destroyed key) in the log's files:
        a TRUNCATE checkpoint copies the WAL into the main file (where secure_delete zeroed
        them) and truncates the WAL to zero bytes. A reader holding an old snapshot (another
        connection mid-read) blocks it; retried for a while. True once done."""
        with self._lock:
            for attempt in range(attempts):
                try:
                    busy = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                except _DRIVER_ERRORS as exc:
                    raise _driver_error(self.location, "purge", exc) from exc
                if not busy:
                    return True
                time.sleep(min(0.01 * (attempt + 1), 0.2))
            log.warning("log %s: the WAL could not be truncated (a reader holds it)", self.location)
            return False

    def _rollback(self) -> None:
        # Whatever failed, the next read looks at the log again rather than trusting
        # data_version, so the state is the log's whatever a failed COMMIT left.
        self._data_version = -1
        if self.keys is not None:
            self.keys.forget_all()  # keys created in the rolled back transaction are gone
        if not self._conn.in_transaction:  # a failed COMMIT may have rolled back already
            return
        try:
            self._cursor.execute("ROLLBACK")
        except _DRIVER_ERRORS:
            log.warning("log %s: ROLLBACK failed", self.location, exc_info=True)

    def use_agent_key(self, agent: NoteSigner | None) -> None:
        """Sign every record this writer appends with `agent` (provable authorship)."""
        with self._lock:
            self._agent = agent

    # Evidence (see producers.logs.sqlite_evidence)

    def use_signing_key(self, key: KeySpec) -> None:
        """Sign a checkpoint at each commit with `key` (see `signing_key.resolve_signer`;
        False: sign nothing). `SigningKeyError` for a key that cannot be read."""
        with self._lock:
            self.evidence.signer = resolve_signer(key)
            self._key, self._key_resolved = key, True

    def checkpoint(self) -> str:
        """Cut a signed checkpoint of the log as it stands now (a log written without a
        key, or before checkpoints existed); the signed note."""
        with self._lock:
            if self.read_only is not None:
                raise LogUnavailableError(
                    f"log {self.location}: checkpoint refused: {self.read_only}"
                )
            if not self._key_resolved:
                self.use_signing_key(self._key)
            if self.evidence.signer is None:
                raise SigningKeyError(
                    f"log {self.location}: no signing key to sign a checkpoint with (make "
                    "one with `memstream keys init`, or pass key=)"
                )
            cursor = self._cursor
            try:
                cursor.execute("BEGIN IMMEDIATE")
                try:
                    self._catch_up()
                    self.evidence.cut(cursor)
                    cursor.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise
                return self.evidence.latest(self._conn)[1]
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "checkpoint", exc) from exc

    def latest_checkpoint(self) -> str:
        """The latest signed checkpoint stored in the log (`NoCheckpointError`: none)."""
        with self._lock:
            try:
                return self.evidence.latest(self._conn)[1]
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "read", exc) from exc

    def prove(self, seq: int, size: int | None = None) -> InclusionProof:
        """An inclusion proof of record `seq` against the latest signed checkpoint (or the
        one of `size`)."""
        with self._lock:
            self._catch_up()
            try:
                return self.evidence.prove(self._conn, seq, size)
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "prove", exc) from exc

    def consistency(self, old_size: int, new_size: int | None = None) -> ConsistencyProof:
        """A consistency proof from the tree of `old_size` records to the signed
        checkpoint of `new_size` (the latest when None)."""
        with self._lock:
            self._catch_up()
            try:
                return self.evidence.consistency(self._conn, old_size, new_size)
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "prove", exc) from exc

    def append(self, records: Sequence[Record]) -> list[Appended]:
        """Append records (checked, all or none, one commit)."""
        batch = list(records)
        return self.transact(lambda state: (batch, None))[0]

    def head(self) -> int | None:
        """The seq of the log's last record, folded yet or not (None: an empty log)."""
        with self._lock:
            if self._rows_sql is None:
                return None
            try:
                return self._conn.execute("SELECT max(seq) FROM events").fetchone()[0]
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "read", exc) from exc

    def _follow(
        self, from_seq: int, timeout: float | None, stop: StopFlag | None
    ) -> Iterator[_Row]:
        """Stored rows from `from_seq` on, then new ones, on a connection of their own."""
        conn = self._connect()
        try:
            next_seq = from_seq
            idle_since = time.monotonic()
            while stop is None or not stop.is_set():
                found = False
                try:
                    for row in self._rows(conn, next_seq):
                        yield row
                        next_seq = row.seq + 1
                        found = True
                except _DRIVER_ERRORS as exc:
                    raise _driver_error(self.location, "read", exc) from exc
                if found:
                    idle_since = time.monotonic()
                    continue
                if timeout is not None and time.monotonic() - idle_since >= timeout:
                    return
                time.sleep(_POLL_S)
        finally:
            conn.close()

    def records(
        self, from_seq: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[tuple[int, bytes]]:
        """(seq, bytes) from `from_seq` on, then new ones; CorruptLogError at a damaged row
        (seqs not dense, a checksum that does not match)."""
        checker = _Checker(self.location, from_seq)
        for row in self._follow(from_seq, timeout, stop):
            yield row.seq, checker.bytes_of(row)

    def lifecycle(
        self, from_offset: int = 0, *, timeout: float | None = None, stop: StopFlag | None = None
    ) -> Iterator[LifecycleRecord]:
        """The lifecycle stream, derived by folding the log from seq 0 as strictly as the
        state is (the projector publishes the same stream on Kafka)."""
        state = empty_state()
        checker = _Checker(self.location, 0, keys=self.keys)
        offset = 0
        for row in self._follow(0, timeout, stop):
            state, events = checker.fold(state, row)
            for index, event in enumerate(events):
                if offset >= from_offset:
                    yield LifecycleRecord(offset, row.seq, lifecycle_envelope(event, index))
                offset += 1

    def close(self) -> None:
        with self._lock:
            try:
                self._conn.close()
            except _DRIVER_ERRORS as exc:
                raise _driver_error(self.location, "close", exc) from exc
            finally:
                self._line.close()
                if self._folder is not None:
                    self._folder.stop()
                    self._folder.thread.join()
                    self._folder = None


def _open(location: str | PathLike[str], *, create: bool) -> SqliteLog:
    return SqliteLog(location, create=create)


register_opener(PATH_SCHEME, _open)
