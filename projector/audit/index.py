"""The keyword index folded beside the audit state: words to the content that holds them."""

from __future__ import annotations

import re
import sys
import threading
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from itertools import chain, islice, repeat
from operator import itemgetter

from schemas.gc_guard import no_cyclic_gc

_WORD = re.compile(r"\w+")


def words(text: str) -> frozenset[str]:
    """The lowercase words of a text, the unit of the seed's keyword overlap."""
    return frozenset(_WORD.findall(text.lower()))


def _post_words(postings: dict[str, list[int]], found: Iterable[tuple[int, Iterable[str]]]) -> None:
    """Append each (seq, words) pair's seq to its words' posting lists (seqs increasing)."""
    for seq, ws in found:
        for word in ws:
            posting = postings.get(word)
            if posting is None:
                postings[word] = [seq]
            else:
                posting.append(seq)


class WordFragment:
    """The words of some content rows, kept compact until asked for: the rows' seqs
    (increasing), each row's word count, and the words as indexes into `vocab`, all
    checked by whoever made it (a snapshot chunk's decode). `words_of` and `postings` are
    built on first use; an index that takes the fragment (`WordIndex.defer`) builds it
    only when it is first read, so a reader that hydrates a snapshot and never searches
    never builds it.
    """

    __slots__ = ("seqs", "counts", "ids", "vocab", "_built")

    def __init__(
        self, seqs: list[int], counts: list[int], ids: Sequence[int], vocab: list[str]
    ) -> None:
        self.seqs, self.counts, self.ids, self.vocab = seqs, counts, ids, vocab
        self._built: tuple[dict[int, tuple[str, ...]], dict[str, list[int]]] | None = None

    def build(self) -> tuple[dict[int, tuple[str, ...]], dict[str, list[int]]]:
        """(words_of, postings), built once. A word of the vocabulary that no row holds
        has no posting (a cut fragment keeps its whole vocabulary)."""
        if self._built is None:
            found = list(map(self.vocab.__getitem__, self.ids))
            it = iter(found)
            words_of = dict(
                zip(self.seqs, map(tuple, map(islice, repeat(it), self.counts)), strict=True)
            )
            lists: list[list[int]] = [[] for _ in self.vocab]
            pair_seqs = chain.from_iterable(map(repeat, self.seqs, self.counts))
            deque(map(list.append, map(lists.__getitem__, self.ids), pair_seqs), maxlen=0)
            postings = dict(filter(itemgetter(1), zip(self.vocab, lists, strict=True)))
            self._built = (words_of, postings)
        return self._built

    @property
    def words_of(self) -> dict[int, tuple[str, ...]]:
        return self.build()[0]

    @property
    def postings(self) -> dict[str, list[int]]:
        return self.build()[1]

    def cut(self, up_to_seq: int) -> WordFragment:
        """The fragment of the rows at or before `up_to_seq`."""
        n = bisect_right(self.seqs, up_to_seq)
        if n == len(self.seqs):
            return self
        return WordFragment(
            self.seqs[:n], self.counts[:n], self.ids[: sum(self.counts[:n])], self.vocab
        )


class WordIndex:
    """Posting lists in log order, and each content event's word set.

    Append-only like the log it indexes: a state that reflects seq n reads only the
    postings at or before n, so one index serves every state folded from one log.

    Fragments taken by `defer` are merged in when `postings` or `words_of` is first read
    (once, under a lock: states folded from one log share their index across threads).
    Words added one event at a time (`add`, `add_words`) are in `words_of` at once and in
    `postings` when it is next read: a fold that is never searched (the projector's, which
    only cuts snapshots from `words_of`) never builds a posting list.
    """

    __slots__ = ("_postings", "_words_of", "_pending", "_unposted", "_lock")

    def __init__(self) -> None:
        self._postings: dict[str, list[int]] = {}
        # A tuple, not a set: a third of the memory, and overlap is still one C call
        # (query_words.intersection(words_of[seq])).
        self._words_of: dict[int, tuple[str, ...]] = {}
        self._pending: list[WordFragment] = []
        # Seqs whose words are in `_words_of` but not yet in `_postings`, in seq order (all
        # after every pending fragment's: `add_words` merges those first).
        self._unposted: list[int] = []
        self._lock = threading.Lock()

    @classmethod
    def of(cls, words_of: dict[int, tuple[str, ...]], postings: dict[str, list[int]]) -> WordIndex:
        """An index holding these (taken, not copied)."""
        index = cls()
        index._words_of, index._postings = words_of, postings
        return index

    @property
    def postings(self) -> dict[str, list[int]]:
        if self._pending or self._unposted:
            self._settle()
        return self._postings

    @postings.setter
    def postings(self, value: dict[str, list[int]]) -> None:
        if self._pending or self._unposted:
            self._settle()
        self._postings = value

    @property
    def words_of(self) -> dict[int, tuple[str, ...]]:
        if self._pending:
            self._settle()
        return self._words_of

    @words_of.setter
    def words_of(self, value: dict[int, tuple[str, ...]]) -> None:
        if self._pending:
            self._settle()
        self._words_of = value

    def _settle(self) -> None:
        # Millions of long-lived lists and tuples at once: no cycle hunting meanwhile (as
        # a hydration builds them, `no_cyclic_gc`).
        with self._lock, no_cyclic_gc():
            unposted = self._unposted
            count = len(unposted)  # seqs the writer adds meanwhile wait for the next time
            if count:
                self._post(unposted[:count])
                # Dropped only once posted: a reader that finds none finds every posting.
                del unposted[:count]
            pending = self._pending
            for fragment in pending:
                self._merge(*fragment.build())
            # Emptied only once merged: a reader that finds it empty finds every posting.
            self._pending = []

    def _post(self, seqs: list[int]) -> None:
        """Add `seqs` (increasing, all after every posted one) to the postings."""
        words_of = self._words_of
        # An erased event's words are gone from `words_of`: it gets no posting.
        _post_words(self._postings, ((seq, words_of.get(seq, ())) for seq in seqs))

    def defer(self, fragment: WordFragment) -> None:
        """Take a fragment whose seqs all follow this index's, to merge when first read."""
        with self._lock:
            self._pending.append(fragment)

    def add(self, seq: int, texts: Iterable[str]) -> None:
        # One pass over the texts joined by a space: no word spans it and lowercasing
        # stops at it, so these are the words of each text, found in one regex call.
        # Interned: one string object per distinct word, shared by every item holding it.
        self.add_words(seq, tuple(map(sys.intern, words(" ".join(texts)))))

    def add_words(self, seq: int, found: tuple[str, ...]) -> None:
        """Index `seq` under words already found (a snapshot's, or another index's)."""
        if self._pending:
            self._settle()
        self._words_of[seq] = found
        self._unposted.append(seq)  # posted when the postings are next read

    def prefix(self, up_to_seq: int) -> WordIndex:
        """A copy holding only what was indexed at or before `up_to_seq`."""
        copy = WordIndex()
        for seq, found in self.words_of.items():
            if seq <= up_to_seq:
                copy.add(seq, found)
        return copy

    def fragment(
        self, seqs: Iterable[int]
    ) -> tuple[dict[int, tuple[str, ...]], dict[str, list[int]]]:
        """What `seqs` (increasing) added: their words and their postings, for a snapshot."""
        words_of = self.words_of
        found = {seq: words_of[seq] for seq in seqs if seq in words_of}
        postings: dict[str, list[int]] = {}
        _post_words(postings, found.items())
        return found, postings

    def merge(self, words_of: dict[int, tuple[str, ...]], postings: dict[str, list[int]]) -> None:
        """Add a fragment whose seqs all follow this index's, in bulk: no re-tokenizing.

        Takes ownership of the fragment's lists (they become posting lists here).
        """
        if self._pending or self._unposted:
            self._settle()
        self._merge(words_of, postings)

    def _merge(self, words_of: dict[int, tuple[str, ...]], postings: dict[str, list[int]]) -> None:
        self._words_of.update(words_of)
        mine = self._postings
        # Python-level work only for the words both hold; the new ones go in at C speed.
        for word in postings.keys() & mine.keys():
            mine[word].extend(postings.pop(word))
        mine.update(postings)
