"""Shared fields sets for frozen pydantic models.

pydantic gives every model instance its own ``__pydantic_fields_set__``: a set of 5 to 14
names costs 200-700 bytes and one GC-tracked object, often more than the model's values.
Models here are frozen, and pydantic copies the set before changing it (``model_copy``), so
models with the same fields set can share one set object. Both caches are bounded: past
``MAX_SHARED`` distinct entries, models keep their own sets.
"""

from __future__ import annotations

from collections.abc import Set
from typing import Any

MAX_SHARED = 1024
_BY_NAMES: dict[tuple[frozenset[str], str | None], set[str]] = {}
_BY_KEYS: dict[tuple[str, ...], set[str]] = {}
# The ids of the shared sets (each held by a cache above for the life of the process, so
# an id names one set): a set already shared is known without hashing its names.
_SHARED_IDS: set[int] = set()
_setattr = object.__setattr__


def shared_fields_set(names: Set[str], plus: str | None = None) -> set[str]:
    """The shared set of ``names`` (and ``plus``, if given); a new one past the bound."""
    key = (frozenset(names), plus)
    shared = _BY_NAMES.get(key)
    if shared is None:
        shared = set(names) if plus is None else {*names, plus}
        if len(_BY_NAMES) < MAX_SHARED:
            _BY_NAMES[key] = shared
            _SHARED_IDS.add(id(shared))
    return shared


def share_fields_set(model: Any) -> None:
    """Point a frozen model's fields set at the shared one equal to it."""
    fields = model.__pydantic_fields_set__
    if id(fields) in _SHARED_IDS:
        return
    shared = shared_fields_set(fields)
    if shared is not fields:
        _setattr(model, "__pydantic_fields_set__", shared)


def share_fields_set_by_keys(model: Any, source_keys: tuple[str, ...]) -> None:
    """``share_fields_set`` for a model just validated from a dict with exactly
    ``source_keys`` (in order), keyed by them: cheaper than hashing a frozenset, and for a
    model without aliases the dict's keys determine its fields set."""
    shared = _BY_KEYS.get(source_keys)
    if shared is None:
        if len(_BY_KEYS) >= MAX_SHARED:
            return
        shared = _BY_KEYS[source_keys] = model.__pydantic_fields_set__
        _SHARED_IDS.add(id(shared))
    _setattr(model, "__pydantic_fields_set__", shared)


__all__ = ["MAX_SHARED", "share_fields_set", "share_fields_set_by_keys", "shared_fields_set"]
