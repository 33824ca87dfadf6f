"""Keyword search of the audit memory: word overlap, ranked by overlap count then log order.

Answered from the fold's inverted index. With q query words present in the index, an
item with overlap c appears in at least one of the q - c + 1 shortest posting lists, so
each rank c is found by walking only those lists in log order, stopping at `limit`.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import merge
from itertools import islice

from projector.audit.index import words
from projector.audit.state import MemoryState
from schemas.audit import Document, Message

__all__ = ["search"]


def search(state: MemoryState, query: str, *, limit: int = 5) -> list[Message | Document]:
    """The visible messages and documents sharing the most words with `query`."""
    if limit <= 0:
        return []
    query_words = words(query)
    if not query_words or state.last_seq is None:
        return []
    horizon = state.last_seq
    index = state.index
    postings = []
    for word in query_words:
        posting = index.postings.get(word)
        if posting:
            end = bisect_right(posting, horizon)
            if end:
                postings.append((end, posting))
    postings.sort(key=lambda pair: pair[0])
    words_of = index.words_of

    found: list[int] = []
    for rank in range(len(postings), 0, -1):
        walked = postings[: len(postings) - rank + 1]
        previous = -1
        for seq in merge(*(islice(posting, end) for end, posting in walked)):
            if seq == previous:
                continue
            previous = seq
            if len(query_words.intersection(words_of[seq])) != rank:
                continue
            item = state.content_at(seq)
            if state.is_deleted(item.id):
                continue
            found.append(seq)
            if len(found) == limit:
                return [state.content_at(seq) for seq in found]
    return [state.content_at(seq) for seq in found]
