"""Index sorts by a column, for get_items' sort keys and get_scored_items' ranking."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from projector.graph.native import native


def sort_indexes(
    values: Sequence[Any], indexes: Sequence[int] | None, descending: bool, keep: int | None = None
) -> Sequence[int]:
    """``indexes`` (None: every index of ``values``) ordered as ``sorted(indexes,
    key=values.__getitem__, reverse=descending)``: stable, ties in incoming order. Only the
    first ``keep`` when it is given.

    A column of floats takes the C radix sort, whose result (int64s in a memoryview, no int
    object each) can come back as ``indexes`` for the next key of a multi-key sort."""
    if native is not None:
        got = native.sort_indexes(values, indexes, descending, keep)
        if got is not None:
            return memoryview(got).cast("q")
    source = range(len(values)) if indexes is None else indexes
    order = sorted(source, key=values.__getitem__, reverse=descending)
    return order if keep is None else order[:keep]


__all__ = ["sort_indexes"]
