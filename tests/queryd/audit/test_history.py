"""The history queries (pure): events by actor and text and backwards, diff, activity, and
what a Recall put into a model's context, over a state folded from a list of events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from projector.audit.state import MemoryState, replay
from queryd.audit.events import select_events
from queryd.audit.history import MAX_BUCKETS, activity, diff, recall_context
from schemas.audit import Deletion, Document, Message, Recall

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _state() -> tuple[MemoryState, list]:
    e = [
        Message(
            speaker="user",
            content="What colour is the Cat?",
            session_id="s",
            actor="a:1",
            timestamp=T0,
        ),
        Message(
            speaker="bot",
            content="secret plan",
            session_id="x",
            actor="a:2",
            timestamp=T0 + timedelta(seconds=30),
        ),
        Document(
            name="notes.txt",
            text="cats are black",
            actor="a:1",
            timestamp=T0 + timedelta(minutes=2),
        ),
    ]
    recall = Recall(
        query="cat",
        recalled=(e[0].id, e[2].id),
        session_id="s",
        actor="a:1",
        timestamp=T0 + timedelta(minutes=3),
    )
    answer = Message(
        speaker="assistant",
        content="It is black.",
        session_id="s",
        timestamp=T0 + timedelta(minutes=3, seconds=1),
    )
    gone = Deletion(
        targets=(e[2].id,), reason="wrong", requested_by="dpo", timestamp=T0 + timedelta(minutes=4)
    )
    hidden = Deletion(targets=(e[1].id,), reason="private", timestamp=T0 + timedelta(minutes=5))
    events = [*e, recall, answer, gone, hidden]
    stored = [event.with_seq(seq) for seq, event in enumerate(events)]
    return replay(stored), stored


def test_events_filter_by_actor_and_text_never_matching_deleted_text() -> None:
    state, stored = _state()
    assert [e.seq for e in select_events(state, actor="a:1").events] == [0, 2, 3]
    assert [e.seq for e in select_events(state, text="CAT").events] == [0, 3]
    # "secret plan" was deleted at seq 6: its text is not searchable at the head, nor as
    # of a seq before the deletion
    assert select_events(state, text="secret").events == []
    assert select_events(state, text="secret", up_to_seq=5).events == []
    assert [e.seq for e in select_events(state, text="plan", up_to_seq=5).events] == []
    assert [e.seq for e in select_events(state, actor="a:2", up_to_seq=5).events] == [1]
    with pytest.raises(ValueError, match="text: expected at most"):
        select_events(state, text="x" * 1001)
    with pytest.raises(ValueError, match="before_seq: give after_seq or before_seq"):
        select_events(state, after_seq=1, before_seq=3)


def test_events_page_backwards_and_forwards_cover_the_log_once() -> None:
    state, stored = _state()
    newest = select_events(state, before_seq=7, limit=3)
    assert [e.seq for e in newest.events] == [4, 5, 6]
    assert newest.prev_before_seq == 4 and newest.next_after_seq is None
    older = select_events(state, before_seq=newest.prev_before_seq, limit=3)
    assert [e.seq for e in older.events] == [1, 2, 3] and older.next_after_seq == 3
    oldest = select_events(state, before_seq=older.prev_before_seq, limit=3)
    assert [e.seq for e in oldest.events] == [0] and oldest.prev_before_seq is None
    forward = select_events(state, after_seq=0, limit=2)
    assert [e.seq for e in forward.events] == [1, 2]
    assert forward.next_after_seq == 2 and forward.prev_before_seq == 1
    # a filtered page backwards: recalls before seq 3 (none) and before 7
    assert select_events(state, kind="recall", before_seq=3).events == []
    assert [e.seq for e in select_events(state, kind="recall", before_seq=7).events] == [3]


def test_diff_names_what_appeared_was_deleted_and_recalled() -> None:
    state, stored = _state()
    found = diff(state, 1, 6)
    assert [e.seq for e in found.appeared] == [4]  # the document (seq 2) is deleted by 6
    assert [(e.seq, d.seq) for e, d in found.deleted] == [(2, 5), (1, 6)]
    assert {(r.id, r.before, r.after) for r in found.recalls} == {
        (stored[0].id, 0, 1),
        (stored[2].id, 0, 1),
    }
    assert not found.truncated
    assert diff(state, 6, 6) == diff(state, 6, 6)._replace(appeared=[], deleted=[], recalls=[])
    with pytest.raises(ValueError, match="to_seq: expected at least from_seq"):
        diff(state, 5, 2)
    with pytest.raises(ValueError, match="from_seq"):
        diff(state, -2, 2)
    assert diff(state, -1, 6, limit=1).truncated


def test_activity_counts_events_per_minute_by_kind() -> None:
    state, _ = _state()
    found = activity(state)
    assert found.bucket_seconds == 60
    assert [(b.start, b.counts["message"], b.counts["deletion"]) for b in found.buckets] == [
        (T0, 2, 0),
        (T0 + timedelta(minutes=2), 0, 0),
        (T0 + timedelta(minutes=3), 1, 0),
        (T0 + timedelta(minutes=4), 0, 1),
        (T0 + timedelta(minutes=5), 0, 1),
    ]
    assert sum(sum(b.counts.values()) for b in activity(state, up_to_seq=2).buckets) == 3
    with pytest.raises(ValueError, match="bucket_seconds: expected 1 to"):
        activity(state, bucket_seconds=0)


def test_activity_picks_a_bucket_that_keeps_the_count_bounded() -> None:
    events = [
        Message(speaker="u", content="x", timestamp=T0 + timedelta(minutes=7 * i)).with_seq(i)
        for i in range(3_000)
    ]
    state = replay(events)
    found = activity(state)
    assert found.bucket_seconds > 60 and len(found.buckets) <= MAX_BUCKETS
    with pytest.raises(ValueError, match="bucket_seconds: 3000 buckets of 60 s"):
        activity(state, bucket_seconds=60)


def test_recall_context_names_items_and_the_messages_around_it() -> None:
    state, stored = _state()
    found = recall_context(state, stored[3].id)
    assert found is not None
    assert [i.id for i in found.items] == [stored[0].id, stored[2].id]
    # the document was deleted after the Recall: named, with its Deletion
    assert found.items[0].deletion is None and found.items[1].deletion.seq == 5
    assert [m.seq for m in found.before] == [0]  # session "s" only
    assert [m.seq for m in found.after] == [4]
    assert recall_context(state, stored[0].id) is None  # a message, not a Recall
    assert recall_context(state, uuid4()) is None
    with pytest.raises(ValueError, match="around"):
        recall_context(state, stored[3].id, around=51)
