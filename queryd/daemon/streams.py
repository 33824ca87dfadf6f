"""Lifecycle streams served from one shared reader per log, and a cap on open streams.

Before, every SSE subscriber read the lifecycle stream on its own: on the embedded log
that is a fold of the whole log per subscriber (200 subscribers of a 20k-event log took
842 MB, and none got an event in 30 s). Now each log has one `LifecycleHub`:

- its **live reader** (a thread, started by the first subscriber) reads the lifecycle
  stream once, from the first subscriber's offset on, formats each event's SSE frame once,
  and keeps the newest frames in a ring bounded in frames and bytes. Every subscriber whose
  next offset the ring covers is served from it, in batches, by the event loop.
- a subscriber that needs offsets older than the ring (it connected with an old offset,
  or fell behind) boards the **replay train**: one more reader, shared by every such
  subscriber, that reads the stream from the lowest offset they need and hands each frame
  to the riders who want it, through per-rider buffers bounded in bytes. A rider whose
  buffer is full gets off rather than hold the others back (it keeps its place and
  boards the next train once it took its frames); when every rider is full, the train
  waits for them, at most `stall_timeout` seconds. Riders get off once
  the ring covers their next offset; a train with no riders ends.

So a log is read by at most two readers however many subscribe (on the embedded log: two
folds, not one per subscriber), memory is bounded by the ring, the riders' buffers and
those two readers, and `StreamLimit` caps the number of open streams (a 503 beyond it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from bisect import bisect_left
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from producers.logs.base import LifecycleRecord
from queryd.daemon.jsonlog import Throttle
from queryd.daemon.lifecycle import frame_seq, sse_frame

__all__ = ["HubSettings", "LifecycleHub", "LifecycleReader", "StreamLimit", "hub_stream"]

log = logging.getLogger("memstream.queryd.lifecycle")


@dataclass(frozen=True)
class HubSettings:
    """Bounds of a hub: the ring (frames, bytes), a rider's buffer, a stalled rider."""

    ring_frames: int = 10_000
    ring_bytes: int = 16 * 1024 * 1024
    rider_bytes: int = 256 * 1024
    stall_timeout: float = 1.0
    batch_frames: int = 256
    batch_bytes: int = 256 * 1024


class StreamLimit:
    """At most `limit` lifecycle streams open at once, all logs together (event loop only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.refused = 0

    def try_acquire(self) -> bool:
        if self.open >= self.limit:
            self.refused += 1
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open = max(0, self.open - 1)


class Subscriber:
    """One open stream: the next offset it needs, its wake-up, its replay buffer."""

    __slots__ = ("next", "wake", "buffer", "buffer_bytes", "want", "riding", "waiting")

    def __init__(self, next_offset: int) -> None:
        self.next = next_offset
        self.wake = asyncio.Event()
        # Frames the train handed over: (offset, frame), in order, starting at `next`.
        self.buffer: deque[tuple[int, str]] = deque()
        self.buffer_bytes = 0
        self.want = next_offset  # the next offset the train should hand over
        self.riding = False
        self.waiting = False  # asked for a train, not riding yet


# Reads a log's lifecycle stream from an offset on, following it until the event is set
# (`Memory.lifecycle`); raises when the log cannot be read.
LifecycleReader = Callable[[int, threading.Event], Iterator[LifecycleRecord]]


class LifecycleHub:
    """The shared lifecycle reader of the log named `name` (see the module docstring),
    reading the stream with `read`."""

    def __init__(
        self, name: str, read: LifecycleReader, settings: HubSettings | None = None
    ) -> None:
        self.name = name
        self._read = read
        self.settings = settings or HubSettings()
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)  # riders took frames from buffers
        # The ring: frames at increasing offsets; entries before `_head` are dropped.
        self._offsets: list[int] = []
        self._frames: list[str] = []
        self._head = 0
        self._bytes = 0
        self._covered = 0  # every offset in [_covered, _next) is in the ring (or none exists)
        self._next: int | None = None  # the next offset the live reader gives; None: not started
        self._live: threading.Thread | None = None
        self._train: threading.Thread | None = None
        self._train_at: int | None = None  # the offset the train reads next
        self._riders: list[Subscriber] = []
        self._waiting: list[Subscriber] = []
        self._subscribers: set[Subscriber] = set()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake_pending = False
        self._warn = Throttle(log, period=60.0)
        self.error: str | None = None
        self.trains = 0  # replay trains run
        self.stalls = 0  # riders put off a train for not taking their frames

    # -- lifetime (event loop) -----------------------------------------------------------------

    def attach(self, sub: Subscriber) -> None:
        """Register a stream; the first one starts the live reader at its offset."""
        self._loop = asyncio.get_running_loop()
        with self._lock:
            self._subscribers.add(sub)
            if self._live is None and not self._stop.is_set():
                self._next = self._covered = sub.next
                self._live = threading.Thread(
                    target=self._read_live,
                    name=f"memstream-lifecycle-{self.name}",
                    daemon=True,
                )
                self._live.start()

    def detach(self, sub: Subscriber) -> None:
        with self._lock:
            self._subscribers.discard(sub)
            if sub.riding:
                self._riders.remove(sub)
                sub.riding = False
            if sub.waiting:
                self._waiting.remove(sub)
                sub.waiting = False
            self._space.notify_all()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._space.notify_all()
        for thread in (self._live, self._train):
            if thread is not None:
                thread.join(timeout=5)

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    @property
    def ring_size(self) -> tuple[int, int]:
        """(frames, bytes) held in the ring."""
        return len(self._frames) - self._head, self._bytes

    def offset_after_seq(self, seq: int) -> int | None:
        """The first lifecycle offset caused by a record after `seq`, when the ring can
        tell (it holds a frame of `seq` or earlier, so nothing after `seq` fell out of
        it); None otherwise. A stream that wants only what follows `seq` starts there
        rather than replaying the log's whole lifecycle to skip it."""
        with self._lock:
            first, frames = self._head, self._frames
            if first >= len(frames) or self._next is None or frame_seq(frames[first]) > seq:
                return None
            at = len(frames)
            while at > first and frame_seq(frames[at - 1]) > seq:
                at -= 1
            return self._offsets[at] if at < len(frames) else self._next

    # -- serving a subscriber (event loop) -----------------------------------------------------

    def take(self, sub: Subscriber, max_frames: int) -> list[str]:
        """The next frames for `sub` (at most `max_frames`), from its replay buffer or the
        ring; none now: [] (it boards a train when the ring no longer has its offset)."""
        s = self.settings
        out: list[str] = []
        size = 0
        with self._lock:
            if sub.buffer:
                while sub.buffer and len(out) < max_frames and size < s.batch_bytes:
                    offset, frame = sub.buffer.popleft()
                    sub.buffer_bytes -= len(frame)
                    out.append(frame)
                    size += len(frame)
                    sub.next = offset + 1
                self._space.notify_all()
                return out
            if sub.riding or sub.waiting:
                return out
            nxt = self._next
            if nxt is None or sub.next >= nxt:
                return out  # nothing newer yet
            if sub.next < self._covered:
                self._board(sub)
                return out
            i = bisect_left(self._offsets, sub.next, self._head)
            offsets, frames = self._offsets, self._frames
            while i < len(frames) and len(out) < max_frames and size < s.batch_bytes:
                out.append(frames[i])
                size += len(frames[i])
                sub.next = offsets[i] + 1
                i += 1
            if not out and sub.next < nxt:  # the ring skipped a gap in the offsets
                sub.next = nxt
        return out

    def _board(self, sub: Subscriber) -> None:
        """Under the lock: put `sub` on the running train if it has not passed `sub`'s
        offset, else have it wait for the next one (started now when none runs)."""
        sub.want = sub.next
        at = self._train_at
        if self._train is not None and at is not None and at <= sub.want:
            sub.riding = True
            self._riders.append(sub)
            return
        sub.waiting = True
        self._waiting.append(sub)
        if self._train is None and not self._stop.is_set():
            self._train = threading.Thread(
                target=self._run_trains,
                name=f"memstream-lifecycle-replay-{self.name}",
                daemon=True,
            )
            self._train.start()

    # -- threads -------------------------------------------------------------------------------

    def _signal(self) -> None:
        """Wake the streams (coalesced: one callback on the loop at a time)."""
        loop = self._loop
        if loop is None or self._wake_pending:
            return
        self._wake_pending = True
        try:
            loop.call_soon_threadsafe(self._wake_all)
        except RuntimeError:  # the loop closed
            self._wake_pending = False

    def _wake_all(self) -> None:
        self._wake_pending = False
        for sub in list(self._subscribers):
            sub.wake.set()

    def _records(self, from_offset: int) -> Iterator[LifecycleRecord]:
        return self._read(from_offset, self._stop)

    def _read_live(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            start = self._next or 0
            try:
                for record in self._records(start):
                    self._add(record.offset, sse_frame(record))
                    backoff = 0.5
                    if self._stop.is_set():
                        return
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                self._warn.warning(
                    "live",
                    "log %s: the lifecycle stream failed at offset %d (%s); retrying",
                    self.name,
                    start,
                    self.error,
                )
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)

    def _add(self, offset: int, frame: str) -> None:
        s = self.settings
        with self._lock:
            offsets = self._offsets
            if len(offsets) > self._head and offset <= offsets[-1]:
                return  # read again after a restart: already here
            if offset < self._covered:
                self._covered = offset  # the stream started before the asked offset
            offsets.append(offset)
            self._frames.append(frame)
            self._bytes += len(frame)
            self._next = offset + 1
            # Keep at most ring_frames / ring_bytes, and always the newest frame.
            while len(self._frames) - self._head > 1 and (
                len(self._frames) - self._head > s.ring_frames or self._bytes > s.ring_bytes
            ):
                self._bytes -= len(self._frames[self._head])
                self._covered = self._offsets[self._head] + 1
                self._head += 1
            if self._head > 4096 and self._head * 2 > len(self._frames):
                del self._offsets[: self._head], self._frames[: self._head]
                self._head = 0
        self._signal()

    def _run_trains(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    if not self._waiting:
                        return
                    riders, self._waiting = self._waiting, []
                    for sub in riders:
                        sub.waiting, sub.riding = False, True
                    self._riders = riders
                    start = min(sub.want for sub in riders)
                    self._train_at = start
                    self.trains += 1
                try:
                    self._ride(start)
                except Exception as exc:
                    self._warn.warning(
                        "train",
                        "log %s: replaying the lifecycle stream from offset %d failed (%s)",
                        self.name,
                        start,
                        exc,
                    )
                    self._stop.wait(1.0)
                finally:
                    with self._lock:
                        for sub in self._riders:  # off the train: they board the next one
                            sub.riding = False
                        self._riders = []
                        self._train_at = None
                    self._signal()
        finally:
            with self._lock:
                self._train = None
                if self._waiting and not self._stop.is_set():  # came while this one ended
                    sub = self._waiting.pop()
                    sub.waiting = False
                    self._board(sub)

    def _ride(self, start: int) -> None:
        """One train: read from `start`, hand frames to riders, end when none is left."""
        s = self.settings
        records = self._records(start)
        try:
            for record in records:
                offset = record.offset
                frame = sse_frame(record)  # outside the lock: the loop takes it too
                with self._lock:
                    self._train_at = offset + 1
                    wanting = [r for r in self._riders if r.riding and offset >= r.want]
                    full = [r for r in wanting if r.buffer_bytes >= s.rider_bytes]
                    if full:
                        # Riders whose buffers are full get off (they board again once
                        # they took their frames) rather than hold the others back; when
                        # every rider is full, nobody is held back: wait for them a while.
                        if len(full) == len(self._riders):
                            self._wait_for_space(full)
                        for sub in full:
                            if sub.riding and sub.buffer_bytes >= s.rider_bytes:
                                self._riders.remove(sub)
                                sub.riding = False
                                self.stalls += 1
                    for sub in wanting:
                        if sub.riding:
                            sub.buffer.append((offset, frame))
                            sub.buffer_bytes += len(frame)
                            sub.want = offset + 1
                    # Off once the ring has what comes next (or nobody rides any more).
                    for sub in list(self._riders):
                        if sub.want >= self._covered:
                            self._riders.remove(sub)
                            sub.riding = False
                    if not self._riders or self._stop.is_set():
                        break
                self._signal()
        finally:
            close = getattr(records, "close", None)
            if close is not None:
                close()

    def _wait_for_space(self, full: list[Subscriber]) -> None:
        """Under the lock: until these riders took some frames, at most stall_timeout."""
        limit = self.settings.rider_bytes
        deadline = time.monotonic() + self.settings.stall_timeout
        while any(r.riding and r.buffer_bytes >= limit for r in full):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._stop.is_set():
                return
            self._signal()
            self._space.wait(min(remaining, 0.5))


async def hub_stream(
    hub: LifecycleHub,
    from_offset: int,
    *,
    limit: int | None = None,
    keepalive: float = 15.0,
    after_seq: int | None = None,
) -> AsyncIterator[str]:
    """The SSE body of one subscriber: frames from `from_offset` on, batched, with
    keep-alive comments when idle; ends after `limit` events. With `after_seq`, only the
    events caused by records after that seq are sent (the others are read, not sent)."""
    sub = Subscriber(from_offset)
    hub.attach(sub)
    sent = 0
    try:
        yield "retry: 1000\n\n"
        while limit is None or sent < limit:
            sub.wake.clear()
            want = (
                hub.settings.batch_frames
                if limit is None
                else min(hub.settings.batch_frames, limit - sent)
            )
            frames = hub.take(sub, want)
            if frames:
                if after_seq is not None:
                    frames = [f for f in frames if frame_seq(f) > after_seq]
                    if not frames:
                        continue
                sent += len(frames)
                yield "".join(frames)
                continue
            try:
                await asyncio.wait_for(sub.wake.wait(), keepalive)
            except TimeoutError:
                yield ": keep-alive\n\n"
    finally:
        hub.detach(sub)
