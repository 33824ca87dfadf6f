# The C loops of queryd/graph/_native.c. None: an input left to the Python reference.
from collections.abc import Sequence
from typing import Any

def score_columns(
    auth: Sequence[float],
    conv: Sequence[float],
    imp: Sequence[float],
    ts: Sequence[float] | None,
    wa: float,
    wc: float,
    wi: float,
    base: float | None,
    at: float,
    interval: float,
) -> list[float] | None: ...
def sort_indexes(
    values: Sequence[Any], indexes: Sequence[int] | None, descending: bool, keep: int | None
) -> bytes | None: ...
def scored_items(
    cls: type,
    fields_set: set[str],
    items: Sequence[Any],
    scores: Sequence[float],
    order: Sequence[int],
) -> list[Any]: ...
