"""The audit state one page at a time, keyed by the seq of each content event (pure).

The state's four lists (visible messages, visible documents, deleted items, recall
statistics) all describe content events: every message and document is either visible
or deleted, and only they are recalled. A page holds the content events with a seq after
`after_seq`, at most `limit` of them in seq order, each in the lists it belongs to; the
pages of one state, concatenated, are exactly that state's lists.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from heapq import merge
from itertools import islice
from typing import NamedTuple
from uuid import UUID

from projector.audit.state import MemoryState, RecallStats
from schemas.audit import Deletion, Document, Message

__all__ = ["StatePage", "select_state"]


class StatePage(NamedTuple):
    """One page of the state; `next_after_seq` continues it (None: this page is the last)."""

    visible_messages: list[Message]
    visible_documents: list[Document]
    deleted: list[tuple[UUID, Deletion]]
    recall_stats: list[tuple[UUID, RecallStats]]
    next_after_seq: int | None


def _seq(event: Message | Document) -> int:
    return event.seq  # type: ignore[return-value]


def select_state(
    state: MemoryState, *, after_seq: int | None = None, limit: int | None = None
) -> StatePage:
    """At most `limit` content events after `after_seq`, sorted into the state's lists."""
    if limit is not None and limit < 1:
        raise ValueError(f"limit: expected a positive integer, got {limit}")
    messages, documents = state.messages, state.documents
    if after_seq is not None:
        messages = messages[bisect_right(messages, after_seq, key=_seq) :]
        documents = documents[bisect_right(documents, after_seq, key=_seq) :]
    remaining = len(messages) + len(documents)
    ordered: Iterator[Message | Document] = merge(messages, documents, key=_seq)
    chosen = list(ordered if limit is None else islice(ordered, limit))
    deleted = state.deleted
    stats = state.recall_stats
    page = StatePage([], [], [], [], None)
    for event in chosen:
        tombstone = deleted.get(event.id)
        if tombstone is not None:
            page.deleted.append((event.id, tombstone))
        elif state.is_deleted(event.id):
            pass  # erased: visible no more, as in `MemoryState.visible_messages`
        elif isinstance(event, Message):
            page.visible_messages.append(event)
        else:
            page.visible_documents.append(event)
        stat = stats.get(event.id)
        if stat is not None:
            page.recall_stats.append((event.id, stat))
    if chosen and len(chosen) < remaining:
        page = page._replace(next_after_seq=_seq(chosen[-1]))
    return page
