"""`Memory` (seed 001) over every location: writing, reading, the seven invariants."""

from __future__ import annotations

from uuid import uuid4

import pytest
from pydantic import ValidationError

from memstream import Deletion, Document, Memory, Message, Recall, replay, search


@pytest.fixture
def memory(memory_location: str):  # type: ignore[no-untyped-def]
    with Memory(memory_location) as m:
        yield m


def _snapshot(memory: Memory) -> list:
    return [e.model_dump() for e in memory.events()]


def test_add_returns_stored_copies_with_seq_from_zero(memory: Memory) -> None:
    message = Message(speaker="ana", content="hello")
    stored = memory.add_message(message)
    assert stored.seq == 0 and message.seq is None
    assert stored.model_copy(update={"seq": None}) == message
    document = memory.add_document(Document(name="a.txt", text="body"))
    assert document.seq == 1
    recall = memory.record_recall(Recall(query="q", recalled=(stored.id, document.id)))
    assert recall.seq == 2
    deletion = memory.delete([stored.id], "gdpr", requested_by="dpo", session_id="s")
    assert isinstance(deletion, Deletion)
    assert (deletion.seq, deletion.targets, deletion.reason) == (3, (stored.id,), "gdpr")
    assert (deletion.requested_by, deletion.session_id) == ("dpo", "s")
    assert len(memory) == 4


def test_seq_strictly_increases_and_survives_reopen(memory_location: str) -> None:
    with Memory(memory_location) as m:
        seqs = [m.add_message(Message(speaker="a", content=f"m{i}")).seq for i in range(5)]
    assert seqs == [0, 1, 2, 3, 4]
    with Memory(memory_location) as m:
        assert len(m) == 5
        assert m.add_message(Message(speaker="a", content="after")).seq == 5
        assert [e.seq for e in m.events()] == list(range(6))


def test_appending_an_event_with_a_seq_raises_and_appends_nothing(memory: Memory) -> None:
    stored = memory.add_message(Message(speaker="a", content="b"))
    before = _snapshot(memory)
    with pytest.raises(ValueError, match="already has seq 0"):
        memory.add_message(stored)
    with pytest.raises(ValueError, match="seq"):
        memory.add_document(Document(name="n", text="t", seq=9))
    assert _snapshot(memory) == before


def test_the_same_event_cannot_be_appended_twice(memory: Memory) -> None:
    message = Message(speaker="a", content="b")
    memory.add_message(message)
    with pytest.raises(ValueError, match=str(message.id)):
        memory.add_message(message)
    assert len(memory) == 1


def test_wrong_event_type_for_the_method(memory: Memory) -> None:
    with pytest.raises(ValueError, match="expected a Message"):
        memory.add_message(Document(name="n", text="t"))  # type: ignore[arg-type]
    assert len(memory) == 0


def test_recall_and_deletion_targets_must_be_existing_content(memory: Memory) -> None:
    message = memory.add_message(Message(speaker="a", content="b"))
    recall = memory.record_recall(Recall(query="q", recalled=(message.id,)))
    deletion = memory.delete([message.id], "r")
    before = _snapshot(memory)
    unknown = uuid4()
    with pytest.raises(ValueError, match=str(unknown)):
        memory.record_recall(Recall(query="q", recalled=(unknown,)))
    with pytest.raises(ValueError, match=str(unknown)):
        memory.delete([unknown], "r")
    with pytest.raises(ValueError, match="is a recall"):
        memory.delete([recall.id], "r")
    with pytest.raises(ValueError, match="is a deletion"):
        memory.delete([deletion.id], "r")
    with pytest.raises(ValueError, match="is a deletion"):
        memory.record_recall(Recall(query="q", recalled=(deletion.id,)))
    # One bad target among good ones refuses the whole deletion.
    with pytest.raises(ValueError, match=str(unknown)):
        memory.delete([message.id, unknown], "r")
    assert _snapshot(memory) == before


def test_invalid_arguments_raise_the_seed_errors_and_lose_nothing(memory: Memory) -> None:
    memory.add_message(Message(speaker="a", content="kept"))
    before = _snapshot(memory)
    with pytest.raises(ValidationError, match="reason"):
        memory.delete([before[0]["id"]], "")
    with pytest.raises(ValidationError, match="targets"):
        memory.delete([], "r")
    with pytest.raises(ValueError, match="not-a-uuid"):
        memory.delete(["not-a-uuid"], "r")
    with pytest.raises(ValidationError, match="query"):
        memory.recall("")
    with pytest.raises(ValueError, match="kind"):
        memory.events(kind="note")
    with pytest.raises(ValueError, match="event_id"):
        memory.get("nope")
    with pytest.raises(ValueError, match="limit"):
        memory.recall("kept", limit=-1)
    assert _snapshot(memory) == before


def test_deleted_content_is_unreachable_but_get_returns_it(memory: Memory) -> None:
    secret = memory.add_message(Message(speaker="a", content="the secret code"))
    doc = memory.add_document(Document(name="secret", text="code words"))
    memory.delete([secret.id, doc.id], "leak")
    state = memory.replay()
    assert state.visible_messages == () and state.visible_documents == ()
    assert search(state, "secret code") == []
    recall, items = memory.recall("secret code")
    assert items == [] and recall.recalled == ()
    # Tombstones do not erase.
    assert memory.get(secret.id) == secret
    assert memory.get(doc.id) == doc
    assert [e.id for e in memory.events(kind="message")] == [secret.id]
    assert state.messages == (secret,) and state.documents == (doc,)


def test_recall_appends_a_recall_naming_exactly_what_it_returned(memory: Memory) -> None:
    a = memory.add_message(Message(speaker="a", content="apples and pears"))
    memory.add_message(Message(speaker="b", content="nothing relevant"))
    c = memory.add_document(Document(name="fruit", text="pears"))
    recall, items = memory.recall(
        "pears apples", limit=5, session_id="s1", source="agent", actor="agent:1"
    )
    assert items == [a, c]
    assert recall.recalled == (a.id, c.id)
    assert (recall.query, recall.session_id, recall.source, recall.actor) == (
        "pears apples",
        "s1",
        "agent",
        "agent:1",
    )
    assert memory.events(kind="recall") == [recall]
    # The state just before the recall reproduces what it returned.
    assert search(memory.replay(up_to_seq=recall.seq - 1), "pears apples") == items
    assert memory.replay().recall_stats[a.id].num_recalled == 1
    _, limited = memory.recall("pears apples", limit=1)
    assert limited == [a]


def test_recall_with_no_match_still_logs_the_read(memory: Memory) -> None:
    memory.add_message(Message(speaker="a", content="b"))
    recall, items = memory.recall("zebra")
    assert items == [] and recall.recalled == () and recall.seq == 1


def test_get_unknown_returns_none(memory: Memory) -> None:
    assert memory.get(uuid4()) is None
    stored = memory.add_message(Message(speaker="a", content="b"))
    assert memory.get(str(stored.id)) == stored


def test_events_filters(memory: Memory) -> None:
    m0 = memory.add_message(Message(speaker="a", content="one", session_id="s1"))
    d1 = memory.add_document(Document(name="n", text="t", session_id="s2"))
    m2 = memory.add_message(Message(speaker="a", content="two", session_id="s1"))
    r3 = memory.record_recall(Recall(query="q", recalled=(m0.id,), session_id="s1"))
    assert memory.events() == [m0, d1, m2, r3]
    assert memory.events(kind="message") == [m0, m2]
    assert memory.events(kind="document") == [d1]
    assert memory.events(kind="recall") == [r3]
    assert memory.events(kind="deletion") == []
    assert memory.events(session_id="s1") == [m0, m2, r3]
    assert memory.events(after_seq=1) == [m2, r3]
    assert memory.events(up_to_seq=1) == [m0, d1]
    assert memory.events(after_seq=0, up_to_seq=2, session_id="s1") == [m2]
    assert memory.events(kind="message", after_seq=0) == [m2]


def test_replay_up_to_seq_equals_the_fold_of_the_prefix(memory: Memory) -> None:
    a = memory.add_message(Message(speaker="a", content="alpha"))
    memory.add_document(Document(name="d", text="beta"))
    memory.record_recall(Recall(query="alpha", recalled=(a.id,)))
    memory.delete([a.id], "r")
    memory.add_message(Message(speaker="b", content="gamma"))
    log = memory.events()
    for n in range(len(log)):
        assert memory.replay(up_to_seq=n) == replay(log[: n + 1])
    assert memory.replay() == replay(log)
    assert memory.replay(up_to_seq=2).is_deleted(a.id) is False
    assert memory.replay(up_to_seq=3).is_deleted(a.id) is True


def test_two_handles_on_one_log_see_each_others_writes(memory_location: str) -> None:
    with Memory(memory_location) as one, Memory(memory_location) as two:
        a = one.add_message(Message(speaker="a", content="from one"))
        # A target appended by another handle is found: the check reads to the log's end.
        deletion = two.delete([a.id], "r")
        assert deletion.seq == 1
        assert one.get(deletion.id) == deletion
        assert len(one) == len(two) == 2
        assert one.replay() == two.replay()
