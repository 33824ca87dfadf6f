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
