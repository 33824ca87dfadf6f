"""Issue 11, item 13: a corrupted embedded log is never read silently.

Every record in the embedded log was checked before it was written, so a stored record
that no longer decodes or checks is corruption: reopening raises `CorruptLogError` naming
the log and the seq, never a quiet rejection, never a different history.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from producers.logs.sqlite import LOG_FILE, SqliteLog
from producers.memex_log_store import LogGraphs
from producers.memex_store import MemexStore
from producers.memory import Memory
from projector.record_fold import LogState
from schemas.audit import Deletion, Document, Message, Recall
from schemas.codec import decode_record, encode_record, record_id, record_kind
from schemas.errors import CorruptLogError, DecodeError


def _build(path: Path) -> None:
    """A log with every kind of record, deletions among them, closed cleanly."""
    with Memory(path) as memory:
        messages = [
            memory.add_message(
                Message(
                    speaker=f"agent{i % 3}", content=f"message {i} " * 3, session_id=f"s{i % 2}"
                )
            )
            for i in range(30)
        ]
        memory.add_document(Document(name="vet.txt", text="Tom is due in May " * 4))
        memory.recall("message 3")
        memory.delete([m.id for m in messages[5:10]], "user asked", requested_by="ana")
        store = MemexStore(backend=LogGraphs(memory.log))
        a = store.create(
            scope="user:a",
            kind="observation",
            content={"k": [1, {"v": "é"}]},
            author="agent:x",
            source_kind="observed",
            authority=0.9,
        )
        b = store.create(
            scope="user:a",
            kind="hypothesis",
            content={"v": 2},
            parents=[a.id],
            author="agent:y",
            source_kind="agent_inferred",
            authority=0.5,
        )
        store.mark_contradiction(a.id, b.id, "system:detector")
        for i in range(30, 40):
            memory.add_message(Message(speaker="late", content=f"late message {i}"))
    assert not (path / f"{LOG_FILE}-wal").exists()  # all in the main file


def _history(path: Path) -> tuple[LogState, list[tuple[int, bytes]]]:
    log = SqliteLog(path, create=False)
    try:
        return log.state(), list(log.records(0, timeout=0))
    finally:
        log.close()


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LogState, list]:
    path = tmp_path_factory.mktemp("corruption") / "log"
    _build(path)
    state, records = _history(path)
    assert state.last_seq == len(records) - 1 >= 45 and not state.rejections
    assert len(state.memory.deleted) == 5
    return path, state, records


def test_single_byte_flips_are_read_exactly_or_raise(
    original: tuple[Path, LogState, list], tmp_path: Path
) -> None:
    path, state, records = original
    data = (path / LOG_FILE).read_bytes()
    rng = random.Random(20261203)
    outcomes: Counter[str] = Counter()
    silent: list[str] = []
    for trial in range(300):
        copy = tmp_path / f"flip{trial}"
        shutil.copytree(path, copy)
        at = rng.randrange(len(data))
        flipped = bytearray(data)
        flipped[at] ^= rng.randrange(1, 256)
        (copy / LOG_FILE).write_bytes(bytes(flipped))
        try:
            seen_state, seen_records = _history(copy)
        except CorruptLogError as exc:
            assert str(copy) in str(exc), exc  # names the log
            outcomes["corrupt"] += 1
        else:
            if seen_state == state and seen_records == records:
                outcomes["exact"] += 1
            else:
                outcomes["different"] += 1
                silent.append(f"byte {at}: {seen_state!r}")
        shutil.rmtree(copy)
    print(dict(outcomes))
    assert silent == [], silent
    assert outcomes["corrupt"] > 0 and outcomes["exact"] > 0


def _edit(path: Path, *statements: str, args: tuple = ()) -> None:
    """A hand edit with the sqlite3 tool's powers: triggers dropped first."""
    conn = sqlite3.connect(path / LOG_FILE)
    conn.execute("DROP TRIGGER events_append_only_u")
    conn.execute("DROP TRIGGER events_append_only_d")
    for statement in statements:
        conn.execute(statement, args)
    conn.commit()
    conn.close()


@pytest.fixture
def log_copy(original: tuple[Path, LogState, list], tmp_path: Path) -> Path:
    copy = tmp_path / "log"
    shutil.copytree(original[0], copy)
    return copy


@pytest.mark.parametrize(
    ("edit", "seq", "why"),
    [
        ("DELETE FROM events WHERE seq = 7", 7, "missing"),
        (
            "UPDATE events SET record = CAST(replace(CAST(record AS TEXT), 'message 3', "
            "'message 4') AS BLOB) WHERE seq = 3",
            3,
            "checksum",
        ),
        (
            "UPDATE events SET id = '00000000-0000-4000-8000-000000000000' WHERE seq = 12",
            12,
            "id",
        ),
        ("UPDATE events SET kind = 'document' WHERE seq = 2", 2, "kind"),
        ("UPDATE events SET crc = NULL WHERE seq = 20", 20, "checksum"),
    ],
)
def test_a_hand_edited_log_is_refused_naming_the_seq(
    log_copy: Path, edit: str, seq: int, why: str
) -> None:
    _edit(log_copy, edit)
    with pytest.raises(CorruptLogError, match=f"seq {seq}.*{why}") as info:
        Memory(log_copy)
    assert str(log_copy) in str(info.value)


def test_the_next_append_never_reuses_a_deleted_seq(log_copy: Path) -> None:
    # The issue's edit: the deleted messages' Deletion removed, so they would show again.
    with Memory(log_copy) as memory:
        deletion = next(e for e in memory.events() if isinstance(e, Deletion))
        head = memory.log.head()
    _edit(log_copy, "DELETE FROM events WHERE seq = ?", args=(deletion.seq,))
    with pytest.raises(CorruptLogError, match=f"seq {deletion.seq}"):
        Memory(log_copy)
    conn = sqlite3.connect(log_copy / LOG_FILE)
    assert conn.execute("SELECT max(seq) FROM events").fetchone()[0] == head  # nothing added
    conn.close()


def _insert(path: Path, seq: int, record: bytes) -> None:
    """A consistent hand edit: a row whose id, kind and checksum agree with its bytes."""
    from producers.logs.sqlite import record_checksum

    try:
        decoded = decode_record(record)
        id, kind = record_id(decoded), record_kind(decoded)
    except DecodeError:
        id, kind = "x", "message"
    _edit(
        path,
        "INSERT INTO events (seq, id, kind, record, crc) VALUES (?, ?, ?, ?, ?)",
        args=(seq, id, kind, record, record_checksum(seq, record)),
    )


def test_records_that_do_not_decode_or_check_are_corruption_not_rejections(
    original: tuple[Path, LogState, list], tmp_path: Path
) -> None:
    path, state, _ = original
    seq = state.next_seq
    first = state.memory.events[0]
    cases = {
        "garbage": (b"garbage bytes", "does not decode"),
        "duplicate": (encode_record(first.model_copy(update={"seq": None})), "already in the log"),
        "unknown target": (
            encode_record(Recall(query="q", recalled=(Message(speaker="z", content="z").id,))),
            "recalled",
        ),
    }
    for name, (record, why) in cases.items():
        copy = tmp_path / name
        shutil.copytree(path, copy)
        _insert(copy, seq, record)
        with pytest.raises(CorruptLogError, match=f"seq {seq}: .*{why}"):
            SqliteLog(copy, create=False)


def test_sqlite_own_corruption_errors_are_corrupt_log_errors(log_copy: Path) -> None:
    (log_copy / LOG_FILE).write_bytes(b"this is not a database" * 100)
    with pytest.raises(CorruptLogError, match=str(log_copy)):
        Memory(log_copy)


def test_corruption_met_while_following_raises_too(log_copy: Path) -> None:
    with Memory(log_copy) as memory:
        follower = memory.subscribe(timeout=2)
        assert next(follower).seq == 0
        seq = memory.log.head() + 1  # type: ignore[operator]
        _insert(log_copy, seq, b"garbage bytes")
        with pytest.raises(CorruptLogError, match=f"seq {seq}"):
            memory.log.state()
        with pytest.raises(CorruptLogError, match=f"seq {seq}"):
            memory.add_message(Message(speaker="a", content="refused"))
        with pytest.raises(CorruptLogError, match=f"seq {seq}"):
            list(follower)
        with pytest.raises(CorruptLogError, match=f"seq {seq}"):
            list(memory.lifecycle(0, timeout=1))


def test_a_page_that_lost_its_last_cells_is_found(tmp_path: Path) -> None:
    # One byte, a leaf page's cell count, drops the page's last rows with every row left
    # readable: on the last page that is the log's tail, which no check of the rows sees.
    path = tmp_path / "log"
    with Memory(path) as memory:
        for i in range(300):
            memory.add_message(Message(speaker="a", content=f"message {i} " * 5))
    state, records = _history(path)
    data = (path / LOG_FILE).read_bytes()
    leaves = 0
    for page in range(len(data) // 4096):
        at = page * 4096 + (100 if page == 0 else 0)
        if data[at] != 0x0D or page == 0:  # a table leaf; page 1 is the schema's
            continue
        leaves += 1
        cells = int.from_bytes(data[at + 3 : at + 5], "big")
        for fewer in range(1, min(cells, 2) + 1):  # the evidence tables hold 0 or 1 rows
            damaged = bytearray(data)
            damaged[at + 3 : at + 5] = (cells - fewer).to_bytes(2, "big")
            copy = tmp_path / f"page{page}-{fewer}"
            copy.mkdir()
            (copy / LOG_FILE).write_bytes(bytes(damaged))
            with pytest.raises(CorruptLogError, match=str(copy)):
                _history(copy)
    assert leaves > 5


def test_a_log_written_before_checksums_reads_and_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "old"
    path.mkdir()
    old = [Message(speaker="a", content=f"old {i}") for i in range(3)]
    conn = sqlite3.connect(path / LOG_FILE)
    conn.executescript(
        "PRAGMA journal_mode=WAL; CREATE TABLE events (seq INTEGER PRIMARY KEY, "
        "id TEXT NOT NULL, kind TEXT NOT NULL, record BLOB NOT NULL);"
    )
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?, ?)",
        [(seq, str(m.id), m.kind, encode_record(m)) for seq, m in enumerate(old)],
    )
    conn.commit()
    conn.close()
    with Memory(path) as memory:
        assert [e.content for e in memory.events()] == ["old 0", "old 1", "old 2"]  # type: ignore[union-attr]
        memory.add_message(Message(speaker="a", content="new"))
    conn = sqlite3.connect(path / LOG_FILE)
    assert [row[0] is None for row in conn.execute("SELECT crc FROM events ORDER BY seq")] == [
        True,
        True,
        True,
        False,
    ]
    conn.close()
    _edit(path, "UPDATE events SET record = record || x'00' WHERE seq = 3")
    with pytest.raises(CorruptLogError, match="seq 3: the checksum does not match"):
        Memory(path)
