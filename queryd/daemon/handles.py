"""The logs a daemon serves: hydration, following, probing, and waiting for a seq.

Each served log is a `LogHandle` around a `producers.memory.Memory` over its location (the
embedded file or a Kafka topic; the log adapter does the hydration from the Redis snapshot
and the following). Three background threads per log do every blocking call, so no route
ever waits on the broker, Redis or the disk:

- the follower opens the log as a reader (retrying: a log that does not exist yet may be
  created later by a writer), then refreshes the handle's state every `poll_interval`;
- the prober asks the log for its head every `probe_interval` (one round trip to the
  broker on Kafka) and, on Kafka, reads the projector's status record from Redis;
- (on demand) the lifecycle hub, see `queryd.daemon.streams`.

Routes read what these threads last published: the state (`current`), the log's health
(`health`: ready, hydrating, missing or unavailable, with the cause), the head and the
projector's report. A probe outstanding longer than `probe_timeout` marks the log
unavailable at once, however long the driver itself would wait.

A registry with `idle_seconds` (issue 17: one daemon, many logs) drops a log not asked for
that long (`LogHandle.drop`: its threads stopped, its state and `Memory` let go; its health
says "idle") and hydrates it again, from its snapshot, when a request names it
(`LogRegistry.serve`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from producers.logs.base import LifecycleRecord
from producers.logs.location import is_kafka_location, parse_kafka_location, redact
from producers.memory import Memory
from projector.record_fold import LogState
from queryd.daemon.jsonlog import Throttle
from queryd.daemon.projector_status import ProjectorReport, ProjectorStatusReader
from queryd.daemon.streams import HubSettings, LifecycleHub
from schemas.errors import LocationError, LogNotFoundError, MemstreamError

__all__ = [
    "Health",
    "LogHandle",
    "LogRegistry",
    "NotReady",
    "SeqTimeout",
    "Unavailable",
    "log_name",
]

log = logging.getLogger("memstream.queryd.logs")

MAX_CAUSE = 500  # characters of a driver's error kept in a cause


class NotReady(MemstreamError):
    """The log is still hydrating, or does not exist (yet)."""


class Unavailable(MemstreamError):
    """The log's storage does not answer (broker or disk): fresh reads cannot be served."""

    def __init__(self, message: str, reached: int | None) -> None:
        super().__init__(message)
        self.reached = reached


class SeqTimeout(MemstreamError):
    """The state did not reach the asked seq in time."""

    def __init__(self, name: str, min_seq: int, reached: int | None, timeout: float) -> None:
        self.name, self.min_seq, self.reached, self.timeout = name, min_seq, reached, timeout
        where = "no record yet" if reached is None else f"seq {reached}"
        super().__init__(
            f"min_seq: timed out after {timeout:g} s waiting for log {name!r} to reach seq "
            f"{min_seq}; the state reached {where}"
        )


Status = Literal["hydrating", "missing", "ready", "unavailable", "idle"]
Mode = Literal["embedded", "kafka"]


@dataclass(frozen=True)
class Health:
    """A log's health as the routes report it (computed without blocking)."""

    status: Status
    cause: str | None = None

    @property
    def ready(self) -> bool:
        # An idle log is served: the request that names it hydrates it again.
        return self.status in ("ready", "idle")


def log_name(location: str) -> str:
    """The name a log is served under: the Kafka topic, or the directory's name."""
    text = str(location)
    if is_kafka_location(text):
        return parse_kafka_location(text).topic
    name = Path(text).expanduser().resolve().name
    if not name:
        raise LocationError(f"location {text!r}: a log directory needs a name")
    return name


def open_for_reading(location: str) -> Memory:
    """A served log, opened as a reader: one that does not exist is an error, not created."""
    return Memory(location, create=False)


def describe(exc: BaseException) -> str:
    """A driver's error as one bounded line: its class and message."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= MAX_CAUSE else text[: MAX_CAUSE - 3] + "..."


def _seq_reached(state: LogState | None, min_seq: int) -> bool:
    return state is not None and state.last_seq is not None and state.last_seq >= min_seq


class LogHandle:
    """One served log: its name, location, `Memory`, current state and health."""

    def __init__(
        self,
        location: str,
        *,
        name: str | None = None,
        poll_interval: float = 0.02,
        probe_interval: float = 1.0,
        probe_timeout: float = 2.0,
        reopen_interval: float = 10.0,
        opener: Callable[[str], Memory] = open_for_reading,
    ) -> None:
        self.location = str(location)
        self.name = name or log_name(self.location)
        self.mode: Mode = "kafka" if is_kafka_location(self.location) else "embedded"
        self.poll_interval = poll_interval
        self.probe_interval = probe_interval
        self.probe_timeout = probe_timeout
        self.reopen_interval = reopen_interval
        self._opener = opener
        self.memory: Memory | None = None
        self.state: LogState | None = None
        # The follower's last failure (opening or refreshing); None once it succeeds again.
        self.error: str | None = None
        self.missing = False  # the last attempt to open found no such log
        self.ready = threading.Event()  # hydrated: a state is being served
        # What the prober last saw (monotonic times; plain attributes: one writer thread).
        self._head: int | None = None
        self._probe_started: float | None = None
        self._probe_error: str | None = None
        self._probe_ok_at: float | None = None
        self.projector: ProjectorReport | None = None
        self._status_reader: ProjectorStatusReader | None = None
        if self.mode == "kafka":
            self._status_reader = ProjectorStatusReader(
                parse_kafka_location(self.location), timeout=min(1.0, probe_timeout)
            )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._prober: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed: asyncio.Event | None = None
        self._lock = threading.Lock()
        self._hub: LifecycleHub | None = None
        self._hub_lock = threading.Lock()
        self._warn = Throttle(log, period=60.0)
        # Idle dropping (issue 17): when a request last named the log; dropped, and woken
        # (started again by a request, not hydrated yet). `_life` orders drop and wake.
        self.last_used = time.monotonic()
        self.dropped = False
        self.woken = False
        self._life = threading.Lock()

    # -- lifetime -----------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Open and follow the log in background threads; `loop` gets change notices.

        Starting again only binds another loop (an app may be given a started registry)."""
        self._loop = loop
        if loop is not None:
            self._changed = asyncio.Event()
        if self._thread is not None:  # already following: only (re)bind the loop
            return
        self._thread = threading.Thread(
            target=self._run, name=f"memstream-queryd-{self.name}", daemon=True
        )
        self._prober = threading.Thread(
            target=self._probe_loop, name=f"memstream-queryd-probe-{self.name}", daemon=True
        )
        self._thread.start()
        self._prober.start()

    def _open(self) -> Memory | None:
        """Open the log (blocking, in the follower); None when it cannot be opened yet."""
        try:
            memory = self._opener(self.location)
        except LogNotFoundError as exc:
            first = not self.missing
            self.missing, self.error = True, describe(exc)
            if first:
                log.warning(
                    "log %s does not exist (%s); serving it as not ready and checking again "
                    "every %g s",
                    self.name,
                    exc,
                    self.reopen_interval,
                )
            return None
        except Exception as exc:
            self.missing, self.error = False, describe(exc)
            self._warn.warning(
                "open", "log %s: cannot open yet (%s); retrying", self.name, self.error
            )
            return None
        return memory

    def _run(self) -> None:
        backoff = min(0.5, self.reopen_interval)
        while not self._stop.is_set():
            memory = self._open()
            if memory is None:
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.reopen_interval)
                continue
            try:
                state = memory.log.state()
            except Exception as exc:
                self.error = describe(exc)
                self._warn.warning(
                    "open", "log %s: cannot fold yet (%s); retrying", self.name, self.error
                )
                self._close_quietly(memory)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.reopen_interval)
                continue
            if self._stop.is_set():
                self._close_quietly(memory)
                return
            self.memory = memory
            self.missing, self.error = False, None
            self._publish(state)
            self.ready.set()
            self.woken = False
            log.info("log %s: hydrated at seq %s", self.name, state.last_seq)
            break
        while not self._stop.wait(self.poll_interval):
            try:
                self.refresh()
            except Exception as exc:
                self.error = describe(exc)
                self._warn.warning("refresh", "log %s: refresh failed (%s)", self.name, self.error)
                self._stop.wait(1.0)
            else:
                self.error = None

    def _probe_loop(self) -> None:
        while not self._stop.is_set():
            memory = self.memory
            if memory is not None:
                self._probe_head(memory)
            reader = self._status_reader
            if reader is not None:
                self.projector = reader.read()
            self._stop.wait(self.probe_interval)

    def _probe_head(self, memory: Memory) -> None:
        self._probe_started = time.monotonic()
        try:
            head = self._read_head(memory)
        except Exception as exc:
            self._probe_error = describe(exc)
            self._warn.warning("probe", "log %s: unavailable (%s)", self.name, self._probe_error)
        else:
            if self._probe_error is not None:
                log.info("log %s: available again", self.name)
            self._head, self._probe_error = head, None
            self._probe_ok_at = time.monotonic()
        finally:
            self._probe_started = None

    @staticmethod
    def _read_head(memory: Memory) -> int | None:
        """The seq of the log's last record (blocking: one round trip on Kafka)."""
        return memory.log.head()

    def stop(self) -> None:
        """Stop following and close the log; `start` may open it again afterwards.

        A call to the log still outstanding in a thread (a broker that stopped answering)
        is not waited for beyond a few seconds; the log is then left open rather than
        closed under that call."""
        self._stop.set()
        with self._hub_lock:
            hub, self._hub = self._hub, None
        if hub is not None:
            hub.stop()
        stuck = False
        for thread in (self._thread, self._prober):
            if thread is not None:
                thread.join(timeout=5)
                stuck = stuck or thread.is_alive()
        self._thread = self._prober = None
        self._stop = threading.Event()
        self.ready.clear()
        self.state = None
        self._head = self._probe_ok_at = self._probe_started = None
        self._probe_error = None
        memory, self.memory = self.memory, None
        if memory is not None:
            if stuck:
                log.warning("log %s: a call to the log is still outstanding; left open", self.name)
            else:
                self._close_quietly(memory)
        if self._status_reader is not None:
            self._status_reader.close()

    # -- idle dropping (issue 17) -----------------------------------------------------------

    def drop(self) -> bool:
        """Stop following the log and let its state go, as `stop` does, unless a lifecycle
        stream is open on it; True when dropped."""
        with self._life:
            if self.dropped or self._thread is None:
                return False
            hub = self._hub
            if hub is not None and hub.subscribers > 0:
                return False
            self.stop()
            self.dropped = True
            log.info("log %s: not asked for in a while; dropped from memory", self.name)
            return True

    def wake(self) -> None:
        """Start following a dropped log again (blocking a moment: a thread's job)."""
        with self._life:
            if not self.dropped:
                return
            self.dropped, self.woken = False, True
            self.last_used = time.monotonic()
            self.start(self._loop)
            log.info("log %s: asked for; hydrating it again", self.name)

    async def hydrated(self, timeout: float) -> None:
        """Until a woken log is hydrated, found missing, or `timeout` passed."""
        deadline = time.monotonic() + timeout
        while (
            self.woken
            and not self.ready.is_set()
            and not self.missing
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(min(0.01, self.poll_interval))

    def _close_quietly(self, memory: Memory) -> None:
        try:
            memory.close()
        except Exception:
            log.warning("log %s: close failed", self.name, exc_info=True)

    # -- lifecycle ----------------------------------------------------------------------------

    def lifecycle_hub(self, settings: HubSettings | None = None) -> LifecycleHub:
        """The one lifecycle hub of this log (its reader starts with its first stream)."""
        with self._hub_lock:
            if self._hub is None:
                self._hub = LifecycleHub(self.name, self._read_lifecycle, settings)
            return self._hub

    def _read_lifecycle(self, from_offset: int, stop: threading.Event) -> Iterator[LifecycleRecord]:
        """The log's lifecycle stream from `from_offset` on, until `stop` is set."""
        memory = self.memory
        if memory is None:
            raise RuntimeError(f"log {self.name!r} is not open")
        return memory.lifecycle(from_offset, stop=stop)

    @property
    def hub(self) -> LifecycleHub | None:
        return self._hub

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

    def health(self) -> Health:
        """Ready, hydrating, missing, unavailable or idle, and why (never blocks)."""
        if self.dropped:
            return Health(
                "idle",
                f"log {self.name!r} is idle: dropped from memory, hydrated again when asked",
            )
        if not self.ready.is_set():
            if self.missing:
                return Health("missing", f"log {self.name!r} does not exist: {self.error}")
            why = f": {self.error}" if self.error else ""
            return Health("hydrating", f"log {self.name!r} is not ready yet (hydrating){why}")
        started = self._probe_started
        if started is not None:
            waited = time.monotonic() - started
            # The embedded log's head waits behind a long catch-up fold; only a disk that
            # hangs for much longer is "no answer".
            stall = self.probe_timeout if self.mode == "kafka" else max(self.probe_timeout, 10.0)
            if waited > stall:
                return Health(
                    "unavailable",
                    f"log {self.name!r} is unavailable: no answer from "
                    f"{self._storage()} for {waited:.1f} s",
                )
        if self._probe_error is not None:
            return Health("unavailable", f"log {self.name!r} is unavailable: {self._probe_error}")
        if self.error is not None:
            return Health(
                "unavailable", f"log {self.name!r} is unavailable: following it fails: {self.error}"
            )
        return Health("ready")

    def _storage(self) -> str:
        if self.mode == "kafka":
            return f"the Kafka broker at {parse_kafka_location(self.location).bootstrap}"
        return "the log file"

    def not_ready_message(self) -> str:
        return self.health().cause or f"log {self.name!r} is not ready yet (hydrating)"

    def current(self) -> LogState:
        """The newest state this handle has; NotReady while hydrating or missing."""
        state = self.state
        if state is None or not self.ready.is_set():
            raise NotReady(self.not_ready_message())
        return state

    async def at_least(self, min_seq: int | None, timeout: float) -> LogState:
        """The current state, once it reflects at least `min_seq`.

        Waits (without blocking the loop) for the follower to publish it, at most `timeout`
        seconds: SeqTimeout then. While the log is unavailable, a seq the state has not
        reached cannot come: Unavailable at once, naming the seq reached."""
        state = self.current()
        if min_seq is None or _seq_reached(state, min_seq):
            return state
        deadline = time.monotonic() + timeout
        while not _seq_reached(state, min_seq):
            health = self.health()
            if health.status == "unavailable":
                reached = "no record" if state.last_seq is None else f"seq {state.last_seq}"
                raise Unavailable(
                    f"min_seq: {health.cause}; the state reflects {reached}, not seq {min_seq}",
                    state.last_seq,
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SeqTimeout(self.name, min_seq, state.last_seq, timeout)
            changed = self._changed
            # Woken by the follower's notice, or every probe_timeout to look at the health.
            wait = min(remaining, self.probe_timeout)
            if changed is None or self._loop is not asyncio.get_running_loop():
                await asyncio.sleep(min(self.poll_interval, wait))  # no notices here: poll
            else:
                try:
                    await asyncio.wait_for(changed.wait(), wait)
                except TimeoutError:
                    pass
            state = self.current()
        return state

    def head(self) -> int | None:
        """The seq of the log's last record as the prober last saw it (never blocks)."""
        if self._probe_ok_at is None:
            state = self.state
            return None if state is None else state.last_seq
        return self._head

    def lag(self) -> int:
        """Records in the log that the served state does not reflect yet."""
        state = self.state
        head = self.head()
        if head is None:
            return 0
        last = -1 if state is None or state.last_seq is None else state.last_seq
        return max(0, head - last)

    def lifecycle_lag(self) -> int | None:
        """Records whose lifecycle events the projector has not published yet (Kafka)."""
        report = self.projector
        if report is None or report.status is None:
            return None
        head = self.head()
        if head is None:
            return 0
        published = report.status.published_seq
        return max(0, head - (-1 if published is None else published))


class LogRegistry:
    """The served logs by name; with `idle_seconds`, a log no request named for that long
    is dropped (checked a few times per period), and hydrated again when named."""

    def __init__(self, handles: Iterable[LogHandle], *, idle_seconds: float | None = None) -> None:
        if idle_seconds is not None and idle_seconds <= 0:
            raise ValueError(f"idle_seconds: expected a positive number, got {idle_seconds!r}")
        self.idle_seconds = idle_seconds
        self._reaper: tuple[threading.Event, threading.Thread] | None = None
        self.handles: dict[str, LogHandle] = {}
        self._users = 0
        self._users_lock = threading.Lock()
        for handle in handles:
            if handle.name in self.handles:
                raise LocationError(
                    f"two logs would be served under the name {handle.name!r}: "
                    f"{redact(self.handles[handle.name].location)!r} and "
                    f"{redact(handle.location)!r}"
                )
            self.handles[handle.name] = handle

    @classmethod
    def from_locations(
        cls,
        locations: Iterable[str],
        *,
        idle_seconds: float | None = None,
        **handle_options: Any,
    ) -> LogRegistry:
        """A handle for each location, made with `handle_options` (`LogHandle`'s)."""
        return cls(
            (LogHandle(location, **handle_options) for location in locations),
            idle_seconds=idle_seconds,
        )

    def get(self, name: str) -> LogHandle | None:
        """The log served under `name` (a use: it is not idle now)."""
        handle = self.handles.get(name)
        if handle is not None:
            handle.last_used = time.monotonic()
        return handle

    async def serve(self, name: str, timeout: float) -> LogHandle | None:
        """The log served under `name`, hydrated again first (at most `timeout` s) if it
        was dropped as idle."""
        handle = self.get(name)
        if handle is not None and (handle.dropped or handle.woken):
            if handle.dropped:
                await asyncio.to_thread(handle.wake)
            await handle.hydrated(timeout)
        return handle

    def _reap(self, done: threading.Event, idle: float) -> None:
        while not done.wait(max(0.05, min(5.0, idle / 4))):
            now = time.monotonic()
            for handle in list(self.handles.values()):
                if done.is_set():
                    return
                if not handle.dropped and now - handle.last_used >= idle:
                    handle.drop()

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
            with handle._life:
                handle.dropped = False
                handle.last_used = time.monotonic()
                handle.start(loop)
        if self.idle_seconds is not None and self._reaper is None:
            done = threading.Event()
            thread = threading.Thread(
                target=self._reap,
                args=(done, self.idle_seconds),
                name="memstream-queryd-idle",
                daemon=True,
            )
            thread.start()
            self._reaper = (done, thread)

    def stop(self) -> None:
        if self._reaper is not None:
            done, thread = self._reaper
            done.set()
            thread.join(30)
            self._reaper = None
        for handle in self.handles.values():
            with handle._life:
                handle.stop()
                handle.dropped = handle.woken = False

    def all_ready(self) -> bool:
        return all(h.health().ready for h in self.handles.values())

    def wait_ready(self, timeout: float) -> bool:
        """Until every log is hydrated (not: reachable right now), at most `timeout` s."""
        deadline = time.monotonic() + timeout
        for handle in self.handles.values():
            if not handle.ready.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True
