"""The keyword index folded beside the audit state: words to the content that holds them."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable

_WORD = re.compile(r"\w+")


def words(text: str) -> frozenset[str]:
    """The lowercase words of a text, the unit of the seed's keyword overlap."""
    return frozenset(_WORD.findall(text.lower()))


class WordIndex:
    """Posting lists in log order, and each content event's word set.

    Append-only like the log it indexes: a state that reflects seq n reads only the
    postings at or before n, so one index serves every state folded from one log.
    """

    __slots__ = ("postings", "words_of")

    def __init__(self) -> None:
        self.postings: dict[str, list[int]] = {}
        # A tuple, not a set: a third of the memory, and overlap is still one C call
        # (query_words.intersection(words_of[seq])).
        self.words_of: dict[int, tuple[str, ...]] = {}

    def add(self, seq: int, texts: Iterable[str]) -> None:
        # One pass over the texts joined by a space: no word spans it and lowercasing
        # stops at it, so these are the words of each text, found in one regex call.
        # Interned: one string object per distinct word, shared by every item holding it.
        self.add_words(seq, tuple(map(sys.intern, words(" ".join(texts)))))

    def add_words(self, seq: int, found: tuple[str, ...]) -> None:
        """Index `seq` under words already found (a snapshot's, or another index's)."""
        self.words_of[seq] = found
        postings = self.postings
        for word in found:
            posting = postings.get(word)
            if posting is None:
                postings[word] = [seq]
            else:
                posting.append(seq)

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
        for seq, ws in found.items():
            for word in ws:
                posting = postings.get(word)
                if posting is None:
                    postings[word] = [seq]
                else:
                    posting.append(seq)
        return found, postings

    def merge(self, words_of: dict[int, tuple[str, ...]], postings: dict[str, list[int]]) -> None:
        """Add a fragment whose seqs all follow this index's, in bulk: no re-tokenizing.

        Takes ownership of the fragment's lists (they become posting lists here).
        """
        self.words_of.update(words_of)
        mine = self.postings
        # Python-level work only for the words both hold; the new ones go in at C speed.
        for word in postings.keys() & mine.keys():
            mine[word].extend(postings.pop(word))
        mine.update(postings)
