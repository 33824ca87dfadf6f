"""Pause the cyclic garbage collector around bulk work that allocates many objects.

Folds and large queries allocate hundreds of thousands of acyclic objects (models, pvector
nodes, result rows). Each allocation burst triggers collections that traverse the whole
heap, which on a 100k-item graph costs several times the work itself. Reference counting
still frees everything; only the cycle detector waits until the outermost guard exits.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()


__all__ = ["no_cyclic_gc"]
