"""The compiled loops (projector/graph/_native.c), or None where the extension was not built
(no compiler at install, another interpreter). Each of its functions returns None for an
input it leaves to Python; the Python beside each call is the reference it matches."""

from __future__ import annotations

from types import ModuleType

native: ModuleType | None
try:
    from projector.graph import _native as native
except ImportError:
    native = None

__all__ = ["native"]
