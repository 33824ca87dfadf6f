"""OrderedPMap: a persistent, insertion-ordered mapping built on pyrsistent's C pvector.

pyrsistent's ``pmap`` is unordered and pure Python (about 8 µs per ``set`` at 100k keys),
too slow for a 100k-command fold in under a second. This map keeps three pvectors:

- ``_keys`` / ``_vals``: slot -> key / value, slots allocated in insertion order, so
  iteration is a C-level walk of ``_vals`` and an updated key keeps its slot (position);
- ``_buckets``: a hash table whose buckets are small flat tuples ``(key, slot, ...)``,
  sized to the next power of two above the live count and rebuilt when it doubles
  (amortised O(1)).

Every write is a few pvector ``set``/``append`` calls, O(log32 n), sharing structure with
the previous version, which stays valid and unchanged. A removal leaves a hole in the slot
vectors; holes are compacted away (O(n), amortised) once they outnumber live entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from itertools import repeat
from typing import Any, Generic, TypeVar, cast, overload

from pyrsistent import pvector

from schemas.gc_guard import untrack_large

K = TypeVar("K")
V = TypeVar("V")
D = TypeVar("D")


class _Hole:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<hole>"


_HOLE: Any = _Hole()
HOLE: Any = _HOLE  # what a removed slot holds in ``slot_values()``
_MIN_BUCKETS = 8
_EMPTY_VEC: Any = pvector()
_new = object.__new__


def _bucket_count(n: int) -> int:
    nb = _MIN_BUCKETS
    while nb < n:
        nb <<= 1
    return nb


def _build_buckets(keys: Iterable[Any], slots: Iterable[int], nb: int) -> Any:
    table: list[Any] = [None] * nb
    mask = nb - 1
    for k, s in zip(keys, slots, strict=True):
        h = hash(k) & mask
        b = table[h]
        table[h] = (k, s) if b is None else b + (k, s)
    return pvector(table)


class OrderedPMap(MutableMapping[K, V], Generic[K, V]):
    """Persistent, insertion-ordered mapping: ``set``/``remove``/... return a new map and
    leave this one as it was.

    It also takes dict-style assignment (``m[k] = v``, ``del m[k]``, ``pop``, ``update``,
    ...), as the seed's ``GraphState.items`` (a dict) does: that rebinds THIS map object to
    new vectors, O(log n), and bumps ``version()``. Other maps sharing its structure are
    not touched, so a map made by ``copy()`` is independent. Objects holding a map (the
    graph states) compare versions to notice such an assignment and rebuild what they
    derived from it.
    """

    __slots__ = ("_buckets", "_mask", "_keys", "_vals", "_len", "_cache", "_derived", "_ver")

    _buckets: Any
    _mask: int
    _keys: Any
    _vals: Any
    _len: int
    _cache: tuple[V, ...] | None
    _derived: dict[str, Any] | None
    _ver: int

    def __init__(self, pairs: Iterable[tuple[K, V]] | Mapping[K, V] = ()) -> None:
        # dict semantics for duplicates: the last value wins, the first position is kept.
        src = dict(pairs)
        keys = list(src)
        nb = _bucket_count(len(keys))
        self._init(
            _build_buckets(keys, range(len(keys)), nb),
            nb - 1,
            pvector(keys),
            pvector(src.values()),
            len(keys),
        )

    def _init(self, buckets: Any, mask: int, keys: Any, vals: Any, length: int) -> None:
        self._buckets = buckets
        self._mask = mask
        self._keys = keys
        self._vals = vals
        self._len = length
        self._cache = None
        self._derived = None
        self._ver = 0

    @classmethod
    def _make(cls, buckets: Any, mask: int, keys: Any, vals: Any, length: int) -> OrderedPMap:
        new = _new(cls)
        new._buckets = buckets
        new._mask = mask
        new._keys = keys
        new._vals = vals
        new._len = length
        new._cache = None
        new._derived = None
        new._ver = 0
        return new

    # -- reads ---------------------------------------------------------------------------

    def _slot(self, key: object) -> int:
        b = self._buckets[hash(key) & self._mask]
        if b is None:
            return -1
        k0 = b[0]
        if k0 is key or k0 == key:
            return cast(int, b[1])
        for i in range(2, len(b), 2):
            k = b[i]
            if k is key or k == key:
                return cast(int, b[i + 1])
        return -1

    def __getitem__(self, key: K) -> V:
        slot = self._slot(key)
        if slot < 0:
            raise KeyError(key)
        return cast(V, self._vals[slot])

    @overload
    def get(self, key: K, /) -> V | None: ...
    @overload
    def get(self, key: K, default: V | D, /) -> V | D: ...
    def get(self, key: K, default: Any = None) -> Any:
        slot = self._slot(key)
        return default if slot < 0 else self._vals[slot]

    def __contains__(self, key: object) -> bool:
        return self._slot(key) >= 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[K]:
        if len(self._keys) == self._len:
            return iter(self._keys)
        return (k for k, v in zip(self._keys, self._vals, strict=True) if v is not _HOLE)

    def position(self, key: K) -> int:
        """Monotonic with insertion order (an updated key keeps its position)."""
        slot = self._slot(key)
        if slot < 0:
            raise KeyError(key)
        return slot

    def slot_values(self) -> Any:
        """The slot vector (a pvector; removed slots hold ``HOLE``), indexed by ``position``.

        Slots stay stable until a compaction, which shrinks ``slot_count()``.
        """
        return self._vals

    def slot_count(self) -> int:
        """Allocated slots (live + holes); the next ``set_new`` fills slot ``slot_count()``."""
        return len(self._keys)

    def vectors(self) -> tuple[Any, Any, Any]:
        """The three pvectors behind the map (for ``untrack_large``)."""
        return self._buckets, self._keys, self._vals

    def has_holes(self) -> bool:
        return len(self._keys) != self._len

    def values_tuple(self) -> tuple[V, ...]:
        """All values in insertion order, computed once per (immutable) map."""
        cache = self._cache
        if cache is None:
            if len(self._vals) == self._len:
                cache = tuple(self._vals)
            else:
                cache = tuple(v for v in self._vals if v is not _HOLE)
            untrack_large((cache,))
            self._cache = cache
        return cache

    def derived_if_built(self, name: str) -> Any:
        """What ``derived(name, ...)`` cached, or None if it has not been built."""
        cache = self._derived
        return None if cache is None else cache.get(name)

    def derived(self, name: str, build: Callable[[OrderedPMap[K, V]], D]) -> D:
        """``build(self)``, computed once per (immutable) map and cached under ``name``.

        For read-side indexes that are cheaper to build on demand than to maintain on
        every write (e.g. items by scope): the first query of a state pays O(n).
        """
        cache = self._derived
        if cache is None:
            cache = self._derived = {}
        if name not in cache:
            cache[name] = build(self)
        return cast(D, cache[name])

    def values(self) -> _ValuesView[V]:  # type: ignore[override]
        return _ValuesView(self)

    def items(self) -> _ItemsView[K, V]:  # type: ignore[override]
        return _ItemsView(self)

    def __repr__(self) -> str:
        return repr(dict(self.items()))  # as the seed's dicts print

    def __reduce__(self) -> tuple[Any, ...]:
        # Buckets depend on the process's hash seed: pickle the pairs, rebuild on load.
        return (OrderedPMap, (list(self.items()),))

    # -- writes (persistent) -------------------------------------------------------------

    def set(self, key: K, value: V) -> OrderedPMap[K, V]:
        """A map with ``key`` bound to ``value`` (an existing key keeps its position)."""
        h = hash(key) & self._mask
        b = self._buckets[h]
        if b is not None:
            for i in range(0, len(b), 2):
                k = b[i]
                if k is key or k == key:
                    slot = b[i + 1]
                    vals = self._vals
                    if vals[slot] is value:
                        return self
                    return self._make(
                        self._buckets, self._mask, self._keys, vals.set(slot, value), self._len
                    )
        return self._append(h, b, key, value)

    def set_new(self, key: K, value: V) -> OrderedPMap[K, V]:
        """Like ``set`` for a key known to be absent; KeyError if present (one lookup)."""
        h = hash(key) & self._mask
        b = self._buckets[h]
        if b is not None:
            for i in range(0, len(b), 2):
                k = b[i]
                if k is key or k == key:
                    raise KeyError(key)
        return self._append(h, b, key, value)

    def extend_new(self, keys: list[K], values: list[V]) -> OrderedPMap[K, V]:
        """``set_new`` of each pair in order, in one batch: each vector is extended or
        edited once, not copied once per key. The caller guarantees the keys are distinct
        and absent (nothing is checked here)."""
        if not keys:
            return self
        first = len(self._keys)
        all_keys = self._keys.extend(keys)
        vals = self._vals.extend(values)
        n = self._len + len(keys)
        if n > self._mask + 1:
            return self._rebuilt(all_keys, vals, n)
        mask = self._mask
        buckets = self._buckets.evolver()
        for slot, key in enumerate(keys, first):
            h = hash(key) & mask
            b = buckets[h]
            buckets[h] = (key, slot) if b is None else b + (key, slot)
        return self._make(buckets.persistent(), mask, all_keys, vals, n)

    def _append(self, h: int, b: Any, key: K, value: V) -> OrderedPMap[K, V]:
        keys = self._keys
        slot = len(keys)
        keys = keys.append(key)
        vals = self._vals.append(value)
        n = self._len + 1
        if n > self._mask + 1:
            return self._rebuilt(keys, vals, n)
        new = _new(OrderedPMap)
        new._buckets = self._buckets.set(h, (key, slot) if b is None else b + (key, slot))
        new._mask = self._mask
        new._keys = keys
        new._vals = vals
        new._len = n
        new._cache = None
        new._derived = None
        new._ver = 0
        return new

    def remove(self, key: K) -> OrderedPMap[K, V]:
        h = hash(key) & self._mask
        b = self._buckets[h]
        if b is not None:
            for i in range(0, len(b), 2):
                k = b[i]
                if k is key or k == key:
                    slot = b[i + 1]
                    rest = b[:i] + b[i + 2 :]
                    vals = self._vals.set(slot, _HOLE)
                    n = self._len - 1
                    holes = len(self._keys) - n
                    if holes > 32 and holes > n:
                        return self._rebuilt(self._keys, vals, n)
                    buckets = self._buckets.set(h, rest or None)
                    return self._make(buckets, self._mask, self._keys, vals, n)
        raise KeyError(key)

    # -- dict-style assignment (in place; see the class docstring) ---------------------------

    def version(self) -> int:
        """How many in-place assignments this map object has taken."""
        return self._ver

    def _become(self, other: OrderedPMap[K, V]) -> None:
        if self is EMPTY:
            raise TypeError("the shared empty OrderedPMap cannot be assigned to; copy() it")
        self._buckets, self._mask, self._keys = other._buckets, other._mask, other._keys
        self._vals, self._len = other._vals, other._len
        self._cache = None
        self._derived = None
        self._ver += 1

    def __setitem__(self, key: K, value: V) -> None:
        self._become(self.set(key, value))

    def __delitem__(self, key: K) -> None:
        self._become(self.remove(key))

    def clear(self) -> None:
        self._become(EMPTY)

    def copy(self) -> OrderedPMap[K, V]:
        """An independent map with the same entries: O(1), the vectors are shared."""
        return self._make(self._buckets, self._mask, self._keys, self._vals, self._len)

    def __copy__(self) -> OrderedPMap[K, V]:
        return self.copy()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dict

    def to_dict(self) -> dict[K, V]:
        """A plain dict copy (insertion order), built at C speed when there are no holes:
        for a caller about to look up a large share of the keys."""
        if len(self._keys) == self._len:
            return dict(zip(self._keys, self._vals, strict=True))
        return dict(self.items())

    def pop_many(
        self, keys: Iterable[K], strict: bool = True
    ) -> tuple[OrderedPMap[K, V], list[V | None]]:
        """The map without ``keys`` (distinct) and their values, in one batch: the vectors
        are edited in place through evolvers and frozen once, instead of one persistent
        copy per key. An absent key: KeyError if ``strict``, else its value is None."""
        if isinstance(keys, list | tuple) and 2 * len(keys) >= self._len:
            # Most of the map goes: popping from a C-level dict copy and building the rest
            # anew beats editing the vectors key by key.
            d = self.to_dict()
            try:
                popped = list(map(d.pop, keys) if strict else map(d.pop, keys, repeat(None)))
            except KeyError:
                raise KeyError(next((k for k in keys if k not in self), keys[0])) from None
            if len(d) == self._len:
                return self, popped
            return OrderedPMap(d.items()), popped
        buckets = self._buckets.evolver()
        vals = self._vals.evolver()
        mask = self._mask
        n = self._len
        out: list[V | None] = []
        append = out.append
        hole = _HOLE
        for key in keys:
            h = hash(key) & mask
            b = buckets[h]
            if b is not None:
                k0 = b[0]
                if k0 is key or k0 == key:
                    i = 0
                else:
                    for i in range(2, len(b), 2):
                        k = b[i]
                        if k is key or k == key:
                            break
                    else:
                        i = -1
                if i >= 0:
                    slot = b[i + 1]
                    append(vals[slot])
                    vals[slot] = hole
                    buckets[h] = (b[:i] + b[i + 2 :]) or None
                    n -= 1
                    continue
            if strict:
                raise KeyError(key)
            append(None)
        if n == self._len:
            return self, out
        new_vals = vals.persistent()
        holes = len(self._keys) - n
        if holes > 32 and holes > n:
            return self._rebuilt(self._keys, new_vals, n), out
        return self._make(buckets.persistent(), mask, self._keys, new_vals, n), out

    def discard(self, key: K) -> OrderedPMap[K, V]:
        return self.remove(key) if key in self else self

    def _rebuilt(self, keys: Any, vals: Any, n: int) -> OrderedPMap[K, V]:
        if len(keys) != n:  # compact holes away; relative order is kept
            live = [(k, v) for k, v in zip(keys, vals, strict=True) if v is not _HOLE]
            keys = pvector([k for k, _ in live])
            vals = pvector([v for _, v in live])
        nb = _bucket_count(n * 4)
        return self._make(_build_buckets(keys, range(n), nb), nb - 1, keys, vals, n)


class _ValuesView(Generic[V]):
    __slots__ = ("_m",)

    def __init__(self, m: OrderedPMap[Any, V]) -> None:
        self._m = m

    def __iter__(self) -> Iterator[V]:
        return iter(self._m.values_tuple())

    def __len__(self) -> int:
        return len(self._m)

    def __contains__(self, value: object) -> bool:
        return value in self._m.values_tuple()

    def __repr__(self) -> str:
        return f"values({list(self)!r})"


class _ItemsView(Generic[K, V]):
    __slots__ = ("_m",)

    def __init__(self, m: OrderedPMap[K, V]) -> None:
        self._m = m

    def __iter__(self) -> Iterator[tuple[K, V]]:
        m = self._m
        return ((k, v) for k, v in zip(m._keys, m._vals, strict=True) if v is not _HOLE)

    def __len__(self) -> int:
        return len(self._m)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, tuple) or len(item) != 2:
            return False
        k, v = item
        return k in self._m and self._m[k] == v

    def __repr__(self) -> str:
        return f"items({list(self)!r})"


EMPTY: OrderedPMap[Any, Any] = OrderedPMap()


def empty() -> OrderedPMap[Any, Any]:
    return EMPTY


# -- small persistent sets, used as index values ---------------------------------------------
# Most index sets (children of a parent, edges at an endpoint) hold one or two ids: a tuple is
# far cheaper than a map. Past _SMALL members a set becomes an OrderedPMap so adding to a hub
# with 100k children stays O(log n) instead of copying the tuple.

_SMALL = 16
SmallSet = tuple[str, ...] | OrderedPMap[str, bool]


def sset_add(s: SmallSet | None, x: str) -> SmallSet:
    if s is None:
        return (x,)
    if isinstance(s, tuple):
        if x in s:
            return s
        if len(s) < _SMALL:
            return s + (x,)
        return OrderedPMap([(m, True) for m in s]).set(x, True)
    return s.set(x, True)


def sset_remove(s: SmallSet | None, x: str) -> SmallSet | None:
    """The set without x; None once empty."""
    if s is None:
        return None
    if isinstance(s, tuple):
        if x not in s:
            return s
        rest = tuple(m for m in s if m != x)
        return rest or None
    if x not in s:
        return s
    s = s.remove(x)
    return s if len(s) else None


def sset_iter(s: SmallSet | None) -> Iterable[str]:
    if s is None:
        return ()
    return s


__all__ = [
    "EMPTY",
    "HOLE",
    "OrderedPMap",
    "SmallSet",
    "empty",
    "sset_add",
    "sset_iter",
    "sset_remove",
]
