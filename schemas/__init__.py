"""schemas package: the data-only models of memstream's records and commands.

The package re-exports `schemas.validation`'s entry points (`schemas.validate_command`,
...), loaded on first use: a module that needs one light part (`schemas.errors`) does
not import every pydantic model with it (the importer's reader process starts faster).
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    # Not `from schemas import validation`: that asks this module for the attribute first,
    # and so does `from schemas import codec` before `schemas.codec` is loaded: each would
    # call this function again, without end.
    validation = importlib.import_module("schemas.validation")
    if name in validation.__all__:
        return getattr(validation, name)
    raise AttributeError(f"module 'schemas' has no attribute {name!r}")


def __dir__() -> list[str]:
    validation = importlib.import_module("schemas.validation")

    return sorted({*globals(), *validation.__all__})
