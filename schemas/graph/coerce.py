"""Dicts or models accepted everywhere: a dict is validated through the model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def coerce(model: type[M], value: M | Mapping[str, Any]) -> M:
    if isinstance(value, model):
        return value
    return model.model_validate(value)


def coerce_opt(model: type[M], value: M | Mapping[str, Any] | None) -> M | None:
    if value is None:
        return None
    return coerce(model, value)


__all__ = ["coerce", "coerce_opt"]
