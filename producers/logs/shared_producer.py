"""One Kafka producer per process for every log that appends with the same configuration.

A process appending to many logs (an agent host serving many sessions, a writer of the
cluster bench) held one librdkafka producer per log: its own threads and connections, and
its own produce request to the broker every ``linger.ms``. The broker then answered one
small request per log, and a dozen logs per process cut what eight such processes appended
together from 31,900/s (one log each) to 9,800/s (12 each). Shared, one producer packs the
batches of all its logs into one request per broker (18,400/s in the same run); a log's
own delivery model (`producers.logs.kafka`) is otherwise unchanged: each record still has
its own delivery report, and its log its own deadlines.

What sharing changes, and each log must know:

- `Producer.purge` acts on the whole producer. A log that gives up on the producer at its
  deadline, or retires one that failed, drops what other logs have in it too: librdkafka
  reports their queued records as never sent and those in flight with an unknown outcome,
  so those appends fail, truthfully, and say why.
- Client errors (a broker connection lost) are told to every log sharing the producer.
- A producer given up or failed is `retire`d: the next log to ask gets a new one; a log
  still holding the old one goes on with it (it holds nothing it sent before: no record
  can be sent twice) until its own deadline or a fatal error makes it ask.
- A process forked after a producer was made gets its own (librdkafka does not survive a
  fork).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, Producer

__all__ = ["SharedProducers", "PRODUCERS"]

Listener = Callable[[KafkaError], None]


class _Entry:
    __slots__ = ("producer", "key", "pid", "listeners", "acked")

    def __init__(self, key: str) -> None:
        self.key = key
        self.pid = os.getpid()
        self.listeners: list[Listener] = []
        # Whether any record of any log was acknowledged through it: until then a refused
        # producer id means nothing of it was ever sent.
        self.acked = False
        self.producer: Producer | None = None

    def tell(self, error: KafkaError) -> None:
        for listener in list(self.listeners):
            listener(error)


def _key(conf: dict[str, Any]) -> str:
    # Callbacks are set here (one per producer), so they are not part of what is shared.
    return repr(sorted((name, value) for name, value in conf.items() if not callable(value)))


class SharedProducers:
    """The producers of one process, by configuration (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: dict[str, _Entry] = {}  # configuration -> the producer handed out
        self._entries: dict[int, _Entry] = {}  # id(producer) -> its entry, while in use

    def acquire(self, conf: dict[str, Any], listener: Listener) -> Producer:
        """The process's producer for `conf` (made now if there is none, or it was
        retired); `listener` is told its client errors until `release`. Raises what
        `Producer` raises for a configuration it refuses."""
        key = _key(conf)
        with self._lock:
            entry = self._current.get(key)
            if entry is None or entry.pid != os.getpid():
                entry = _Entry(key)
                entry.producer = Producer({**conf, "error_cb": entry.tell})
                self._current[key] = entry
                self._entries[id(entry.producer)] = entry
            entry.listeners.append(listener)
            assert entry.producer is not None
            return entry.producer

    def release(self, producer: Producer, listener: Listener) -> None:
        """`listener`'s log no longer uses `producer`; the last to let go drops it (its
        records were served before: a log flushes before it lets go)."""
        with self._lock:
            entry = self._entries.get(id(producer))
            if entry is None or entry.producer is not producer:
                return
            if listener in entry.listeners:
                entry.listeners.remove(listener)
            if not entry.listeners:
                del self._entries[id(producer)]
                if self._current.get(entry.key) is entry:
                    del self._current[entry.key]

    def retire(self, producer: Producer) -> None:
        """`producer` failed: no log is handed it any more."""
        with self._lock:
            entry = self._entries.get(id(producer))
            if entry is not None and self._current.get(entry.key) is entry:
                del self._current[entry.key]

    def mark_acked(self, producer: Producer) -> None:
        entry = self._entries.get(id(producer))
        if entry is not None and entry.producer is producer:
            entry.acked = True

    def acked(self, producer: Producer) -> bool:
        """Whether a record of any log was acknowledged through `producer`."""
        entry = self._entries.get(id(producer))
        return entry is not None and entry.producer is producer and entry.acked

    def users(self, producer: Producer) -> int:
        """How many logs hold `producer` now."""
        with self._lock:
            entry = self._entries.get(id(producer))
            return len(entry.listeners) if entry is not None and entry.producer is producer else 0


# The process's producers.
PRODUCERS = SharedProducers()
