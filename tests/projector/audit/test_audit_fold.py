"""The pure fold of seed 000: replay, MemoryState, recall stats, time travel."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projector.audit import MemoryState, RecallStats, fold, replay
from projector.audit.index import WordIndex, words
from schemas.audit import Deletion, Document, Message, Recall


def _log() -> list:
    m0 = Message(speaker="a", content="first", seq=0)
    d1 = Document(name="doc", text="text", seq=1)
    m2 = Message(speaker="b", content="second", seq=2)
    r3 = Recall(
        query="q", recalled=(m0.id, d1.id), seq=3, timestamp=datetime(2024, 1, 1, tzinfo=UTC)
    )
    x4 = Deletion(targets=(m0.id,), reason="r", seq=4)
    r5 = Recall(query="q", recalled=(d1.id,), seq=5, timestamp=datetime(2024, 2, 1, tzinfo=UTC))
    return [m0, d1, m2, r3, x4, r5]


def test_replay_builds_every_attribute() -> None:
    m0, d1, m2, r3, x4, r5 = _log()
    state = replay([m0, d1, m2, r3, x4, r5])
    assert state.messages == (m0, m2)
    assert state.documents == (d1,)
    assert state.visible_messages == (m2,)
    assert state.visible_documents == (d1,)
    assert dict(state.deleted) == {m0.id: x4}
    assert state.is_deleted(m0.id) and not state.is_deleted(m2.id)
    assert state.recall_stats[d1.id] == RecallStats(2, r5.timestamp)
    assert state.recall_stats[m0.id] == RecallStats(1, r3.timestamp)
    assert m2.id not in state.recall_stats  # never read, no entry
    assert state.last_seq == 5


def test_replay_of_nothing() -> None:
    state = replay([])
    assert state.messages == () and state.documents == ()
    assert state.last_seq is None and dict(state.deleted) == {} and dict(state.recall_stats) == {}


def test_replay_is_deterministic() -> None:
    log = _log()
    assert replay(log) == replay(list(log))


def test_replay_refuses_unsequenced_events() -> None:
    with pytest.raises(ValueError, match="no seq"):
        replay([Message(speaker="a", content="b")])


@pytest.mark.parametrize("seqs", [(0, 0), (3, 1)])
def test_replay_refuses_seq_that_does_not_increase(seqs: tuple[int, int]) -> None:
    events = [Message(speaker="a", content="b", seq=s) for s in seqs]
    with pytest.raises(ValueError, match=f"seq {seqs[1]}"):
        replay(events)


def test_gaps_in_seq_are_allowed() -> None:
    state = replay([Message(speaker="a", content="b", seq=s) for s in (0, 5, 9)])
    assert state.last_seq == 9 and len(state.messages) == 3


def test_state_at_a_past_seq_equals_the_fold_of_the_prefix() -> None:
    log = _log()
    head = replay(log)
    for n in range(-1, len(log)):
        assert head.at(n) == replay(log[: n + 1]), n


def test_memory_state_is_frozen() -> None:
    state = replay(_log())
    with pytest.raises(AttributeError):
        state.last_seq = 3  # type: ignore[misc]


def test_fold_leaves_its_input_unchanged_even_when_branching() -> None:
    m0, d1, m2, *_ = _log()
    base = replay([m0, d1])
    ahead = fold(base, m2)
    other = Message(speaker="z", content="branch", seq=2)
    branched = fold(base, other)  # base is no longer the ledger's head
    assert base.messages == (m0,) and base.last_seq == 1
    assert ahead.messages == (m0, m2)
    assert branched.messages == (m0, other)
    assert ahead.messages == (m0, m2)  # the branch did not disturb the other line


def test_recall_of_the_same_id_twice_in_one_event_counts_twice() -> None:
    # As audit-ready-memory counts it (issue 12: the seed is the arbiter).
    m0 = Message(speaker="a", content="b", seq=0)
    state = replay([m0, Recall(query="q", recalled=(m0.id, m0.id), seq=1)])
    assert state.recall_stats[m0.id].num_recalled == 2


def test_first_deletion_is_the_one_that_did_it() -> None:
    m0 = Message(speaker="a", content="b", seq=0)
    first = Deletion(targets=(m0.id,), reason="one", seq=1)
    second = Deletion(targets=(m0.id,), reason="two", seq=2)
    assert replay([m0, first, second]).deleted[m0.id] == first


def test_get_respects_the_horizon() -> None:
    m0, d1, *_ = _log()
    state = replay([m0, d1])
    assert state.at(0).get(d1.id) is None
    assert state.get(d1.id) == d1
    assert state.get(uuid4()) is None


def test_empty_state_constructor() -> None:
    assert MemoryState().last_seq is None


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(), max_size=4))
def test_the_index_finds_each_texts_words_in_one_pass(texts: list[str]) -> None:
    # `WordIndex.add` tokenizes the texts joined by a space, in one regex call.
    index = WordIndex()
    index.add(0, texts)
    assert set(index.words_of[0]) == frozenset().union(*map(words, texts))


def test_events_share_equal_fields_sets_and_still_copy_with_updates() -> None:
    from projector.audit.rows import event_of, row_of

    first, second = (Message(speaker="a", content=f"c{i}", seq=i) for i in range(2))
    dumped = second.model_dump(exclude_unset=True)
    state = replay([first, second])
    assert first.__pydantic_fields_set__ is second.__pydantic_fields_set__
    assert second.model_dump(exclude_unset=True) == dumped  # the same set, shared
    # A stored copy (with_seq) and an event rebuilt from its compact row share theirs too,
    # and pydantic's model_copy(update=...) copies the set before adding to it.
    stored = Message(speaker="a", content="x").with_seq(2)
    rebuilt = event_of(row_of(2, stored))
    for event in (stored, rebuilt, state.get(first.id)):
        assert event is not None
        edited = event.model_copy(update={"content": "redacted"})
        assert edited.content == "redacted" and "content" in edited.model_fields_set
    assert Message(speaker="b", content="y").with_seq(3).__pydantic_fields_set__ is (
        stored.__pydantic_fields_set__
    )


def _rows_ledger(batches: list[list[Message]]):
    """A ledger filled by `extend_rows`, one call per batch (as a hydrate does)."""
    from projector.audit.index import WordIndex
    from projector.audit.rows import row_of
    from projector.audit.state import Ledger

    ledger = Ledger()
    for batch in batches:
        rows = [row_of(m.seq, m) for m in batch]
        ledger.extend_rows(rows, list(range(len(rows))), [], [], WordIndex())
    return ledger


@pytest.mark.parametrize(
    "shape",
    ["ids all new", "an id twice in one batch", "an id of an earlier batch", "seqs with gaps"],
)
def test_rows_in_bulk_index_every_id_at_its_first_event_as_one_by_one_does(shape: str) -> None:
    """`extend_rows` takes a batch's ids at C speed and puts the first position back when
    an id was met before (a log holds such ids only if forged, yet the read must not
    change): the id map, positions and seqs equal those of folding one by one."""
    from projector.audit.state import Ledger

    step = 3 if shape == "seqs with gaps" else 1
    msgs = [Message(speaker="s", content=f"m{k}", seq=k * step) for k in range(12)]
    if shape == "an id twice in one batch":
        msgs[5] = msgs[5].model_copy(update={"id": msgs[3].id})
    if shape == "an id of an earlier batch":
        msgs[9] = msgs[9].model_copy(update={"id": msgs[1].id})
        msgs[10] = msgs[10].model_copy(update={"id": msgs[9].id})
    batches = [msgs[:4], msgs[4:8], msgs[8:]]
    bulk = _rows_ledger(batches)
    single = Ledger()
    for m in msgs:
        single.append(m)
    assert bulk.by_id == single.by_id
    assert bulk.seqs == single.seqs == [m.seq for m in msgs]
    assert bulk.message_pos == single.message_pos
    assert bulk.message_seqs == single.message_seqs
    state = MemoryState(bulk, len(msgs))
    for m in msgs:
        first = next(e for e in msgs if e.id == m.id)
        assert state.get(m.id) == first


def test_ids_entered_in_bulk_are_found_from_many_threads_at_once_and_after_a_fold() -> None:
    """Rows entered in bulk join the id map when it is first read: threads reading at once
    all find every event (none reads a map half built), and an event folded one by one
    afterwards, repeating an id of the rows, leaves the first position named."""
    import sys
    import threading

    msgs = [Message(speaker="s", content=f"m{k}", seq=k) for k in range(30_000)]
    ledger = _rows_ledger([msgs[k : k + 100] for k in range(0, len(msgs), 100)])
    state = MemoryState(ledger, len(msgs))
    start = threading.Barrier(8)
    wrong: list[int] = []

    def read(part: int) -> None:
        start.wait()
        for k in range(part, len(msgs), 997):
            found = state.get(msgs[k].id)
            if found is None or found.seq != k:
                wrong.append(k)

    threads = [threading.Thread(target=read, args=(part,)) for part in range(8)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns between the runs of rows being indexed
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert wrong == []
    assert len(ledger.by_id) == len(msgs)
    again = msgs[7].model_copy(update={"seq": len(msgs)})
    folded = fold(state, again)
    assert folded.get(again.id) == msgs[7]
    assert ledger.by_id[again.id.int] == 7
