"""The word index posts words added one event at a time only when its postings are read:
`words_of` has them at once, `postings` equals the eager build whenever it is read, a fold
that is never searched builds none, and readers on other threads never see a posting list
that misses a seq added before they asked."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from projector.audit.index import WordFragment, WordIndex


def _eager(added: list[tuple[int, tuple[str, ...]]]) -> dict[str, list[int]]:
    postings: dict[str, list[int]] = {}
    for seq, found in added:
        for word in found:
            postings.setdefault(word, []).append(seq)
    return postings


def test_words_are_posted_in_seq_order_when_the_postings_are_read() -> None:
    index = WordIndex()
    added = [(seq, (f"w{seq % 3}", "common")) for seq in range(0, 40, 2)]
    for seq, found in added[:10]:
        index.add_words(seq, found)
    assert index.words_of == dict(added[:10])  # at once
    assert index._postings == {}  # not posted yet: nothing has read them
    assert index.postings == _eager(added[:10])
    for seq, found in added[10:]:
        index.add_words(seq, found)
    assert index.postings == _eager(added)
    assert index._unposted == []


def test_a_fold_never_searched_builds_no_posting() -> None:
    from projector.audit import replay
    from schemas.audit import Message

    state = replay([Message(speaker="ana", content=f"apples {i}", seq=i) for i in range(50)])
    index = state.index
    assert len(index.words_of) == 50
    assert index._postings == {} and len(index._unposted) == 50
    assert index.postings["apples"] == list(range(50))


def test_a_deferred_fragment_after_unposted_words_keeps_seq_order() -> None:
    index = WordIndex()
    index.add_words(0, ("a", "b"))
    index.add_words(1, ("b",))
    index.defer(WordFragment([5, 7], [1, 2], [0, 0, 1], ["b", "c"]))
    index.add_words(9, ("b", "c"))  # merges the fragment first
    assert index.postings == {"a": [0], "b": [0, 1, 5, 7, 9], "c": [7, 9]}
    assert list(index.words_of) == [0, 1, 5, 7, 9]


@pytest.fixture
def fast_switching() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_readers_on_other_threads_see_every_seq_added_before_they_asked(
    fast_switching: None,
) -> None:
    index = WordIndex()
    added = 0
    total = 20_000
    failures: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            before = added  # every seq below this was added before the read began
            # A copy: the live list grows while another reader posts (readers filter by
            # the seq their state reflects).
            posting = list(index.postings.get("common", []))
            if len(posting) < before:
                failures.append(f"{len(posting)} posted, {before} added before the read")
            if posting != list(range(len(posting))):
                failures.append("a posting list out of order, or with a seq twice")
            if failures:
                return

    readers = [threading.Thread(target=read) for _ in range(4)]
    for reader in readers:
        reader.start()
    for seq in range(total):
        index.add_words(seq, ("common", f"w{seq}"))
        added = seq + 1
    done.set()
    for reader in readers:
        reader.join()
    assert failures == []
    assert index.postings["common"] == list(range(total))


@pytest.mark.parametrize("searched_first", [False, True], ids=["unposted", "posted"])
def test_an_erased_events_words_reach_no_posting_whenever_it_was_posted(
    searched_first: bool,
) -> None:
    """Erasure against lazy posting: whether the event's words were posted before its
    Erasure (a search read them) or not yet, afterwards no posting list and no word set
    holds its seq or a word only it had, and a search for its content finds nothing."""
    from projector.audit.state import Ledger
    from schemas.audit import ERASED, Erasure, Message

    ledger = Ledger()
    card = Message(speaker="alice", content="my card 4111111111111111", seq=0)
    other = Message(speaker="bob", content="my lunch", seq=1)
    ledger.append(card)
    ledger.append(other)
    if searched_first:
        assert ledger.index.postings["4111111111111111"] == [0]
    ledger.append(
        Erasure(
            subject="alice",
            erased=(card.id,),
            leaf_hashes=("0" * 64,),
            reason="asked to",
            seq=2,
        )
    )
    postings = ledger.index.postings
    assert "4111111111111111" not in postings and "card" not in postings
    assert all(0 not in posting for posting in postings.values())
    assert postings["my"] == [1]
    assert 0 not in ledger.index.words_of
    assert ledger.event(0).content == ERASED  # type: ignore[union-attr]
