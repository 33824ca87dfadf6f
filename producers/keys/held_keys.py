"""What a key store holds in memory, shared by the embedded store (`sqlite_keys`) and the
Kafka store (`kafka_keys`), which differ only in where a key is kept.

- The keys read or made, by id (`Held`), and each subject's shared key by subject.
- An AES-GCM context per key (`context`), and an AES-GCM-SIV one per key that seals graph
  values (`siv_context`): an append seals without setting its key up again.
- Keys made ahead for events that get a key of their own (an event without a session, or
  with a `retain_until`). Made one per append, such a key cost every append one more
  B-tree page in its commit (embedded) or one more acknowledged write before it (Kafka);
  made ahead, a store writes them in batches that double from its `ahead_first` (1 unless
  the store says otherwise) up to its `ahead_max` (`AHEAD_MAX` unless it says otherwise),
  durable before any record sealed under one is written. A key made ahead is stored
  without a subject (`UNASSIGNED` as its subject and event): the record sealed under it
  names its id, and that is how erasure and retention find an event's own key. So a
  process that appended n such events leaves at most about n unused keys when it ends
  (none of them seals anything), and an embedded process that appends once writes one key,
  as before. (The Kafka store starts at 16 keys and writes the next batch, on a thread,
  while the last is used: at most `ahead_max` more unused keys.)

Forgetting a key (destroyed, or made in a transaction that rolled back) drops its context
and any unused key made ahead with it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, TypeVar

from cryptography.hazmat.primitives.ciphers.aead import AESGCM, AESGCMSIV

from schemas.crypto.envelope import KEY_BYTES, KEY_ID_RANDOM, aead, aead_siv

__all__ = ["AHEAD_MAX", "UNASSIGNED", "Held", "HeldKeys"]

C = TypeVar("C")  # a context: AESGCM or AESGCMSIV

AHEAD_MAX = 64
UNASSIGNED = ""  # the subject and event stored with a key made ahead


class Held(NamedTuple):
    """A key in memory: its subject, its event (None: the subject's shared key), the key."""

    subject: str
    event_id: str | None
    key: bytes


class HeldKeys:
    """The in-memory half of a key store (see the module's docstring). Thread-safe; the
    store's methods hold `_lock` around what they read and write."""

    # The first and the largest batch of keys made ahead (see the module's docstring).
    ahead_first = 1
    ahead_max = AHEAD_MAX

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._by_id: dict[str, Held] = {}
        self._shared: dict[str, str] = {}  # subject -> the id of its shared key
        self._contexts: dict[str, AESGCM] = {}
        self._siv_contexts: dict[str, AESGCMSIV] = {}  # of shared keys that seal graph values
        # subject -> (key id, key, context) of its shared key, as `sealer` and
        # `siv_sealer` last gave it.
        self._sealers: dict[str, tuple[str, bytes, AESGCM]] = {}
        self._siv_sealers: dict[str, tuple[str, bytes, AESGCMSIV]] = {}
        # Graph items seen holding values in the wrapped form (``msenc1``, logs written
        # before 7 December), noted as they are opened; their new values are sealed alike
        # (`producers.keys.cipher`). Knowledge of the log, not keys: `forget_all` keeps it.
        self._wrapped_items: set[str] = set()
        self._ahead: list[str] = []  # ids of durable keys made ahead, not used yet
        self._batch = self.ahead_first  # how many keys the next batch makes

    def _hold(self, key_id: str, subject: str, event_id: str | None, key: bytes) -> None:
        with self._lock:
            self._by_id[key_id] = Held(subject, event_id, key)
            if event_id is None:
                self._shared[subject] = key_id

    def holds(self, key_id: str) -> bool:
        """Whether the key `key_id` is held now (no lookup in the store)."""
        return key_id in self._by_id

    def _kept(self, cache: dict[str, C], key_id: str, key: bytes, make: Callable[[bytes], C]) -> C:
        """`make(key)` from `cache`: kept there while `key_id` is a held shared key."""
        with self._lock:
            found = cache.get(key_id)
            if found is None:
                found = make(key)
                held = self._by_id.get(key_id)
                if held is not None and held.event_id is None:
                    cache[key_id] = found
            return found

    def context(self, key_id: str, key: bytes) -> AESGCM:
        """The AES-GCM context of `key` (named `key_id`): made once while it is held when
        it is a subject's shared key, made each time for a key of one event (a context
        holds about 1.3 KB: kept for every event, they grew a writer or reader by that
        much an event)."""
        return self._kept(self._contexts, key_id, key, aead)

    def siv_context(self, key_id: str, key: bytes) -> AESGCMSIV:
        """The AES-GCM-SIV context of `key` (graph values), kept as `context` keeps one."""
        return self._kept(self._siv_contexts, key_id, key, aead_siv)

    def key_for(self, subject: str, event_id: str | None = None) -> tuple[str, bytes]:
        """(key id, key) to seal an event of `subject` with (each store's own)."""
        raise NotImplementedError

    def sealer(self, subject: str) -> tuple[str, bytes, AESGCM]:
        """`key_for(subject)` with its `context`: what an append seals a subject's event
        with (`_ready`)."""
        return self._ready(self._sealers, subject, self.context)

    def siv_sealer(self, subject: str) -> tuple[str, bytes, AESGCMSIV]:
        """`key_for(subject)` with its `siv_context`: what an append seals a subject's
        graph values with (`_ready`)."""
        return self._ready(self._siv_sealers, subject, self.siv_context)

    def _ready(
        self,
        cache: dict[str, tuple[str, bytes, C]],
        subject: str,
        context: Callable[[str, bytes], C],
    ) -> tuple[str, bytes, C]:
        # Answered from memory, without the lock, while the subject's shared key is still
        # the one `key_for` gives (held, not forgotten, not replaced): the check is the
        # one lookup `key_for` itself starts with.
        found = cache.get(subject)
        if found is not None and self._shared.get(subject) == found[0]:
            return found
        key_id, key = self.key_for(subject)
        found = (key_id, key, context(key_id, key))
        cache[subject] = found
        return found

    @property
    def wrapped_items(self) -> set[str]:
        return self._wrapped_items

    def _take_ahead(self) -> tuple[str, bytes, AESGCM] | None:
        """An unused key made ahead, now used, with its context, which is handed over
        and no longer kept: a key of one event seals once (None: none left)."""
        with self._lock:
            while self._ahead:
                key_id = self._ahead.pop()
                held = self._by_id.get(key_id)
                if held is not None:
                    context = self._contexts.pop(key_id, None)
                    return key_id, held.key, aead(held.key) if context is None else context
            return None

    def _next_batch(self) -> list[tuple[str, bytes]]:
        """The (id, key) pairs of the next batch to make ahead: twice the last, at most
        `ahead_max`. The store writes them, then calls `_made_ahead`.

        Ids and keys as `new_key_id` and `new_key` make them, from one read of the
        system's random source for the whole batch (one read each cost every key made
        ahead about a microsecond, a fifth of what an own key costs an append)."""
        with self._lock:
            count, self._batch = self._batch, min(self._batch * 2, self.ahead_max)
        # One clock reading: the batch's ids share their time part and sort together.
        stamp = f"{time.time_ns() // 1_000_000 & 0xFFFFFFFFFFFF:012x}"
        size = KEY_ID_RANDOM + KEY_BYTES
        pool = os.urandom(size * count)
        return [
            (stamp + pool[at : at + KEY_ID_RANDOM].hex(), pool[at + KEY_ID_RANDOM : at + size])
            for at in range(0, size * count, size)
        ]

    def _made_ahead(
        self, batch: list[tuple[str, bytes]], contexts: list[AESGCM] | None = None
    ) -> None:
        """`batch` is durable in the store (or, embedded, in the open transaction);
        `contexts`: its keys' `aead`, in order, when the caller made them already."""
        if contexts is None:
            # Set up now, in one loop: made one at a time by the appends that use them,
            # each context cost an append 7 µs instead of about 1.
            contexts = [aead(key) for _, key in batch]
        with self._lock:
            for (key_id, key), context in zip(batch, contexts, strict=True):
                self._by_id[key_id] = Held(UNASSIGNED, UNASSIGNED, key)
                self._contexts[key_id] = context
            # Taken from the end: the first made is used first (ids in time order).
            self._ahead.extend(key_id for key_id, _ in reversed(batch))

    def forget_ids(self, key_ids: Iterable[str]) -> None:
        with self._lock:
            for key_id in key_ids:
                self._contexts.pop(key_id, None)
                self._siv_contexts.pop(key_id, None)
                found = self._by_id.pop(key_id, None)
                if found is not None and self._shared.get(found.subject) == key_id:
                    del self._shared[found.subject]
                    self._sealers.pop(found.subject, None)
                    self._siv_sealers.pop(found.subject, None)

    def _forget_subject_here(self, subject: str) -> None:
        with self._lock:
            self.forget_ids([k for k, held in self._by_id.items() if held.subject == subject])
            self._shared.pop(subject, None)

    def forget_all(self) -> None:
        with self._lock:
            self._by_id.clear()
            self._shared.clear()
            self._sealers.clear()
            self._siv_sealers.clear()
            self._contexts.clear()
            self._siv_contexts.clear()
            self._ahead.clear()
