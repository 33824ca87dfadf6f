"""`MemexStore.open(location)`: the seed-003 facade on a log, over every location."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from producers.memex_store import MemexStore
from schemas.graph.errors import DuplicateMemoryError, MemoryNotFoundError


@pytest.fixture
def store(memory_location: str) -> Iterator[MemexStore]:
    with MemexStore.open(memory_location) as s:
        yield s


def _item(store: MemexStore, id: str, **kw: object) -> object:
    return store.create(
        id=id,
        scope="s",
        kind="observation",
        content={"v": id},
        author="agent",
        source_kind="observed",
        authority=kw.pop("authority", 0.8),
        **kw,
    )


def test_mutations_publish_and_reads_include_own_writes(store: MemexStore) -> None:
    _item(store, "a", importance=0.5)
    _item(store, "b", parents=["a"])
    assert [i.id for i in store.items()] == ["a", "b"]
    events = store.update("a", {"content": {"w": 2}}, "agent")
    assert [e.type for e in events] == ["memory.updated"]
    assert store.item("a").content == {"v": "a", "w": 2}  # type: ignore[union-attr]
    with pytest.raises(DuplicateMemoryError):
        _item(store, "a")
    with pytest.raises(MemoryNotFoundError):
        store.retract("zz", "agent")
    assert [c.id for c in store.children("a")] == ["b"]


def test_operations_are_decided_by_the_fold(store: MemexStore) -> None:
    for i in "abcd":
        _item(store, i, importance=0.6)
    _item(store, "e", parents=["d"])
    store.mark_contradiction("a", "b", "judge")
    assert len(store.contradictions()) == 1
    store.resolve_contradiction("a", "b", "judge", reason="newer")
    assert store.contradictions() == []
    assert store.item("b").authority == pytest.approx(0.08)  # type: ignore[union-attr]
    store.mark_alias("a", "c", "agent")
    assert [i.id for i in store.aliases("a")] == ["c"]
    assert store.cascade_retract("d", "agent") == ["e", "d"]
    assert store.item("d") is None
    store.bulk_adjust_scores({"ids": ["a"]}, {"importance": 0.2}, "agent")
    assert store.item("a").importance == pytest.approx(0.8)  # type: ignore[union-attr]
    store.apply_many({"ids": ["c"]}, lambda item: {"importance": 0.1}, "agent")
    assert store.item("c").importance == pytest.approx(0.1)  # type: ignore[union-attr]
    store.apply_many({"ids": ["c"]}, lambda item: None, "agent")
    assert store.item("c") is None
    store.decay_importance(-10_000, 0.5, "agent")
    assert store.item("a").importance == pytest.approx(0.4)  # type: ignore[union-attr]
    state = store.state()
    assert not state.rejections


def test_the_same_log_folds_to_the_same_graph_when_reopened(memory_location: str) -> None:
    with MemexStore.open(memory_location) as s:
        _item(s, "a")
        _item(s, "b")
        s.mark_contradiction("a", "b", "judge")
        s.resolve_contradiction("a", "b", "judge")
        first = s.dumps()
    with MemexStore.open(memory_location) as again:
        assert again.dumps() == first


def test_intents_tasks_and_import(store: MemexStore) -> None:
    intent = store.create_intent(label="ship", priority=0.7, owner="me")
    task = store.create_task(intent_id=intent.id, action="build", priority=0.5)
    store.apply_task({"type": "task.start", "task_id": task.id, "agent_id": "w1"})
    assert store.get_tasks()[0].status == "running"
    store.apply_intent({"type": "intent.complete", "intent_id": intent.id, "author": "me"})
    assert store.get_intents()[0].status == "completed"
    other = MemexStore()
    other.create(
        id="x", scope="s", kind="k", content={}, author="a", source_kind="observed", authority=1.0
    )
    report = store.import_slice(other.export_slice(memory_ids=["x"]))
    assert report.created.memories == ["x"]
    assert store.item("x") is not None


def test_memory_and_memex_share_one_log(memory_location: str) -> None:
    from memstream import Memory, Message

    with Memory(memory_location) as memory, MemexStore.open(memory_location) as store:
        memory.add_message(Message(speaker="a", content="hello"))
        _item(store, "a")
        stored = memory.add_message(Message(speaker="a", content="again"))
        assert stored.seq == 2
        assert len(memory) == 2  # audit events only
        assert [i.id for i in store.items()] == ["a"]
