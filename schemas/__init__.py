"""schemas package: the data-only models of memstream's records and commands.

The package re-exports `schemas.validation`'s entry points (`schemas.validate_command`,
...), loaded on first use: a module that needs one light part (`schemas.errors`) does
not import every pydantic model with it (the importer's reader process starts faster).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from schemas import validation

    if name in validation.__all__:
        return getattr(validation, name)
    raise AttributeError(f"module 'schemas' has no attribute {name!r}")


def __dir__() -> list[str]:
    from schemas import validation

    return sorted({*globals(), *validation.__all__})
