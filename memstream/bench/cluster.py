"""`memstream bench cluster`: many logs, a group of projector processes, writer processes.

On one run (issue 17): N logs (default 100), 3 projector processes of one projector group
(`memstream projector run --logs-matching ... --group ...`) sharing them, 8 writer
processes appending to the logs (each writer a share of them, round robin):

- appends per second in all, unpaced (`publish_async`, pipelined);
- lag p50/p99 at a paced rate: from an append's acknowledgement (the writer's future
  resolved) to its first lifecycle event read from the log's lifecycle topic (committed,
  read by one consumer of every lifecycle topic);
- RSS and threads of each projector process;
- the takeover: one projector process SIGKILLed during the paced run; for each log it
  folded, from the kill to its projector in another process reporting it resumed from its
  snapshot (its status record in Redis naming a folded seq), and to the first lifecycle
  event of a record appended after the kill (the projectors' lag included); the longest
  over its logs;
- lifecycle events read twice (must be 0);
- the machine's CPU in the paced run before the kill, in cores, and whose: the writer
  processes' and the projectors' (each with their librdkafka threads' part), the bench's
  own and the rest (the broker, Redis): on a machine with no core to spare, the
  takeover's work waits its turn;
- the CPU of the projectors' Kafka client threads (librdkafka's, named ``rdk:...``), in
  all and the most in one second: librdkafka busy-polls (a zero poll timeout) while a
  slow broker holds a request, and such threads took both cores from the broker for
  seconds at a time in the failed runs of 7 December (README, issue 17).

On the shared stack by default (`--bootstrap` / `--redis`, else the stack's env); with
``--brokers 3`` on a three-node cluster of its own (started in a temporary folder on free
loopback ports, stopped at the end). No seed system has a distributed mode.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rich.console import Console
from rich.table import Table

from memstream.bench.cleanup import drop_logs
from memstream.bench.kafka import _START_S, _quantile, _servers, check_alive
from memstream.projector_cli import COMMITS_PER_S, SESSION_MS

if TYPE_CHECKING:
    from projector.status import ProjectorStatus

__all__ = ["run", "add_arguments"]


def _writer(
    locations: list[str], indexes: list[int], rate: float, seconds: float, barrier: Any, out: Any
) -> None:
    """Append to `locations` round robin, at `rate` a second (0: as fast as the pipeline
    takes them) for `seconds`; puts (index, seq, acknowledged at) triples."""
    from memstream import Memory, Message

    memories = [Memory(location) for location in locations]
    acks = array("d")
    lock = threading.Lock()
    window = threading.Semaphore(2000)  # appends in flight

    def done(index: int, future: Any) -> None:
        now = time.time()
        window.release()
        try:
            seq = future.result().seq
        except Exception:  # counted as not acknowledged
            return
        with lock:
            acks.extend((float(index), float(seq), now))

    barrier.wait()
    start = time.time()
    i = 0
    while True:
        now = time.time()
        if now >= start + seconds:
            break
        if rate:
            delay = start + i / rate - now
            if delay > 0:
                time.sleep(delay)
        k = i % len(memories)
        window.acquire()
        future = memories[k].publish_async(Message(speaker="bench", content=f"{i} {os.getpid()}"))
        future.add_done_callback(functools.partial(done, indexes[k]))
        i += 1
    for memory in memories:
        memory.flush()
        memory.close()
    out.put(acks.tobytes())


def _write(
    locations: list[str],
    writers: int,
    rate: float,
    seconds: float,
    started: threading.Event | None = None,
) -> list[tuple[int, int, float]]:
    """Run the writer processes (`started` is set once they all append); every (log
    index, seq, acknowledged at)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers + 1)
    out = ctx.Queue()
    procs = []
    for w in range(writers):
        mine = list(range(w, len(locations), writers))
        procs.append(
            ctx.Process(
                target=_writer,
                args=([locations[i] for i in mine], mine, rate / writers, seconds, barrier, out),
            )
        )
    for p in procs:
        p.start()
    ready = threading.Event()

    def watch() -> None:
        # A writer that dies before it appends (its logs would not open) never reaches the
        # barrier: break it, rather than wait for ever.
        while not ready.wait(0.2):
            if any(p.exitcode not in (None, 0) for p in procs):
                barrier.abort()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        barrier.wait(timeout=_START_S)
    except threading.BrokenBarrierError:
        check_alive(procs, "bench cluster: a writer process", 0)
        raise SystemExit(
            f"bench cluster: the writers were not ready after {_START_S:g} s"
        ) from None
    finally:
        ready.set()
        watcher.join()
    if started is not None:
        started.set()
    acks: list[tuple[int, int, float]] = []
    for _ in procs:
        flat = array("d")
        flat.frombytes(out.get(timeout=seconds + 300))
        acks += [(int(flat[j]), int(flat[j + 1]), flat[j + 2]) for j in range(0, len(flat), 3)]
    for p in procs:
        p.join(60)
    return acks


class _Seen:
    """One consumer of every log's lifecycle topic (committed records): when each
    record's first lifecycle event was read, and how many events were read twice."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        from confluent_kafka import Consumer, TopicPartition

        from producers.logs.kafka_client import consumer_conf

        self.index = {f"{t}.lifecycle": i for i, t in enumerate(topics)}
        self.first: dict[tuple[int, int], float] = {}
        # When the projector produced each record's first event read (its producer's
        # timestamp): the lag split into folding and committing, and reading it back.
        self.produced: dict[tuple[int, int], float] = {}
        # (log, seq, index) -> the topic offset it was first read at
        self.events: dict[tuple[int, int, int], int] = {}
        self.twice = 0
        # The first few read twice: (topic, seq, index, first offset, this offset); the same
        # offset twice is this reader reading again, two offsets a second publication.
        self.repeated: list[tuple[str, int, int, int, int]] = []
        self.last_offset: dict[str, int] = {}  # topic -> the last offset read
        self._bootstrap = bootstrap
        self._stop = threading.Event()
        self._consumer = Consumer(consumer_conf(bootstrap, **{"isolation.level": "read_committed"}))
        self._consumer.assign([TopicPartition(t, 0, 0) for t in self.index])
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        from producers.logs.kafka_client import INDEX_HEADER, SEQ_HEADER, consume_ready

        while not self._stop.is_set():
            # The first to come (a batch consume would wait out its timeout, and the wait
            # would count as lag).
            for message in consume_ready(self._consumer, 1000, 0.1):
                if message.error() is not None:
                    continue
                self.last_offset[str(message.topic())] = cast(int, message.offset())
                now = time.time()
                headers = dict(message.headers() or [])
                if SEQ_HEADER not in headers:
                    continue
                log = self.index[str(message.topic())]
                seq = int(cast(bytes, headers[SEQ_HEADER]))
                index = int(cast(bytes, headers.get(INDEX_HEADER, b"0")))
                key = (log, seq, index)
                offset = cast(int, message.offset())
                if key in self.events:
                    self.twice += 1
                    if len(self.repeated) < 10:
                        first = self.events[key]
                        self.repeated.append((str(message.topic()), seq, index, first, offset))
                    continue
                self.events[key] = offset
                if (log, seq) not in self.first:
                    self.first[(log, seq)] = now
                    kind, stamp = message.timestamp()
                    if kind == TIMESTAMP_CREATE_TIME:
                        self.produced[(log, seq)] = stamp / 1000

    def where(self, topic: str) -> str:
        """How far the committed reader read `topic`, and the topic's offsets (asked of a
        consumer of its own: one call into the reader's consumer while its thread consumes
        deadlocked)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        from producers.logs.kafka_client import consumer_conf

        asker = Consumer(consumer_conf(self._bootstrap))
        try:
            low, high = asker.get_watermark_offsets(TopicPartition(topic, 0), 5)
        except KafkaException as exc:
            return f"not known ({exc})"
        finally:
            asker.close()
        last = self.last_offset.get(topic)
        read = sum(1 for (log, _, _) in self.events if log == self.index[topic])
        return f"read up to offset {last} ({read} events), ends at {high} (from {low})"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


def _missing_report(seen: _Seen, topics: list[str], missing: set[tuple[int, int]]) -> str:
    """Which logs the acknowledged appends without a lifecycle event belong to: their seqs,
    and where the lifecycle topic's committed reader stands against the topic's end."""
    by_log: dict[int, list[int]] = {}
    for log, seq in missing:
        by_log.setdefault(log, []).append(seq)
    lines = [f"  without a lifecycle event, in {len(by_log)} log(s):"]
    for log, seqs in sorted(by_log.items())[:10]:
        topic = f"{topics[log]}.lifecycle"
        where = seen.where(topic)
        lines.append(
            f"    {topics[log]}: {len(seqs)} appends, seqs {min(seqs)}-{max(seqs)}; "
            f"lifecycle topic: {where}"
        )
    return "\n".join(lines)


def _member(
    pattern: str,
    group: str,
    linger_ms: int,
    commits: int,
    session_ms: int,
    protocol: str,
    log_path: Path,
) -> subprocess.Popen[bytes]:
    root = Path(__file__).resolve().parents[2]
    with log_path.open("wb") as log_file:  # the child holds its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "memstream", "--log-level", "INFO", "projector", "run"]
            + ["--logs-matching", pattern]
            + ["--group", group, "--commit-linger-ms", str(linger_ms)]
            + ["--max-commits-per-s", str(commits)]
            + ["--group-session-ms", str(session_ms), "--group-protocol", protocol],
            env={**os.environ, "PYTHONPATH": str(root)},
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )


# Appends still without a lifecycle event after the 60 s wait are waited for this much
# longer, to tell late (the projectors behind) from lost.
_LATE_S = 120.0

# A projector's warning, told apart from others of its kind by the log it names and the
# numbers in it: both are dropped to count the kinds.
_LOG_NAME = re.compile(r"bench-cluster-[0-9a-f]{8}-\d{3}")
_NUMBER = re.compile(r"\d+")


def _warnings(paths: list[Path]) -> list[tuple[int, str]]:
    """(count, kind) of the warnings and errors in the projectors' logs, most first."""
    kinds: Counter[str] = Counter()
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            level, _, text = line.partition(" memstream")
            if not level.endswith(("WARNING", "ERROR")):
                continue
            text = _NUMBER.sub("N", _LOG_NAME.sub("LOG", text.partition(": ")[2]))
            kinds[f"{level.rsplit(' ', 1)[-1]} {text[:110]}"] += 1
    return [(count, kind) for kind, count in kinds.most_common()]


def _proc_status(pid: int) -> tuple[float, int]:
    """(RSS in MiB, threads) of a process."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


def _cpu_s(pid: int) -> float:
    """CPU seconds a process has used (user and system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _client_threads_cpu_s(pid: int) -> float:
    """CPU seconds used so far by the librdkafka threads of a process (their names start
    with ``rdk:``), user and system; 0.0 once the process is gone."""
    ticks = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name, _, rest = stat.partition("(")[2].rpartition(")")
        if name.startswith("rdk:"):
            fields = rest.split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


class _ClientCpu:
    """Samples, every second until closed, the CPU of the librdkafka threads of the
    processes `pids` (`_client_threads_cpu_s`): `total` seconds, and `peak`, the most
    used in one second (in cores). A thread that ended takes its time with it, so a
    process's decrease counts as none."""

    def __init__(self, pids: list[int]) -> None:
        self.total = 0.0
        self.peak = 0.0
        self._pids = pids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = {pid: _client_threads_cpu_s(pid) for pid in self._pids}
        at = time.monotonic()
        while not self._stop.wait(1.0):
            now = {pid: _client_threads_cpu_s(pid) for pid in self._pids}
            used = sum(max(0.0, now[pid] - last[pid]) for pid in self._pids)
            now_at = time.monotonic()
            elapsed, at = now_at - at, now_at
            self.total += used
            self.peak = max(self.peak, used / max(elapsed, 1e-3))
            last = now

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _machine_cpu_s() -> float:
    """CPU seconds the whole machine has been busy since boot, summed over its cores
    (``/proc/stat``: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is within user already)
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


class _CpuShares:
    """Where the machine's CPU went over a window: the whole machine's busy time, the
    bench's writer processes and its projector processes (each with the part their
    librdkafka threads used, `_client_threads_cpu_s`), the bench's own process, and the
    rest (the broker, Redis, anything else), each in cores (CPU seconds a second)."""

    def __init__(self, writers: list[int], projectors: list[int]) -> None:
        self._groups = {"writers": writers, "projectors": projectors}
        self._start = self._sample()
        self._at = time.monotonic()

    def _sample(self) -> tuple[dict[str, dict[int, tuple[float, float]]], float, float]:
        """Per group, per pid: (CPU seconds, of them its librdkafka threads'); then the
        machine's busy seconds and the bench's own."""
        groups: dict[str, dict[int, tuple[float, float]]] = {}
        for group, pids in self._groups.items():
            groups[group] = {}
            for pid in pids:
                try:
                    groups[group][pid] = (_cpu_s(pid), _client_threads_cpu_s(pid))
                except OSError:  # gone
                    pass
        own = os.times()
        return groups, _machine_cpu_s(), own.user + own.system

    def stop(self) -> dict[str, float]:
        """Cores used since the start: ``machine`` (busy), ``writers``, ``projectors``
        (and ``writers_client``, ``projectors_client``: of them their librdkafka
        threads'), ``bench``, ``rest`` (what the machine used beyond those); and ``cores``
        (the machine's) and ``seconds`` (the window's length). A process gone before the
        end counts for none of its time (its share of the machine's falls to ``rest``)."""
        (first_groups, machine0, bench0), (last_groups, machine1, bench1) = (
            self._start,
            self._sample(),
        )
        elapsed = max(time.monotonic() - self._at, 1e-3)
        shares = {"cores": float(os.cpu_count() or 1), "seconds": elapsed}
        for group in self._groups:
            first, last = first_groups[group], last_groups[group]
            for i, key in enumerate((group, f"{group}_client")):
                used = sum(max(0.0, last[pid][i] - first.get(pid, last[pid])[i]) for pid in last)
                shares[key] = used / elapsed
        shares["machine"] = max(0.0, machine1 - machine0) / elapsed
        shares["bench"] = max(0.0, bench1 - bench0) / elapsed
        shares["rest"] = max(
            0.0, shares["machine"] - shares["writers"] - shares["projectors"] - shares["bench"]
        )
        return shares


def _cpu_shares_text(shares: dict[str, float]) -> str:
    """A `_CpuShares.stop` result as the bench prints it."""
    return (
        f"{shares['machine']:.2f} of {shares['cores']:.0f} cores: writers "
        f"{shares['writers']:.2f} (librdkafka {shares['writers_client']:.2f}), projectors "
        f"{shares['projectors']:.2f} (librdkafka {shares['projectors_client']:.2f}), this "
        f"bench {shares['bench']:.2f}, the rest (broker, Redis, others) {shares['rest']:.2f}"
    )


def _owners(redis_url: str, locations: list[str]) -> list[int | None]:
    """The pid of each log's projector (its status record), None where none reports."""
    return [None if s is None else s.pid for s in _statuses(redis_url, locations)]


def _statuses(redis_url: str, locations: list[str]) -> list[ProjectorStatus | None]:
    """Each log's projector's status record, None where none reports."""
    import redis

    from producers.logs.location import parse_kafka_location
    from projector.status import decode_status, status_key

    keys = [status_key(parse_kafka_location(loc).key_prefix) for loc in locations]
    # The machine is saturated when this is asked (every process of the run busy): a
    # Redis read may time out, and a kill that never happens spoils the whole run.
    for attempt in range(1, 7):
        client = redis.Redis.from_url(redis_url, socket_timeout=10, socket_connect_timeout=10)
        try:
            raws = client.mget(keys)
            break
        except redis.RedisError:
            if attempt == 6:
                raise
            time.sleep(0.5)
        finally:
            client.close()
    return [decode_status(cast(bytes | None, raw)) for raw in raws]


def _watch_resumed(
    redis_url: str, locations: list[str], victim: int, resumed: dict[int, float]
) -> None:
    """Into `resumed`: for each log of `locations` (by index), when a projector of another
    process first reported it resumed (its status names a folded seq: written after its
    start, at a lease renewal, every 0.75 s), polled every 0.2 s for at most 60 s."""
    deadline = time.monotonic() + 60
    while len(resumed) < len(locations) and time.monotonic() < deadline:
        now = time.time()
        for i, status in enumerate(_statuses(redis_url, locations)):
            if (
                i not in resumed
                and status is not None
                and status.pid != victim
                and status.folded_seq is not None
            ):
                resumed[i] = now
        time.sleep(0.2)


@contextmanager
def _three_nodes(console: Console) -> Iterator[tuple[str, str]]:
    """A three-node cluster (and a Redis) of this run's own, stopped at the end."""
    from memstream.stack import StackConfig, StackPaths, down, up
    from memstream.stack.paths import default_stack_dir
    from memstream.stack.probes import free_ports

    with tempfile.TemporaryDirectory(prefix="memstream-bench-cluster-") as folder:
        paths = StackPaths(Path(folder), cache=default_stack_dir())
        ports = free_ports(7)
        cfg = StackConfig(
            brokers=3,
            kafka_port=ports[0],
            controller_port=ports[3],
            kafka_ports=tuple(ports[0:3]),
            controller_ports=tuple(ports[3:6]),
            redis_port=ports[6],
            kafka_heap="512m",
            start_timeout=180.0,
        )
        console.print("  starting a three-node cluster of the bench's own ...")
        try:
            result = up(cfg, paths)
            yield result.bootstrap, result.redis_url
        finally:
            down(paths, timeout=20.0)


def run(args: argparse.Namespace) -> int:
    console = Console(width=160)
    if int(args.brokers) == 3:
        with _three_nodes(console) as (bootstrap, redis_url):
            return _run(args, console, bootstrap, redis_url, "3-node cluster")
    if int(args.brokers) != 1:
        raise SystemExit("bench cluster: --brokers is 1 (the shared stack) or 3")
    bootstrap, redis_url = _servers(args)
    return _run(args, console, bootstrap, redis_url, "one broker")


def _run(
    args: argparse.Namespace, console: Console, bootstrap: str, redis_url: str, where: str
) -> int:
    from memstream import Memory
    from schemas.errors import MemstreamError

    quick = bool(getattr(args, "quick", False))
    count = int(args.cluster_logs or (12 if quick else 100))
    members = int(args.cluster_projectors)
    writers = int(args.cluster_writers)
    seconds = float(args.cluster_seconds or (8 if quick else 30))
    rate = float(args.cluster_rate)
    linger_ms = int(args.cluster_commit_linger_ms)
    commits = int(args.cluster_max_commits_per_s)
    session_ms = int(args.cluster_group_session_ms)
    protocol = str(args.cluster_group_protocol)
    keep_logs = bool(getattr(args, "cluster_keep_logs", False))
    prefix = f"bench-cluster-{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}-{i:03d}" for i in range(count)]
    locations = [f"kafka://{bootstrap}/{t}?redis={redis_url}" for t in topics]
    console.print(
        f"bench cluster on {bootstrap} ({where}) / {redis_url}: {count} logs, {members} "
        f"projector processes (--commit-linger-ms {linger_ms}, --max-commits-per-s "
        f"{commits}, --group-session-ms "
        f"{session_ms}, --group-protocol {protocol}), {writers} writer processes"
    )
    try:
        with ThreadPoolExecutor(8) as pool:  # the logs, created by a writer each
            list(pool.map(lambda loc: Memory(loc).close(), locations))
    except MemstreamError as exc:
        raise SystemExit(f"bench cluster: cannot create the logs: {exc}") from None
    pattern = f"kafka://{bootstrap}/{prefix}-*?redis={redis_url}"
    group = f"{prefix}-group"
    started = time.monotonic()
    logs_dir = Path(tempfile.mkdtemp(prefix="memstream-bench-cluster-"))
    log_paths = [logs_dir / f"projector-{i + 1}.log" for i in range(members)]
    procs = [
        _member(pattern, group, linger_ms, commits, session_ms, protocol, path)
        for path in log_paths
    ]
    seen: _Seen | None = None
    client_cpu = _ClientCpu([p.pid for p in procs])
    try:
        while None in _owners(redis_url, locations):
            if time.monotonic() - started > 300:
                raise SystemExit("bench cluster: the projectors did not take every log")
            time.sleep(0.2)
        owned_s = time.monotonic() - started
        console.print(f"  every log owned after {owned_s:.1f} s")
        seen = _Seen(bootstrap, topics)
        console.print(f"  {writers} writers, unpaced, {seconds / 2:.0f} s ...")
        acks = _write(locations, writers, 0, seconds / 2)
        burst = len(acks) / (max(a[2] for a in acks) - min(a[2] for a in acks))
        # The projectors catch up before the paced run (its lag is not this backlog).
        burst_end = time.monotonic()
        burst_keys = {(log, seq) for log, seq, _ in acks}
        while time.monotonic() - burst_end < 300 and not burst_keys <= seen.first.keys():
            time.sleep(0.2)
        caught_up_s = time.monotonic() - burst_end
        # After the wait's 300 s, what is still without an event is said, not passed over.
        burst_missing = len(burst_keys - seen.first.keys())
        if burst_missing:
            console.print(
                f"  {burst_missing:,} unpaced appends still without a lifecycle event after "
                f"{caught_up_s:.0f} s; going on"
            )
        else:
            console.print(f"  the projectors caught up {caught_up_s:.1f} s after the unpaced run")
        console.print(f"  {writers} writers at {rate:,.0f}/s in all, {seconds:.0f} s ...")
        idle = [_proc_status(p.pid) for p in procs]
        idle_owners = _owners(redis_url, locations)
        shares = [idle_owners.count(p.pid) for p in procs]
        cpu_before = [_cpu_s(p.pid) for p in procs]
        time.sleep(3.0)  # idle: every log followed, nothing appended
        idle_cpu = [(_cpu_s(p.pid) - c) / 3.0 * 100 for p, c in zip(procs, cpu_before, strict=True)]
        victim = procs[0]
        victim_logs: list[int] = []
        killed_at: list[float] = []

        writing = threading.Event()

        def kill() -> None:
            writing.wait()
            # The machine's CPU over the paced run before the kill (its first second
            # left out: the writers starting), by whom: whether the takeover began on a
            # machine with cores to spare.
            lead = min(1.0, seconds / 4)
            time.sleep(lead)
            window = _CpuShares([c.pid for c in mp.active_children() if c.pid], pids)
            time.sleep(seconds / 2 - lead)
            cpu_use.update(window.stop())
            owners = _owners(redis_url, locations)
            victim_logs.extend(i for i, pid in enumerate(owners) if pid == victim.pid)
            busy.extend(_proc_status(p.pid) for p in procs)
            killed_at.append(time.time())
            victim.send_signal(signal.SIGKILL)
            victims = [locations[i] for i in victim_logs]
            _watch_resumed(redis_url, victims, victim.pid, resumed)

        busy: list[tuple[float, int]] = []
        resumed: dict[int, float] = {}
        cpu_use: dict[str, float] = {}
        pids = [p.pid for p in procs]
        killer = threading.Thread(target=kill)
        killer.start()
        paced = _write(locations, writers, rate, seconds, writing)
        killer.join()
        deadline = time.monotonic() + 60
        want = {(log, seq) for log, seq, _ in paced}
        while time.monotonic() < deadline and not want <= seen.first.keys():
            time.sleep(0.2)
        if not killed_at:
            raise SystemExit("bench cluster: the projector was not killed (see the error above)")
        kill_t = killed_at[0]
        before = [
            max(0.0, seen.first[(log, seq)] - at)
            for log, seq, at in paced
            if at < kill_t - 1 and (log, seq) in seen.first
        ]
        # The same appends' lag until the projector produced their event (clocks of one
        # machine: the writer's and the projector's, ms apart at most).
        to_produced = [
            max(0.0, seen.produced[(log, seq)] - at)
            for log, seq, at in paced
            if at < kill_t - 1 and (log, seq) in seen.produced
        ]
        takeovers = []
        for log in victim_logs:
            after = [(at, seq) for lg, seq, at in paced if lg == log and at > kill_t]
            if after:
                first_seq = min(after)[1]
                if (log, first_seq) in seen.first:
                    takeovers.append(seen.first[(log, first_seq)] - kill_t)
        console.print(f"  takeover per log: {', '.join(f'{t:.1f}' for t in sorted(takeovers))} s")
        handovers = sorted(t - kill_t for t in resumed.values())
        console.print(
            f"  resumed by the others, per log: {', '.join(f'{t:.1f}' for t in handovers)} s"
        )
        unseen = len(want - seen.first.keys())
        # Late or lost? The projectors run on: what is still missing after a longer wait
        # is lost, as far as this bench can tell.
        still = unseen
        if unseen:
            deadline = time.monotonic() + _LATE_S
            while time.monotonic() < deadline and not want <= seen.first.keys():
                time.sleep(0.5)
            still = len(want - seen.first.keys())
            if still:
                console.print(_missing_report(seen, topics, want - seen.first.keys()))
    finally:
        client_cpu.close()
        if seen is not None:
            seen.close()
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        if keep_logs:
            console.print(f"  logs kept: {topics[0]} ... {topics[-1]}")
        else:
            drop_logs(bootstrap, redis_url, topics)

    table = Table(title=f"memstream bench cluster ({count} logs, {where}, acks=all)")
    table.add_column("measured")
    table.add_column("memstream", justify="right")
    table.add_column("goal")
    table.add_column("met", justify="center")

    def row(what: str, ours: str, goal: str = "-", met: bool | None = None) -> None:
        table.add_row(what, ours, goal, "-" if met is None else ("yes" if met else "no"))

    row(f"every log owned by the {members} projectors, from their start", f"{owned_s:.1f} s")
    row(f"appends, {writers} writer processes, in all (unpaced, publish_async)", f"{burst:,.0f}/s")
    row(
        "projectors caught up, after the unpaced run's last append",
        f"{caught_up_s:.1f} s"
        + (f" ({burst_missing:,} appends still without an event)" if burst_missing else ""),
    )
    row(f"appends at the paced rate ({len(paced):,} acknowledged)", f"{rate:,.0f}/s offered")
    if before:
        row(
            "lag p50, acknowledged -> lifecycle event (paced, before the kill)",
            f"{_quantile(before, 0.5) * 1000:.0f} ms",
        )
        row(
            "lag p99, acknowledged -> lifecycle event (paced, before the kill)",
            f"{_quantile(before, 0.99) * 1000:.0f} ms",
        )
    if to_produced:
        row(
            "of which until the projector produced the event, p50 / p99",
            " / ".join(f"{_quantile(to_produced, q) * 1000:.0f}" for q in (0.5, 0.99)) + " ms",
        )
    for i, ((rss, threads), (rss_busy, threads_busy)) in enumerate(zip(idle, busy, strict=False)):
        row(
            f"projector {i + 1} ({shares[i]} logs): RSS MiB / threads (idle; paced), idle CPU",
            f"{rss:.0f} / {threads}; {rss_busy:.0f} / {threads_busy}, {idle_cpu[i]:.0f}%",
        )
    if cpu_use:
        row(
            "CPU of the machine in the paced run before the kill, by whom (cores)",
            _cpu_shares_text(cpu_use),
        )
    row(
        "the projectors' Kafka client threads (librdkafka): CPU in all / the most in one second",
        f"{client_cpu.total:.0f} s / {client_cpu.peak:.2f} cores",
    )
    all_resumed = bool(victim_logs) and len(handovers) == len(victim_logs)
    longest = handovers[-1] if handovers and all_resumed else float("nan")
    row(
        f"takeover after SIGKILL of projector 1: its {len(victim_logs)} logs resumed from "
        "their snapshots by the others (longest; "
        + ("all" if all_resumed else f"only {len(handovers)} within 60 s")
        + ")",
        f"{longest:.1f} s",
        "<= 10 s",
        (longest <= 10 if all_resumed else False) if victim_logs else None,
    )
    longest = max(takeovers, default=float("nan"))
    row(
        "and the first lifecycle event of a record appended after the kill (longest; the "
        "projectors' lag included)",
        f"{longest:.1f} s",
        "<= 10 s",
        longest <= 10 if takeovers else None,
    )
    row("lifecycle events read twice", f"{seen.twice if seen else -1}", "0", seen.twice == 0)
    if seen is not None and seen.repeated:
        read_twice = ", ".join(
            f"{t} seq {s} #{i} (offsets {a}, {b})" for t, s, i, a, b in seen.repeated
        )
        console.print(f"  read twice (the first {len(seen.repeated)}): {read_twice}")
    row(
        "acknowledged appends without a lifecycle event after 60 s "
        f"(and still after {60 + _LATE_S:.0f} s)",
        f"{unseen} ({still})",
        "0",
        unseen == 0,
    )
    console.print(table)
    console.print(
        "  (lag: from the writer's acknowledgement to the event read back, committed, from "
        "the lifecycle topic; the machine may be shared with other work)"
    )
    # What the projectors said went wrong (a tenure ended, a lease not renewed in time):
    # where the lag and the takeover went when the machine could not keep up.
    warnings = _warnings(log_paths)
    console.print(
        f"  the projectors' logs ({logs_dir}): {sum(c for c, _ in warnings)} warnings and errors"
        + ("" if warnings else ".")
    )
    for count, kind in warnings[:8]:
        console.print(f"    {count:>5} x {kind}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cluster suite")
    group.add_argument(
        "--cluster-logs", type=int, default=None, help="cluster: logs (default 100; --quick 12)"
    )
    group.add_argument(
        "--cluster-projectors", type=int, default=3, help="cluster: projector processes"
    )
    group.add_argument("--cluster-writers", type=int, default=8, help="cluster: writer processes")
    group.add_argument(
        "--cluster-rate", type=float, default=2000, help="cluster: paced appends/s in all"
    )
    group.add_argument(
        "--cluster-seconds",
        type=float,
        default=None,
        help="cluster: paced run length (default 30; --quick 8); the unpaced run is half",
    )
    group.add_argument(
        "--cluster-commit-linger-ms",
        type=int,
        default=1,
        help="cluster: the projectors' --commit-linger-ms",
    )
    group.add_argument(
        "--cluster-max-commits-per-s",
        type=int,
        default=COMMITS_PER_S,
        help=f"cluster: the projectors' --max-commits-per-s (default {COMMITS_PER_S}; 0: none)",
    )
    group.add_argument(
        "--cluster-group-session-ms",
        type=int,
        default=SESSION_MS,
        help=f"cluster: the projectors' --group-session-ms (default {SESSION_MS})",
    )
    group.add_argument(
        "--cluster-group-protocol",
        choices=("consumer", "classic"),
        default="consumer",
        help="cluster: the projectors' --group-protocol (default consumer)",
    )
    group.add_argument(
        "--cluster-keep-logs",
        action="store_true",
        help="cluster: leave the run's logs (topics, Redis keys) in place, to look into them",
    )
    group.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="cluster: 1 (the shared stack) or 3 (a three-node cluster of the bench's own)",
    )
