"""Keyword search (seed 001): the ranking, exactly, against a brute-force reference."""

from __future__ import annotations

import random
import re

import pytest

from projector.audit import replay
from queryd.audit import search
from schemas.audit import Deletion, Document, Message


def _reference(state, query: str, limit: int) -> list:  # type: ignore[no-untyped-def]
    """The seed's definition, by scanning everything."""
    q = set(re.findall(r"\w+", query.lower()))
    if not q:
        return []
    scored = []
    for item in state.visible_messages + state.visible_documents:
        text = (
            f"{item.speaker} {item.content}"
            if isinstance(item, Message)
            else f"{item.name} {item.text}"
        )
        overlap = len(q & set(re.findall(r"\w+", text.lower())))
        if overlap:
            scored.append((-overlap, item.seq, item))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [item for *_, item in scored[:limit]]


def _build(n: int, seed: int) -> tuple:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(40)]
    events = []
    for seq in range(n):
        words = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.2:
            events.append(Document(name=rng.choice(vocab), text=words, seq=seq))
        elif rng.random() < 0.1 and events:
            target = rng.choice(events)
            if isinstance(target, Message | Document):
                events.append(Deletion(targets=(target.id,), reason="r", seq=seq))
            else:
                events.append(Message(speaker=rng.choice(vocab), content=words, seq=seq))
        else:
            events.append(Message(speaker=rng.choice(vocab), content=words, seq=seq))
    return replay(events), vocab, rng


@pytest.mark.parametrize("seed", range(5))
def test_search_equals_the_reference_ranking(seed: int) -> None:
    state, vocab, rng = _build(400, seed)
    for _ in range(60):
        query = " ".join(rng.choice(vocab) for _ in range(rng.randint(1, 6)))
        limit = rng.choice([1, 3, 5, 20, 1000])
        assert search(state, query, limit=limit) == _reference(state, query, limit), query


def test_search_at_a_past_seq_sees_only_that_prefix() -> None:
    state, vocab, rng = _build(300, 11)
    for n in (0, 10, 150, 299):
        past = state.at(n)
        for word in vocab[:10]:
            assert search(past, word, limit=50) == _reference(past, word, 50)


def test_ranking_by_overlap_then_log_order() -> None:
    a = Message(speaker="x", content="cat", seq=0)
    b = Message(speaker="x", content="cat mat", seq=1)
    c = Document(name="mat", text="the cat", seq=2)
    d = Message(speaker="x", content="dog", seq=3)
    assert search(replay([a, b, c, d]), "Cat MAT!", limit=5) == [b, c, a]


def test_speaker_and_document_name_count_as_words() -> None:
    a = Message(speaker="Ana", content="hello", seq=0)
    b = Document(name="Budget", text="numbers", seq=1)
    state = replay([a, b])
    assert search(state, "ana") == [a]
    assert search(state, "budget") == [b]


@pytest.mark.parametrize("query", ["", "   ", "?!,.", "-- ..."])
def test_empty_or_punctuation_query_returns_nothing(query: str) -> None:
    state = replay([Message(speaker="x", content="anything at all", seq=0)])
    assert search(state, query) == []


def test_deleted_content_never_found() -> None:
    a = Message(speaker="x", content="secret plan", seq=0)
    state = replay([a, Deletion(targets=(a.id,), reason="r", seq=1)])
    assert search(state, "secret plan") == []
    assert search(state.at(0), "secret plan") == [a]


def test_default_limit_is_five() -> None:
    state = replay([Message(speaker="x", content="same", seq=i) for i in range(9)])
    assert [m.seq for m in search(state, "same")] == [0, 1, 2, 3, 4]


def test_a_query_with_unknown_words_touches_no_item() -> None:
    """The index answers: with no posting for the words, no item's words are read."""
    state = replay([Message(speaker="x", content=f"word{i}", seq=i) for i in range(2000)])

    class Untouchable(dict):
        def __getitem__(self, key):  # type: ignore[no-untyped-def]
            raise AssertionError("search scanned an item")

    state.index.words_of = Untouchable(state.index.words_of)
    assert search(state, "absent words only") == []


def test_a_rare_word_reads_only_its_postings() -> None:
    events = [Message(speaker="x", content=f"common filler {i}", seq=i) for i in range(5000)]
    events.append(Message(speaker="x", content="rare needle", seq=5000))
    state = replay(events)
    reads = []

    class Counting(dict):
        def __getitem__(self, key):  # type: ignore[no-untyped-def]
            reads.append(key)
            return dict.__getitem__(self, key)

    state.index.words_of = Counting(state.index.words_of)
    assert [m.seq for m in search(state, "needle", limit=5)] == [5000]
    assert len(reads) == 1
