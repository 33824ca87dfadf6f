"""Trusted construction of pydantic models without validation, for hot loops.

Same effect as ``Model.model_construct`` (which pydantic documents as skipping validation)
but without its per-field default/alias resolution, which costs microseconds per object
when the reducer or a query builds hundreds of thousands of them from values that are
already validated. ``values`` must hold every field of ``cls``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

_setattr = object.__setattr__


def construct(cls: type[M], values: dict[str, Any]) -> M:
    obj = cls.__new__(cls)
    _setattr(obj, "__dict__", values)
    _setattr(obj, "__pydantic_fields_set__", {k for k, v in values.items() if v is not None})
    _setattr(obj, "__pydantic_extra__", None)
    _setattr(obj, "__pydantic_private__", None)
    return obj


def replace(obj: M, update: dict[str, Any]) -> M:
    """A copy of ``obj`` with ``update`` applied, unvalidated (as ``model_copy``)."""
    cls = type(obj)
    new = cls.__new__(cls)
    values = dict(obj.__dict__)
    values.update(update)
    _setattr(new, "__dict__", values)
    _setattr(new, "__pydantic_fields_set__", obj.__pydantic_fields_set__ | update.keys())
    _setattr(new, "__pydantic_extra__", None)
    _setattr(new, "__pydantic_private__", None)
    return new


# Validated models keyed by the keys of the dict they came from. For a model without
# aliases, a dict's keys determine the fields set, so models built from dicts with the same
# keys can share one set: models here are frozen, and pydantic's copies copy the set, so no
# shared set is ever changed. A 14-field set is ~700 bytes and a GC-tracked object per model.
_SHARED_FIELDS: dict[tuple[str, ...], set[str]] = {}
_MAX_SHARED = 512  # distinct key tuples kept; beyond that, models keep their own sets


def share_fields_set(obj: BaseModel, source_keys: tuple[str, ...]) -> None:
    """Point ``obj``'s fields set at the one shared by models validated from dicts with
    exactly ``source_keys`` (in order). Only for frozen models without aliases."""
    shared = _SHARED_FIELDS.get(source_keys)
    if shared is None:
        if len(_SHARED_FIELDS) >= _MAX_SHARED:
            return
        shared = _SHARED_FIELDS[source_keys] = obj.__pydantic_fields_set__
    _setattr(obj, "__pydantic_fields_set__", shared)
