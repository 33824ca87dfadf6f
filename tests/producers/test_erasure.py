"""Erasure by crypto-shredding on the embedded log: what an erase leaves, and what it keeps.

Every test runs against a real SQLite log; the scans read every byte memstream stores for
the log (its directory: the log file, its WAL and shared-memory index, the key table).
"""

from __future__ import annotations

import multiprocessing
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from producers.erasure import RETENTION_REASON, RETENTION_REQUESTER
from producers.logs.sqlite import LOG_FILE, record_checksum
from producers.memory import Memory
from projector.record_fold import fold_log
from schemas.audit import ERASED, Document, Erasure, Message
from schemas.codec import decode_record, encode_record
from schemas.crypto.envelope import parse
from schemas.errors import (
    CorruptLogError,
    EncryptionError,
    RecordTooLargeError,
    UnknownSubjectError,
)
from schemas.evidence.merkle import leaf_hash, root_of
from schemas.limits import MAX_RECORD_BYTES

CARD = "card 4111111111111111 expires 12/29"
SECRET_DOC = "alice lives at 12 Rue Quelconque, Paris"
BOB = "bob likes tea and card games"
T0 = datetime(2027, 1, 1, tzinfo=UTC)


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def _found(path: Path, needle: bytes) -> list[str]:
    return [name for name, data in _files(path).items() if needle in data]


def _stored(path: Path) -> list[tuple[int, bytes]]:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return conn.execute("SELECT seq, record FROM events ORDER BY seq").fetchall()
    finally:
        conn.close()


def _subject_keys(memory: Memory, subject: str) -> list[bytes]:
    keys = memory.log.keys  # type: ignore[attr-defined]
    return [keys.key(keys.shared_key_id(subject))]


def _key_of(memory: Memory, log_dir: Path, seq: int) -> bytes:
    """The key the stored record at `seq` is sealed under."""
    data = dict(_stored(log_dir))[seq]
    key_id = parse(decode_record(data).content).key_id  # type: ignore[union-attr]
    key: bytes = memory.log.keys.key(key_id)  # type: ignore[attr-defined]
    assert key is not None and len(key) == 32
    return key


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "memory-db"


def _alice_and_bob(memory: Memory) -> tuple[Message, Document, Message]:
    card = memory.add_message(Message(speaker="user", content=CARD, session_id="alice"))
    doc = memory.add_document(Document(name="address", text=SECRET_DOC, session_id="alice"))
    bob = memory.add_message(Message(speaker="user", content=BOB, session_id="bob"))
    return card, doc, bob  # type: ignore[return-value]


def test_content_is_stored_sealed_and_read_back_plain(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        card, doc, _ = _alice_and_bob(memory)
        assert memory.get(card.id).content == CARD  # type: ignore[union-attr]
    assert _found(log_dir, b"4111111111111111") == []
    assert _found(log_dir, b"Quelconque") == []
    with Memory(log_dir, create=False) as reader:  # folded from the stored (sealed) bytes
        assert reader.get(card.id).content == CARD  # type: ignore[union-attr]
        assert reader.get(doc.id).text == SECRET_DOC  # type: ignore[union-attr]
        assert [m.id for m in reader.recall("4111111111111111")[1]] == [card.id]


def test_erase_leaves_no_plaintext_and_no_key_in_any_stored_byte(log_dir: Path) -> None:
    memory = Memory(log_dir, encrypt=True)
    card, doc, bob = _alice_and_bob(memory)
    keys = _subject_keys(memory, "alice")
    assert len(keys) == 1 and len(keys[0]) == 32
    # The scan can find a key: before the erasure it is there, in the log's files.
    assert _found(log_dir, keys[0]), "the subject key should be stored before the erasure"

    erasure = memory.erase("alice", "GDPR art. 17 request", requested_by="dpo@example.com")
    # As soon as erase returns, with the log still open (its WAL in use), and after close.
    for when in ("open", "closed"):
        for needle in (keys[0], b"4111111111111111", b"Quelconque", CARD.encode()):
            assert _found(log_dir, needle) == [], f"{needle!r} still stored ({when})"
        wal = log_dir / f"{LOG_FILE}-wal"
        assert not wal.exists() or wal.stat().st_size == 0
        memory.close()
    assert erasure.subject == "alice" and set(erasure.erased) == {card.id, doc.id}
    assert erasure.requested_by == "dpo@example.com"
    # The receipt holds no content.
    receipt = next(data for _, data in _stored(log_dir) if decode_record(data).id == erasure.id)
    # Eight digits of the card, not four: a receipt's ids and hashes are hex, where "4111"
    # turns up by chance (a UUID4's "-4111-" failed this once), "41111111" next to never.
    assert b"41111111" not in receipt and b"Quelconque" not in receipt

    with Memory(log_dir, create=False) as reader:
        assert reader.get(card.id).content == ERASED  # type: ignore[union-attr]
        assert reader.get(doc.id).text == ERASED  # type: ignore[union-attr]
        assert reader.get(bob.id).content == BOB  # type: ignore[union-attr]
        state = reader.replay()
        assert state.erasure_of(card.id) == erasure
        assert "4111111111111111" not in state.index.postings
        assert "quelconque" not in state.index.postings
        assert card.seq not in state.index.words_of
        assert reader.recall("card")[1] == [reader.get(bob.id)]
        assert [m.id for m in state.visible_messages] == [bob.id]
        # Erased content is gone from every view, the past ones too.
        past = reader.replay(up_to_seq=card.seq)
        assert past.get(card.id).content == ERASED  # type: ignore[union-attr]


def test_the_log_bytes_and_merkle_leaves_do_not_change(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        _alice_and_bob(memory)
        before = _stored(log_dir)
        erasure = memory.erase("alice", "asked")
    after = _stored(log_dir)
    assert after[: len(before)] == before  # no stored record changed
    assert root_of(d for _, d in after[: len(before)]) == root_of(d for _, d in before)
    by_id = {decode_record(d).id: d for _, d in before}
    assert erasure.leaf_hashes == tuple(leaf_hash(by_id[i]).hex() for i in erasure.erased)


def test_erase_of_an_unknown_subject_appends_nothing(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        _alice_and_bob(memory)
        memory.erase("alice", "asked")
        head = _stored(log_dir)
        for subject in ("carol", "alice"):  # never known; erased already
            with pytest.raises(UnknownSubjectError, match=f"data subject {subject!r}"):
                memory.erase(subject, "asked")
        with pytest.raises(ValueError, match="reason"):
            memory.erase("bob", "")
        assert _stored(log_dir) == head
        assert memory.get(memory.events()[2].id).content == BOB  # type: ignore[union-attr]


def test_a_log_without_encryption_says_it_cannot_erase(log_dir: Path) -> None:
    with Memory(log_dir) as memory:
        card = memory.add_message(Message(speaker="user", content=CARD, session_id="alice"))
        with pytest.raises(EncryptionError, match="written without encryption.*reencrypt"):
            memory.erase("alice", "asked")
        assert len(memory) == 1 and memory.get(card.id).content == CARD  # type: ignore[union-attr]
    with pytest.raises(EncryptionError, match="holds 1 records written without encryption"):
        Memory(log_dir, encrypt=True)
    with Memory(log_dir) as memory:  # still opens and replays as before
        assert memory.get(card.id).content == CARD  # type: ignore[union-attr]


def _change_sealed(conn: sqlite3.Connection, data: bytes, token: str) -> None:
    """Change one character of the sealed value `token` in the record at seq 0 (`data`),
    written past the append-only trigger with a valid checksum, and close `conn`: what
    someone with the file could do."""
    body = token.rsplit(":", 1)[1]
    forged_body = body[:4] + ("A" if body[4] != "A" else "B") + body[5:]
    forged = data.replace(body.encode(), forged_body.encode())
    conn.execute("DROP TRIGGER events_append_only_u")
    conn.execute(
        "UPDATE events SET record = ?, crc = ? WHERE seq = 0", (forged, record_checksum(0, forged))
    )
    conn.commit()
    conn.close()


def test_a_changed_ciphertext_is_corruption(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        card = memory.add_message(Message(speaker="user", content=CARD, session_id="alice"))
    conn = sqlite3.connect(log_dir / LOG_FILE)
    data = conn.execute("SELECT record FROM events WHERE seq = 0").fetchone()[0]
    token = decode_record(data).content  # type: ignore[union-attr]
    _change_sealed(conn, data, token)
    opens = rf"seq 0: the sealed content does not open.*{card.id}"
    with pytest.raises(CorruptLogError, match=opens):
        Memory(log_dir, create=False)


def test_another_process_sees_the_erasure_and_a_subject_can_come_back(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as writer, Memory(log_dir) as other:
        card, _, _ = _alice_and_bob(writer)
        assert other.get(card.id).content == CARD  # type: ignore[union-attr]  (key cached)
        writer.erase("alice", "asked")
        assert other.get(card.id).content == ERASED  # type: ignore[union-attr]
        # The other connection's cached key of alice is dropped: a new message gets a new key.
        again = other.add_message(
            Message(speaker="user", content="hello again", session_id="alice")
        )
        assert writer.get(again.id).content == "hello again"  # type: ignore[union-attr]
    with Memory(log_dir) as reader:
        assert reader.get(again.id).content == "hello again"  # type: ignore[union-attr]
        assert reader.get(card.id).content == ERASED  # type: ignore[union-attr]


def test_a_writer_that_sealed_for_a_subject_seals_its_next_event_under_a_new_key(
    log_dir: Path,
) -> None:
    """A writer keeps each subject's key ready to seal with (`HeldKeys.sealer`): after the
    subject is erased, here or by another connection, its next event must get a new key,
    never the destroyed one (it would be unreadable at once)."""
    with Memory(log_dir, encrypt=True) as writer, Memory(log_dir) as other:
        first = writer.add_message(Message(speaker="user", content=CARD, session_id="alice"))
        other.add_message(Message(speaker="user", content=BOB, session_id="alice"))
        sealed = [_stored_key_id(log_dir, 0)]
        for eraser in (other, writer):
            eraser.erase("alice", "asked")
            again = writer.add_message(Message(speaker="user", content="back", session_id="alice"))
            assert writer.get(again.id).content == "back"  # type: ignore[union-attr]
            sealed.append(_stored_key_id(log_dir, again.seq))  # type: ignore[arg-type]
        assert writer.get(first.id).content == ERASED  # type: ignore[union-attr]
    assert len(set(sealed)) == 3
    with Memory(log_dir) as reader:
        assert reader.get(again.id).content == "back"  # type: ignore[union-attr]


def _stored_key_id(log_dir: Path, seq: int) -> str:
    conn = sqlite3.connect(log_dir / LOG_FILE)
    try:
        data = conn.execute("SELECT record FROM events WHERE seq = ?", (seq,)).fetchone()[0]
    finally:
        conn.close()
    token = decode_record(data).content  # type: ignore[union-attr]
    return parse(token).key_id


def test_an_event_without_session_is_its_own_subject(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        lone = memory.add_message(Message(speaker="user", content=CARD))
        other = memory.add_message(Message(speaker="user", content=BOB))
        erasure = memory.erase(f"event:{lone.id}", "asked")
        assert erasure.erased == (lone.id,)
        assert memory.get(lone.id).content == ERASED  # type: ignore[union-attr]
        assert memory.get(other.id).content == BOB  # type: ignore[union-attr]


def _key_rows(path: Path) -> list[tuple[str, str, str | None]]:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return conn.execute("SELECT key_id, subject, event_id FROM subject_keys").fetchall()
    finally:
        conn.close()


def _key_bytes(path: Path) -> list[tuple[str, bytes]]:
    conn = sqlite3.connect(path / LOG_FILE)
    try:
        return conn.execute("SELECT key_id, key FROM subject_keys").fetchall()
    finally:
        conn.close()


def test_keys_of_single_events_are_made_ahead_and_seal_one_event_each(log_dir: Path) -> None:
    # Made in batches of 1, 2, 4, ... (at most 64), so 20 appends make at most 31 keys,
    # with no subject stored: the record sealed under one names it.
    with Memory(log_dir, encrypt=True) as memory:
        lone = [memory.add_message(Message(speaker="user", content=f"lone {i}")) for i in range(20)]
    stored = dict(_stored(log_dir))
    named = [parse(decode_record(stored[m.seq]).content).key_id for m in lone]  # type: ignore[union-attr, index]
    rows = _key_rows(log_dir)
    assert len(set(named)) == 20 and set(named) <= {key_id for key_id, _, _ in rows}
    assert 20 <= len(rows) <= 31 and all(row[1:] == ("", "") for row in rows)
    key_of = dict(_key_bytes(log_dir))
    erased_key, kept_key = key_of[named[3]], key_of[named[4]]
    # A key made in a batch sits beside its batch's other keys on one page: the scan must
    # find it before the erasure, and nowhere in any stored byte after.
    assert _found(log_dir, erased_key) and _found(log_dir, kept_key)
    with Memory(log_dir, create=False) as memory:
        memory.erase(f"event:{lone[3].id}", "asked")
        assert [memory.get(m.id).content for m in lone] == [  # type: ignore[union-attr]
            ERASED if i == 3 else f"lone {i}" for i in range(20)
        ]
    assert named[3] not in {key_id for key_id, _, _ in _key_rows(log_dir)}
    assert _found(log_dir, erased_key) == [], "the erased event's key is still stored"
    assert _found(log_dir, b"lone 3") == []
    assert _found(log_dir, kept_key)  # its batch's other keys stay


def test_keys_made_in_a_failed_append_are_never_used(log_dir: Path) -> None:
    # The append seals both messages (making keys ahead in its transaction), then refuses
    # the second as too large: nothing is appended, the keys are rolled back with it, and
    # the next appends must not be sealed under them.
    with Memory(log_dir, encrypt=True) as memory:
        for i in range(3):  # batches of 1 and 2 used up: the failed append makes 4
            memory.add_message(Message(speaker="user", content=f"first {i}"))
        before = _stored(log_dir)
        with pytest.raises(RecordTooLargeError):
            memory.append_many(
                [
                    Message(speaker="user", content="small"),
                    # Within the limit as written, past it once sealed (base64).
                    Message(speaker="user", content="x" * (MAX_RECORD_BYTES * 4 // 5)),
                ]
            )
        assert _stored(log_dir) == before
        kept = [memory.add_message(Message(speaker="user", content=f"kept {i}")) for i in range(8)]
    with Memory(log_dir, create=False) as reader:  # reads every key from the file
        assert [reader.get(m.id).content for m in kept] == [f"kept {i}" for i in range(8)]  # type: ignore[union-attr]


# --- retention, over a clock the test gives ------------------------------------------------


def _retained(memory: Memory) -> tuple[Message, Message, Message]:
    soon = memory.add_message(
        Message(speaker="user", content=CARD, session_id="alice", retain_until=T0)
    )
    later = memory.add_message(
        Message(
            speaker="user",
            content="alice keeps this a year",
            session_id="alice",
            retain_until=T0 + timedelta(days=365),
        )
    )
    kept = memory.add_message(Message(speaker="user", content=BOB, session_id="alice"))
    return soon, later, kept  # type: ignore[return-value]


def test_retention_erases_what_elapsed_alone_and_once(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        soon, later, kept = _retained(memory)
        own_key = _key_of(memory, log_dir, soon.seq)  # type: ignore[arg-type]
        shared_key = _key_of(memory, log_dir, kept.seq)  # type: ignore[arg-type]
        assert own_key != shared_key and _found(log_dir, own_key)
        assert memory.sweep_retention(T0 - timedelta(seconds=1)) == []
        head = _stored(log_dir)
        assert len(head) == 3  # a sweep with nothing due appends nothing
        (erasure,) = memory.sweep_retention(T0)
        assert erasure.erased == (soon.id,) and erasure.subject == "alice"
        assert erasure.reason == RETENTION_REASON
        assert erasure.requested_by == RETENTION_REQUESTER
        assert memory.get(soon.id).content == ERASED  # type: ignore[union-attr]
        assert _found(log_dir, own_key) == [] and _found(log_dir, shared_key)
        assert memory.get(later.id).content == "alice keeps this a year"  # type: ignore[union-attr]
        assert memory.get(kept.id).content == BOB  # type: ignore[union-attr]
        assert memory.sweep_retention(T0 + timedelta(days=1)) == []  # idempotent
        assert len(_stored(log_dir)) == 4
        # A subject's erasure still covers its events with a retention of their own.
        later_key = _key_of(memory, log_dir, later.seq)  # type: ignore[arg-type]
        whole = memory.erase("alice", "asked")
        assert set(whole.erased) == {later.id, kept.id}
        for needle in (shared_key, later_key, b"4111111111111111", b"a year"):
            assert _found(log_dir, needle) == []


def _sweep(path: str, now: str, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with Memory(path) as memory:
        erased = memory.sweep_retention(datetime.fromisoformat(now))
        results.put([str(i) for e in erased for i in e.erased])


def test_sweeps_from_several_processes_erase_each_event_once(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        due = [
            memory.add_message(
                Message(speaker="u", content=f"note {n}", session_id=f"s{n % 3}", retain_until=T0)
            )
            for n in range(12)
        ]
    ctx = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [
        ctx.Process(target=_sweep, args=(str(log_dir), T0.isoformat(), results)) for _ in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    erased = [i for _ in procs for i in results.get(timeout=5)]
    assert sorted(erased) == sorted(str(m.id) for m in due)  # each once, all of them
    with Memory(log_dir, create=False) as reader:
        kinds = [e.kind for e in reader.events()]
        assert kinds.count("erasure") == 3  # one per subject, from whichever sweep won
        assert all(reader.get(m.id).content == ERASED for m in due)  # type: ignore[union-attr]


def test_sealed_values_name_a_key_not_the_subject(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        memory.add_message(Message(speaker="user", content=CARD, session_id="alice-smith"))
    ((_, data),) = _stored(log_dir)
    sealed = parse(decode_record(data).content)  # type: ignore[union-attr]
    assert "alice" not in sealed.key_id


# --- a receipt must tell the truth --------------------------------------------------------


def _forged(target: Message, leaf: str) -> Erasure:
    return Erasure(subject="alice", erased=(target.id,), leaf_hashes=(leaf,), reason="forged")


def test_a_receipt_whose_keys_live_or_whose_hashes_lie_is_refused(log_dir: Path) -> None:
    with Memory(log_dir, encrypt=True) as memory:
        card, _, _ = _alice_and_bob(memory)
        stored = dict(_stored(log_dir))
        true_leaf = leaf_hash(stored[card.seq]).hex()  # type: ignore[index]
        with pytest.raises(ValueError, match=f"the key of event {card.id} is not destroyed"):
            memory.append_many([_forged(card, true_leaf)])
        with pytest.raises(ValueError, match=f"is not the leaf hash of event {card.id}"):
            memory.append_many([_forged(card, "0" * 64)])
        assert dict(_stored(log_dir)) == stored
        assert memory.get(card.id).content == CARD  # type: ignore[union-attr]
        assert memory.replay().erasure_of(card.id) is None


def test_an_erasure_on_a_log_without_encryption_is_refused(log_dir: Path) -> None:
    with Memory(log_dir) as memory:
        card = memory.add_message(Message(speaker="user", content=CARD, session_id="alice"))
        leaf = leaf_hash(dict(_stored(log_dir))[0]).hex()
        with pytest.raises(EncryptionError, match="this log is not encrypted"):
            memory.append_many([_forged(card, leaf)])  # type: ignore[arg-type]
        assert len(_stored(log_dir)) == 1
    # The fold every log shares (Kafka's) refuses one that reached a log anyway.
    records = [data for _, data in _stored(log_dir)]
    records.append(encode_record(_forged(card, leaf)))  # type: ignore[arg-type]
    state = fold_log(list(enumerate(records)))
    assert [(r.seq, r.error) for r in state.rejections] == [(1, "EncryptionError")]
    assert state.memory.get(card.id).content == CARD  # type: ignore[union-attr]


def test_content_sealed_in_the_wrapped_form_still_opens_and_erases(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logs written before 4 December hold event content in the wrapped form (``msenc1``,
    a data key per event wrapped by the subject key); the direct form (``msenc2``) came
    after. A log holding both reads each back and erases both with their subject."""
    from producers.keys import cipher
    from schemas.crypto.envelope import seal_wrapped

    with Memory(log_dir, encrypt=True) as memory:
        with monkeypatch.context() as patch:
            patch.setattr(cipher, "seal", seal_wrapped)  # the wrapped form's layout
            old = memory.add_message(Message(speaker="user", content=CARD, session_id="alice"))
        new = memory.add_message(Message(speaker="user", content=SECRET_DOC, session_id="alice"))
    stored = {decode_record(data).id: decode_record(data) for _, data in _stored(log_dir)}
    assert stored[old.id].content.startswith("msenc1:")  # type: ignore[union-attr]
    assert stored[new.id].content.startswith("msenc2:")  # type: ignore[union-attr]
    with Memory(log_dir, create=False) as reader:
        assert reader.get(old.id).content == CARD  # type: ignore[union-attr]
        assert reader.get(new.id).content == SECRET_DOC  # type: ignore[union-attr]
    with Memory(log_dir) as memory:
        erasure = memory.erase("alice", "request", requested_by="dpo")
        assert set(erasure.erased) == {old.id, new.id}  # type: ignore[union-attr]
    with Memory(log_dir, create=False) as reader:
        assert reader.get(old.id).content == ERASED  # type: ignore[union-attr]
        assert reader.get(new.id).content == ERASED  # type: ignore[union-attr]
    for needle in (b"4111111111111111", b"Quelconque"):
        assert _found(log_dir, needle) == []
