"""Keep the cyclic garbage collector off bulk work (folds, hydration, queries), big vectors.

Folds and large queries allocate hundreds of thousands of acyclic objects (models, pvector
nodes, result rows). Each allocation burst triggers collections that traverse the whole
heap, which on a 100k-item graph costs several times the work itself. Reference counting
still frees everything; only the cycle detector waits until the outermost guard exits,
which hands a large batch of new objects to the oldest generation (see ``no_cyclic_gc``).

A collection also traverses every element of each container it examines: a new 100k-entry
pvector of a state costs a walk of all 100k entries at the next young collection, and
again at the next middle one, whatever the command changed. ``untrack_large`` takes such
containers out of the collector's lists (CPython's ``PyObject_GC_UnTrack``). That is safe:
what they hold counts as referenced from outside, so nothing is ever freed early; the only
cost is that a reference cycle running through one (an item whose content holds its own
state) would not be collected.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import threading
from collections.abc import Callable, Iterable, Iterator, Sized
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def _gc_untrack() -> Callable[[object], None] | None:
    """CPython's PyObject_GC_UnTrack; None elsewhere (leave everything tracked)."""
    try:
        untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    except AttributeError:
        return None
    untrack.argtypes = [ctypes.py_object]
    untrack.restype = None
    return untrack


_untrack = _gc_untrack()

UNTRACK_MIN = 512  # below this a traversal is cheaper than the call that avoids it
AGE_MIN = 10_000  # new objects past which a guard moves them to the oldest generation


def untrack_large(containers: Iterable[Sized]) -> None:
    """Stop the cyclic GC traversing those of ``containers`` with ``UNTRACK_MIN`` entries
    or more. Only for immutable containers that nothing refers back to."""
    if _untrack is None:
        return
    for c in containers:
        if len(c) >= UNTRACK_MIN and gc.is_tracked(c):
            _untrack(c)


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
                if gc.get_count()[0] >= AGE_MIN and not gc.get_freeze_count():
                    # Straight into the oldest generation (two list splices): re-enabled as
                    # is, the next young collection would walk every object just built,
                    # results a caller frees by reference count a moment later included.
                    # Not when the process froze objects itself: unfreeze would undo that.
                    # (get_freeze_count walks the frozen list: asked only past AGE_MIN.)
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()


def cyclic_gc_paused(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` inside ``no_cyclic_gc``. For functions that build a new state: its new big
    vectors are untracked before it returns, so no collection can catch them tracked."""

    @functools.wraps(fn)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        with no_cyclic_gc():
            return fn(*args, **kwargs)

    return paused


__all__ = ["AGE_MIN", "UNTRACK_MIN", "cyclic_gc_paused", "no_cyclic_gc", "untrack_large"]
