"""Provable authorship (issue 15), over both logs: signed records, enrolment, and attacks.

Every attack is written twice: through the producer (refused before anything is appended,
`AuthorshipError`) and straight to the log, bypassing the producer (a row inserted into the
SQLite file, a record produced to the Kafka topic), where the fold makes it a rejection
with its reason and nothing of it becomes state, for the writer, a fresh reader and (on
Kafka) the projector.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from producers.logs.sqlite import LOG_FILE, record_checksum
from producers.memex_log_store import LogGraphs
from producers.memex_store import MemexStore
from producers.memory import Memory
from projector.authorship import AuthorshipError, enrol_record
from projector.record_fold import LogState, Rejection
from schemas.audit import ERASED, Deletion, Message
from schemas.codec import decode_record as decode_record_bytes
from schemas.codec import encode_record, record_id, record_kind
from schemas.evidence.note import NoteSigner
from schemas.graph.items import create_memory_item
from schemas.records import GraphEnvelope, Record
from schemas.signing import sign_record, split_signed

TS = "2026-12-04T10:00:00.000Z"


@dataclass
class Setup:
    location: str
    admin: NoteSigner
    alice: NoteSigner
    bob: NoteSigner
    log_id: str
    raw: Callable[[bytes, Record], None]  # write bytes straight to the log


def _raw_writer(location: str) -> Callable[[bytes, Record], None]:
    if location.startswith("kafka://"):
        from confluent_kafka import Producer

        rest = location[len("kafka://") :]
        bootstrap, _, tail = rest.partition("/")
        topic = tail.partition("?")[0]

        def produce(data: bytes, record: Record) -> None:
            producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
            producer.produce(topic, data, partition=0)
            assert producer.flush(30) == 0

        return produce

    def insert(data: bytes, record: Record) -> None:
        conn = sqlite3.connect(Path(location) / LOG_FILE)
        try:
            (seq,) = conn.execute("SELECT COALESCE(MAX(seq) + 1, 0) FROM events").fetchone()
            conn.execute(
                "INSERT INTO events (seq, id, kind, record, crc) VALUES (?, ?, ?, ?, ?)",
                (seq, record_id(record), record_kind(record), data, record_checksum(seq, data)),
            )
            conn.commit()
        finally:
            conn.close()

    return insert


@pytest.fixture
def signed(memory_location: str) -> Iterator[Setup]:
    admin = NoteSigner.generate("admin:root")
    alice = NoteSigner.generate("agent:alice")
    bob = NoteSigner.generate("agent:bob")
    with Memory(memory_location, agent_key=admin, signed=True, key=False) as memory:
        memory.enrol(alice.verifier)
        memory.enrol(bob.verifier, may=["message", "recall"])
        auth = memory.authorship
        assert auth is not None
        log_id = auth.log_id
    yield Setup(memory_location, admin, alice, bob, log_id, _raw_writer(memory_location))


def _state(location: str) -> LogState:
    with Memory(location, create=False) as reader:
        return reader.log.state()


def _last_rejection(state: LogState) -> Rejection:
    assert state.rejections, "expected a rejection"
    return state.rejections[-1]


def _assert_refused_raw(s: Setup, data: bytes, record: Record, reason: str) -> None:
    """Write `data` straight to the log: a rejection with `reason`, no state from it."""
    before = _state(s.location)
    s.raw(data, record)
    after = _state(s.location)
    assert after.last_seq == (before.last_seq or 0) + 1
    rejection = _last_rejection(after)
    assert rejection.seq == after.last_seq
    assert rejection.error == "AuthorshipError"
    assert reason in rejection.reason, rejection.reason
    # Unchanged: absent, or (a replay) the original at its own seq.
    assert after.memory.get(record.id) == before.memory.get(record.id)  # type: ignore[arg-type]
    assert len(after.memory) == len(before.memory)
    assert len(after.graph.items) == len(before.graph.items)
    assert after.authorship == before.authorship


def _signed(signer: NoteSigner, log_id: str, record: Record) -> bytes:
    return sign_record(signer, log_id, encode_record(record))


def _item_envelope(author: str, item_id: str | None = None) -> GraphEnvelope:
    item = create_memory_item(
        id=item_id or str(uuid.uuid4()),
        scope="team",
        kind="observation",
        content={"v": 1},
        author=author,
        source_kind="observed",
        authority=0.9,
    )
    payload = {"type": "memory.create", "item": item.model_dump(mode="json", exclude_none=True)}
    return GraphEnvelope(
        id=str(uuid.uuid4()), namespace="memory", type="memory.create", ts=TS, payload=payload
    )


# --- what works --------------------------------------------------------------------------------


def test_an_enrolled_agent_appends_signed_records_and_the_log_says_who(signed: Setup) -> None:
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        said = alice.add_message(Message(speaker="ana", content="my cat is Tom", session_id="s"))
        assert said.actor == "agent:alice"  # stamped: a signed record's actor is its signer
        recall, items = alice.recall("cat")
        assert [i.id for i in items] == [said.id] and recall.actor == "agent:alice"
        deletion = alice.delete([said.id], "asked", requested_by="ana")
        assert deletion.actor == "agent:alice"
    state = _state(signed.location)
    assert not state.rejections
    assert state.memory.get(said.id) is not None and said.id in state.memory.deleted
    auth = state.authorship
    assert auth is not None
    assert [(seq, action, name) for seq, action, name, _ in auth.history] == [
        (0, "admin", "admin:root"),
        (1, "enrol", "agent:alice"),
        (2, "enrol", "agent:bob"),
    ]


def test_one_writer_signs_a_transaction_as_another_agent_with_its_key(signed: Setup) -> None:
    """A service appending for several agents (queryd's recall) signs each transaction with
    the key of the agent it acts for (`agent_key=`), whatever key the writer holds."""
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        said = alice.add_message(Message(speaker="ana", content="the cat is Tom"))
    with Memory(signed.location, create=False, key=False) as service:  # holds no key
        with pytest.raises(AuthorshipError, match="not signed"):
            service.recall("cat")
        before = service.log.head()
        # bob's key, naming alice: forged, refused before anything is appended
        with pytest.raises(AuthorshipError):
            service.recall("cat", actor="agent:alice", agent_key=signed.bob)
        assert service.log.head() == before
        recall, items = service.recall("cat", agent_key=signed.bob)
        assert recall.actor == "agent:bob" and [i.id for i in items] == [said.id]
        # the next transaction without one is unsigned again: the key was for that call
        with pytest.raises(AuthorshipError, match="not signed"):
            service.recall("cat")
    state = _state(signed.location)
    assert not state.rejections  # the fold checked bob's signature on his Recall
    assert state.memory.get(recall.id) is not None


def test_every_stored_record_of_a_signed_log_carries_its_signers_signature(signed: Setup) -> None:
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        alice.add_message(Message(speaker="agent:alice", content="hello"))
        records = list(alice.log.records(0, timeout=1))
    signers = [split_signed(data).signer for _, data in records]
    assert signers == ["admin:root", "admin:root", "admin:root", "agent:alice"]


def test_a_log_created_without_signatures_works_unsigned_as_before(memory_location: str) -> None:
    with Memory(memory_location, key=False) as memory:
        m = memory.add_message(Message(speaker="anyone", content="x", actor="whoever"))
        assert m.actor == "whoever" and memory.authorship is None
        with pytest.raises(AuthorshipError, match="does not require signatures"):
            memory.enrol(NoteSigner.generate("agent:x").verifier)
        assert len(memory) == 1
    admin = NoteSigner.generate("admin:late")
    with pytest.raises(AuthorshipError, match="only from a log's first record"):
        Memory(memory_location, agent_key=admin, signed=True, key=False)
    with Memory(memory_location, agent_key=admin, key=False) as signer:
        with pytest.raises(AuthorshipError, match="does not require signatures"):
            signer.add_message(Message(speaker="a", content="y"))
    assert len(_state(memory_location).memory) == 1


def test_a_human_quoted_by_an_agent_is_recorded_as_speaker_with_the_agent_as_actor(
    signed: Setup,
) -> None:
    with Memory(signed.location, agent_key=signed.bob, key=False) as bob:
        quoted = bob.add_message(Message(speaker="ana@example.com", content="invoice paid"))
    assert (quoted.speaker, quoted.actor) == ("ana@example.com", "agent:bob")


# --- attacks: each through the producer and straight to the log ----------------------------------


def test_forged_actor(signed: Setup) -> None:
    forged = Message(speaker="agent:alice", content="I'm bob", actor="agent:bob")
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        with pytest.raises(AuthorshipError, match="actor 'agent:bob' is not its signer"):
            alice.add_message(forged)
        assert alice.log.state().memory.get(forged.id) is None
    data = _signed(signed.alice, signed.log_id, forged)
    _assert_refused_raw(signed, data, forged, "actor 'agent:bob' is not its signer 'agent:alice'")


@pytest.mark.parametrize("field", ["speaker", "requested_by", "author"])
def test_forged_speaker_requester_or_author_naming_another_agent(signed: Setup, field: str) -> None:
    record: Record
    if field == "speaker":
        record = Message(speaker="agent:bob", content="bob said so", actor="agent:alice")
    elif field == "requested_by":
        with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
            target = alice.add_message(Message(speaker="ana", content="to delete"))
        record = Deletion(
            targets=(target.id,), reason="r", requested_by="admin:root", actor="agent:alice"
        )
    else:
        record = _item_envelope("agent:bob")
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        with pytest.raises(AuthorshipError, match="names another identity of this log"):
            alice.log.append([record])
    _assert_refused_raw(
        signed,
        _signed(signed.alice, signed.log_id, record),
        record,
        f"{field} '{'admin:root' if field == 'requested_by' else 'agent:bob'}' names another "
        "identity of this log",
    )


def test_a_record_signed_by_a_revoked_key(signed: Setup) -> None:
    with Memory(signed.location, agent_key=signed.admin, key=False) as admin:
        revoked_at = admin.revoke("agent:alice", "laptop lost")
    record = Message(speaker="agent:alice", content="after revocation", actor="agent:alice")
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        with pytest.raises(AuthorshipError, match=f"revoked at seq {revoked_at}"):
            alice.add_message(record)
    _assert_refused_raw(
        signed,
        _signed(signed.alice, signed.log_id, record),
        record,
        f"signed by 'agent:alice', whose key was revoked at seq {revoked_at}",
    )


def test_a_replayed_signed_record(signed: Setup) -> None:
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        original = alice.add_message(Message(speaker="ana", content="pay 10 EUR"))
        records = dict(alice.log.records(original.seq, timeout=1))  # type: ignore[arg-type]
    data = records[original.seq]
    _assert_refused_raw(signed, data, original, "replayed: this event is in the log already")
    # An envelope replayed (an update would apply twice)
    envelope = _item_envelope("agent:alice")
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        alice.log.append([envelope])
    env_data = _signed(signed.alice, signed.log_id, envelope)
    _assert_refused_raw(signed, env_data, envelope, "replayed: this envelope is in the log")


def test_a_replayed_signed_record_under_a_new_id(signed: Setup) -> None:
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        original = alice.add_message(Message(speaker="ana", content="pay 10 EUR"))
        data = dict(alice.log.records(original.seq, timeout=1))[original.seq]  # type: ignore[arg-type]
    parts = split_signed(data)
    copy = original.model_copy(update={"id": uuid.uuid4(), "seq": None})
    head = data[: len(data) - len(parts.inner)]  # the old signature, over the old bytes
    forged = head + encode_record(copy)
    _assert_refused_raw(signed, forged, copy, "the signature of 'agent:alice' does not verify")


def test_an_unsigned_record_on_a_signed_log(signed: Setup) -> None:
    record = Message(speaker="agent:alice", content="unsigned", actor="agent:alice")
    with Memory(signed.location, key=False) as anonymous:
        with pytest.raises(AuthorshipError, match="not signed, on a log that requires"):
            anonymous.add_message(record)
    _assert_refused_raw(
        signed, encode_record(record), record, "not signed, on a log that requires signatures"
    )


def test_a_badly_signed_record(signed: Setup) -> None:
    record = Message(speaker="agent:alice", content="tampered", actor="agent:alice")
    data = _signed(signed.alice, signed.log_id, record)
    altered = data.replace(b"tampered", b"tamperee")  # one letter of the content, after signing
    assert altered != data
    _assert_refused_raw(signed, altered, record, "does not verify")
    # Bytes no decoder would read: the signature is checked first, and refuses them.
    broken = bytearray(data)
    broken[-1] ^= 0xFF
    _assert_refused_raw(signed, bytes(broken), record, "does not verify")
    # A signature over the right bytes, but by a key that is not the one enrolled.
    impostor = NoteSigner.generate("agent:alice")
    other = Message(speaker="agent:alice", content="impostor", actor="agent:alice")
    _assert_refused_raw(signed, _signed(impostor, signed.log_id, other), other, "not the key")
    # The right key, signed for another log.
    third = Message(speaker="agent:alice", content="another log", actor="agent:alice")
    _assert_refused_raw(
        signed, _signed(signed.alice, str(uuid.uuid4()), third), third, "does not verify"
    )
    # A key never enrolled.
    mallory = NoteSigner.generate("agent:mallory")
    fourth = Message(speaker="agent:mallory", content="hi", actor="agent:mallory")
    _assert_refused_raw(
        signed, _signed(mallory, signed.log_id, fourth), fourth, "not enrolled on this log"
    )


def test_a_non_admin_enrolling_itself(signed: Setup) -> None:
    mallory = NoteSigner.generate("agent:mallory")
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        with pytest.raises(AuthorshipError, match="not an admin of this log"):
            alice.enrol(mallory.verifier)
    record = enrol_record(mallory.verifier, None, str(uuid.uuid4()), TS)
    _assert_refused_raw(
        signed,
        _signed(signed.alice, signed.log_id, record),
        record,
        "signed by 'agent:alice', who is not an admin of this log",
    )
    # ... nor with its own key, unenrolled.
    again = enrol_record(mallory.verifier, None, str(uuid.uuid4()), TS)
    _assert_refused_raw(
        signed, _signed(mallory, signed.log_id, again), again, "not enrolled on this log"
    )


def test_an_agent_beyond_what_it_may_append(signed: Setup) -> None:
    envelope = _item_envelope("agent:bob")
    with Memory(signed.location, agent_key=signed.bob, key=False) as bob:
        with pytest.raises(AuthorshipError, match="may append"):
            bob.log.append([envelope])
    _assert_refused_raw(signed, _signed(signed.bob, signed.log_id, envelope), envelope, "not graph")


def test_the_producer_refuses_without_appending_anything(signed: Setup) -> None:
    before = _state(signed.location).last_seq
    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        for bad in (
            Message(speaker="a", content="x", actor="agent:bob"),
            Message(speaker="agent:bob", content="x"),
        ):
            with pytest.raises(AuthorshipError):
                alice.add_message(bad)
    assert _state(signed.location).last_seq == before


# --- Kafka: the projector, its snapshot, a reader hydrated from it ------------------------------


@pytest.mark.kafka
def test_the_projector_and_readers_hydrated_from_its_snapshot_check_authorship(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    from projector.service import Projector

    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    admin = NoteSigner.generate("admin:root")
    alice = NoteSigner.generate("agent:alice")
    with Memory(location, agent_key=admin, signed=True) as memory:
        memory.enrol(alice.verifier)
        auth = memory.authorship
        assert auth is not None
    raw = _raw_writer(location)
    forged = Message(speaker="x", content="forged", actor="agent:bob")
    raw(_signed(alice, auth.log_id, forged), forged)
    with Memory(location, agent_key=alice) as writer:
        kept = writer.add_message(Message(speaker="ana", content="kept"))
    state = Projector(location).run(until_caught_up=True)
    assert [(r.seq, r.error) for r in state.rejections] == [(2, "AuthorshipError")]
    assert [e.content for e in state.memory.events] == ["kept"]  # type: ignore[union-attr]
    assert state.authorship is not None and "agent:alice" in state.authorship.agents
    # A reader hydrates from the snapshot: the enrolment state comes with it, so a revoked
    # key after the snapshot is refused and an enrolled one accepted.
    with Memory(location, agent_key=admin) as memory:
        revoked_at = memory.revoke("agent:alice")
    late = Message(speaker="ana", content="late", actor="agent:alice")
    raw(_signed(alice, auth.log_id, late), late)
    with Memory(location, create=False) as reader:
        fresh = reader.log.state()
        assert fresh.authorship is not None
        assert fresh.authorship.agents["agent:alice"].revoked_seq == revoked_at
        assert [r.seq for r in fresh.rejections] == [2, revoked_at + 1]
        assert "revoked at seq" in fresh.rejections[-1].reason
        assert fresh.memory.get(kept.id) is not None and fresh.memory.get(late.id) is None
    again = Projector(location).run(until_caught_up=True)  # resumes from its snapshot
    assert list(again.rejections) == list(fresh.rejections)
    assert again.authorship == fresh.authorship
    with Memory(location, create=False) as reader:
        types = [r.envelope.type for r in reader.lifecycle(0, timeout=5)]
    assert types == [
        "log.signed",
        "agent.enrolled",
        "record.rejected",
        "message.appended",
        "agent.revoked",
        "record.rejected",
    ]


def test_the_graph_api_writes_signed_envelopes_on_an_agents_log(signed: Setup) -> None:
    from producers.memex_store import MemexStore

    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        store = MemexStore.open(alice.log)  # type: ignore[arg-type]
        item = store.create(
            scope="team",
            kind="observation",
            content={"v": 1},
            author="agent:alice",
            source_kind="observed",
            authority=0.9,
        )
        with pytest.raises(AuthorshipError, match="author 'agent:bob' names another identity"):
            store.create(
                scope="team",
                kind="observation",
                content={"v": 2},
                author="agent:bob",
                source_kind="observed",
                authority=0.9,
            )
    state = _state(signed.location)
    assert list(state.graph.items) == [item.id] and not state.rejections


def test_an_auditor_verifies_authorship_from_the_log_and_the_admin_keys(signed: Setup) -> None:
    from producers.authorship import verify_authorship

    with Memory(signed.location, agent_key=signed.alice, key=False) as alice:
        alice.add_message(Message(speaker="ana", content="kept"))
    forged = Message(speaker="x", content="forged", actor="agent:bob")
    signed.raw(_signed(signed.alice, signed.log_id, forged), forged)
    report = verify_authorship(signed.location, [signed.admin.verifier])
    assert report.ok and report.signed and report.admins_match is True
    assert report.size == 5 and report.signed_records == 4
    assert [(r.seq, r.error) for r in report.refused] == [(4, "AuthorshipError")]
    assert "actor 'agent:bob' is not its signer" in report.refused[0].reason
    other = verify_authorship(signed.location, [signed.alice.verifier])
    assert not other.ok and other.admins_match is False
    assert "not the ones given" in (other.problem or "")


def test_a_signed_encrypted_log_seals_then_signs_and_erases(memory_location: str) -> None:
    """Signing (issue 15) and sealing (issue 14) on one log: the stored bytes are the sealed
    record signed by its writer; readers open it; an erasure by an enrolled agent is folded
    and the erased content reads as erased, for the writer and for a fresh reader."""
    admin = NoteSigner.generate("admin:root")
    alice = NoteSigner.generate("agent:alice")
    with Memory(memory_location, agent_key=admin, signed=True, encrypt=True) as memory:
        memory.enrol(alice.verifier)
    with Memory(memory_location, agent_key=alice) as writer:
        card = writer.add_message(Message(speaker="ana", content="card 4111", session_id="ana"))
        kept = writer.add_message(Message(speaker="bo", content="tea", session_id="bo"))
        records = list(writer.log.records(0, timeout=1))
        signed = split_signed(records[-1][1])
        assert signed.signer == "agent:alice"
        stored = decode_record_bytes(signed.inner)
        assert stored.content.startswith("msenc2:")  # type: ignore[union-attr]
        item = MemexStore(backend=LogGraphs(writer.log)).create(
            scope="ana",
            kind="fact",
            content={"text": "ana's card 4111"},
            author="agent:alice",
            source_kind="user_explicit",
            authority=0.5,
        )
        erasure = writer.erase("ana", "asked", requested_by="ana")
        assert erasure.erased == (card.id,) and erasure.actor == "agent:alice"
    with Memory(memory_location, create=False) as reader:
        state = reader.log.state()
        assert not state.rejections, state.rejections
        assert reader.get(card.id).content == ERASED  # type: ignore[union-attr]
        assert reader.get(kept.id).content == "tea"  # type: ignore[union-attr]
        # the graph half of the receipt, signed too, and folded
        assert state.graph.items[item.id].content == {"text": ERASED}
        assert split_signed(list(reader.log.records(0, timeout=1))[-1][1]).signer == "agent:alice"
    # Its receipts (the Erasure, its graph half) are folded, not refused, by the check
    # of authorship as by every reader.
    from producers.authorship import verify_authorship

    report = verify_authorship(memory_location, [admin.verifier])
    assert report.ok and not report.refused, report.refused
    assert report.other_rejections == 0 and report.signed_records == report.size
    if memory_location.startswith("kafka://"):
        from projector.service import Projector

        # The projector folds it (sealed, with the signed Erasure) into a snapshot; a
        # projector resuming from that snapshot (readers of an encrypted log fold the log
        # themselves) holds the same state.
        projected = Projector(memory_location, every_records=1).run(until_caught_up=True)
        assert not projected.rejections and projected.authorship == state.authorship
        assert projected.memory.erasure_of(card.id) is not None
        resumed = Projector(memory_location, every_records=1).run(until_caught_up=True)
        assert not resumed.rejections, resumed.rejections
        assert resumed.authorship == state.authorship
        assert resumed.memory.erasure_of(card.id) is not None


def test_an_admin_key_is_rotated_in_the_log(signed: Setup) -> None:
    """`rotate_admin`: the admin's new key signs from the next seq on; what the old key
    signs after is refused, by the producer (nothing appended) and, written raw, by the
    fold (a rejection); the rotation is in the history; a non-admin cannot rotate."""
    new_admin = NoteSigner.generate("admin:root")
    with Memory(signed.location, agent_key=signed.alice) as alice:
        with pytest.raises(AuthorshipError, match="not an admin"):
            alice.rotate_admin(NoteSigner.generate("admin:root").verifier)
    with Memory(signed.location, agent_key=signed.admin) as old:
        rotated_at = old.rotate_admin(new_admin.verifier)
        before = _state(signed.location)
        with pytest.raises(AuthorshipError, match="replaced since"):
            old.enrol(NoteSigner.generate("agent:carol").verifier)
    assert _state(signed.location).last_seq == before.last_seq  # nothing appended
    with Memory(signed.location, agent_key=new_admin) as new:
        carol_at = new.enrol(NoteSigner.generate("agent:carol").verifier)
        with pytest.raises(AuthorshipError, match="holds this key already"):
            new.rotate_admin(new_admin.verifier)
    late = enrol_record(NoteSigner.generate("agent:dave").verifier, None, str(uuid.uuid4()), TS)
    _assert_refused_raw(signed, _signed(signed.admin, signed.log_id, late), late, "not the key")
    state = _state(signed.location)
    auth = state.authorship
    assert auth is not None and auth.admins["admin:root"] == new_admin.verifier
    assert (rotated_at, "rotate", "admin:root", new_admin.verifier.text()) in auth.history
    assert "agent:carol" in auth.agents and "agent:dave" not in auth.agents
    assert carol_at == rotated_at + 1
