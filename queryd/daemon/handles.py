"""The logs a daemon serves: hydration, following, and waiting for a seq.

Each served log is a `LogHandle` around a `producers.memory.Memory` over its location (the
embedded file or a Kafka topic; the log adapter does the hydration from the Redis snapshot
and the following). A background thread opens it (retrying until it can), then refreshes
the handle's current state every `poll_interval` seconds; readers take that state without
blocking, and a reader asking for at least a seq waits, bounded, for the state to get there.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from producers.memory import Memory
from projector.log_state import LogState
from schemas.errors import LocationError, MemstreamError

__all__ = [
    "LogHandle",
    "LogRegistry",
    "NotReady",
    "SeqTimeout",
    "log_name",
]

log = logging.getLogger("memstream.queryd.logs")


class NotReady(MemstreamError):
    """The log is still hydrating (or cannot be opened yet)."""


class SeqTimeout(MemstreamError):
    """The state did not reach the asked seq in time."""

    def __init__(self, name: str, min_seq: int, reached: int | None, timeout: float) -> None:
        self.name, self.min_seq, self.reached, self.timeout = name, min_seq, reached, timeout
        where = "no record yet" if reached is None else f"seq {reached}"
        super().__init__(
            f"min_seq: timed out after {timeout:g} s waiting for log {name!r} to reach seq "
            f"{min_seq}; the state reached {where}"
        )


def log_name(location: str) -> str:
    """The name a log is served under: the Kafka topic, or the directory's name."""
    text = str(location)
    if text.startswith("kafka://"):
        topic = urlsplit(text).path.strip("/")
        if not topic or "/" in topic:
            raise LocationError(f"location {text!r}: expected kafka://HOST:PORT/LOG")
        return topic
    name = Path(text).expanduser().resolve().name
    if not name:
        raise LocationError(f"location {text!r}: a log directory needs a name")
    return name


def open_for_reading(location: str) -> Memory:
    """A served log, opened as a reader: one that does not exist is an error, not created."""
    return Memory(location, create=False)


def _seq_reached(state: LogState | None, min_seq: int) -> bool:
    return state is not None and state.last_seq is not None and state.last_seq >= min_seq


class LogHandle:
    """One served log: its name, location, `Memory`, and current state."""

    def __init__(
        self,
        location: str,
        *,
        name: str | None = None,
        poll_interval: float = 0.02,
        opener: Callable[[str], Memory] = open_for_reading,
    ) -> None:
        self.location = str(location)
        self.name = name or log_name(self.location)
        self.mode = "kafka" if self.location.startswith("kafka://") else "embedded"
        self.poll_interval = poll_interval
        self._opener = opener
        self.memory: Memory | None = None
        self.state: LogState | None = None
        self.error: str | None = None
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._lock = threading.Lock()

    # -- lifetime -----------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Open and follow the log in a background thread; `loop` gets change notices.

        Starting again only binds another loop (an app may be given a started registry)."""
        self._loop = loop
        if loop is not None:
            self._changed = asyncio.Event()
        if self._thread is not None:  # already following: only (re)bind the loop
            return
        self._thread = threading.Thread(
            target=self._run, name=f"memstream-queryd-{self.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                memory = self._opener(self.location)
                state = memory.log.state()
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("log %s: cannot open yet (%s); retrying", self.name, self.error)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                continue
            self.memory = memory
            self.error = None
            self._publish(state)
            self.ready.set()
            log.info("log %s: hydrated at seq %s", self.name, state.last_seq)
            break
        while not self._stop.wait(self.poll_interval):
            try:
                self.refresh()
            except Exception:
                log.warning("log %s: refresh failed", self.name, exc_info=True)
                self._stop.wait(1.0)

    def stop(self) -> None:
        """Stop following and close the log; `start` may open it again afterwards."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread, self._stop = None, threading.Event()
        self.ready.clear()
        self.state = None
        memory, self.memory = self.memory, None
        if memory is not None:
            try:
                memory.close()
            except Exception:
                log.warning("log %s: close failed", self.name, exc_info=True)

    # -- state --------------------------------------------------------------------------------

    def _publish(self, state: LogState) -> None:
        with self._lock:
            current = self.state
            old = -1 if current is None or current.last_seq is None else current.last_seq
            new = -1 if state.last_seq is None else state.last_seq
            if current is not None and new <= old:
                return
            self.state = state
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._notify)
            except RuntimeError:  # the loop closed meanwhile
                pass

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        if changed is not None:
            changed.set()

    def refresh(self) -> LogState:
        """Fold what the log has now (blocking) and publish it."""
        memory = self.memory
        if memory is None:
            raise NotReady(self.not_ready_message())
        state = memory.log.state()
        self._publish(state)
        return state

    def not_ready_message(self) -> str:
        why = f": {self.error}" if self.error else ""
        return f"log {self.name!r} is not ready yet (hydrating){why}"

    def current(self) -> LogState:
        """The newest state this handle has; NotReady while hydrating."""
        state = self.state
        if state is None or not self.ready.is_set():
            raise NotReady(self.not_ready_message())
        return state

    async def at_least(self, min_seq: int | None, timeout: float) -> LogState:
        """The current state, once it reflects at least `min_seq`; SeqTimeout otherwise."""
        state = self.current()
        if min_seq is None or _seq_reached(state, min_seq):
            return state
        deadline = time.monotonic() + timeout
        state = await asyncio.to_thread(self.refresh)
        while not _seq_reached(state, min_seq):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SeqTimeout(self.name, min_seq, state.last_seq, timeout)
            changed = self._changed
            if changed is None or self._loop is not asyncio.get_running_loop():
                # no notices for this loop: poll
                await asyncio.sleep(min(self.poll_interval, remaining))
            else:
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except TimeoutError:
                    pass
            state = self.current()
        return state

    def head(self) -> int | None:
        """The seq of the log's last record, folded or not, where the log can tell."""
        memory = self.memory
        if memory is None:
            return None if self.state is None else self.state.last_seq
        head = getattr(memory.log, "head", None)
        if head is not None:
            return head()  # type: ignore[no-any-return]
        end_offset = getattr(memory.log, "end_offset", None)  # a Kafka log's high watermark
        if end_offset is not None:
            end = int(end_offset())
            return end - 1 if end > 0 else None
        return None if self.state is None else self.state.last_seq

    def lag(self) -> int:
        """Records in the log that the served state does not reflect yet."""
        state = self.state
        head = self.head()
        if head is None:
            return 0
        last = -1 if state is None or state.last_seq is None else state.last_seq
        return max(0, head - last)


class LogRegistry:
    """The served logs by name."""

    def __init__(self, handles: Iterable[LogHandle]) -> None:
        self.handles: dict[str, LogHandle] = {}
        self._users = 0
        self._users_lock = threading.Lock()
        for handle in handles:
            if handle.name in self.handles:
                raise LocationError(
                    f"two logs would be served under the name {handle.name!r}: "
                    f"{self.handles[handle.name].location!r} and {handle.location!r}"
                )
            self.handles[handle.name] = handle

    @classmethod
    def from_locations(cls, locations: Iterable[str], **kwargs: object) -> LogRegistry:
        return cls(LogHandle(loc, **kwargs) for loc in locations)  # type: ignore[arg-type]

    def get(self, name: str) -> LogHandle | None:
        return self.handles.get(name)

    @property
    def started(self) -> bool:
        return any(h._thread is not None for h in self.handles.values())

    def acquire(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start following (first user) or bind `loop`; every acquire needs a release."""
        with self._users_lock:
            self._users += 1
            self.start(loop)

    def release(self) -> None:
        """Stop following once the last user (an app's lifespan, a test) releases."""
        with self._users_lock:
            self._users -= 1
            if self._users <= 0:
                self._users = 0
                self.stop()

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        for handle in self.handles.values():
            handle.start(loop)

    def stop(self) -> None:
        for handle in self.handles.values():
            handle.stop()

    def all_ready(self) -> bool:
        return all(h.ready.is_set() for h in self.handles.values())

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        for handle in self.handles.values():
            if not handle.ready.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True
