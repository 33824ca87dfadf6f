"""Smoke test of the real servers: a record through Kafka, a value through Redis."""

from __future__ import annotations

import time

import pytest
import redis
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.kafka


def test_kafka_produce_consume(kafka_bootstrap: str, unique_name: str) -> None:
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(unique_name, num_partitions=1, replication_factor=1)])[
        unique_name
    ].result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "acks": "all", "enable.idempotence": True}
    )
    for i in range(3):
        producer.produce(unique_name, key=b"k", value=f"hello-{i}".encode())
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([unique_name])
    seen: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            seen.append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    # One partition: offsets are dense and in produce order (memstream's seq).
    assert seen == [(0, b"hello-0"), (1, b"hello-1"), (2, b"hello-2")]
    admin.delete_topics([unique_name])[unique_name].result(timeout=30)


def test_redis_round_trip(redis_url: str, unique_name: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        key = f"{unique_name}:value"
        assert client.set(key, b"\x00memstream\xff", ex=60)
        assert client.get(key) == b"\x00memstream\xff"
        assert client.delete(key) == 1
    finally:
        client.close()


def test_unique_names_differ(unique_name: str, request: pytest.FixtureRequest) -> None:
    assert unique_name.startswith("t-test-unique-names-differ-")
    assert len(unique_name) <= 249


def _redis_pid(redis_url: str) -> int:
    """The pid of the stack's Redis, as it reports it (checked to be redis-server)."""
    client = redis.Redis.from_url(redis_url)
    try:
        pid = int(client.info("server")["process_id"])
    finally:
        client.close()
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"redis-server" in f.read()
    return pid


def test_the_stacks_redis_runs_favoured_when_it_may(redis_url: str) -> None:
    # Every lease renewal, snapshot and status of every projector waits on this one
    # thread: under a loaded group it went unscheduled for over a second at equal weight.
    import os
    import shutil

    from memstream.stack.procs import FAVOURED_NICENESS

    pid = _redis_pid(redis_url)
    with open(f"/proc/{pid}/stat") as f:
        niceness = int(f.read().rsplit(")", 1)[1].split()[16])
    may = os.geteuid() == 0 and shutil.which("nice") is not None
    assert niceness == (FAVOURED_NICENESS if may else 0)
    # Where the kernel groups sessions for the scheduler, a niceness weighs only within
    # the session: Redis's session is favoured as a whole.
    grouped = os.path.exists("/proc/sys/kernel/sched_autogroup_enabled")
    if grouped:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            grouped = f.read().strip() == "1"
    if grouped and os.geteuid() == 0:
        with open(f"/proc/{pid}/autogroup") as f:
            assert f.read().split()[-1] == str(FAVOURED_NICENESS)


def _may_run_first() -> bool:
    """Whether this user may put a process under SCHED_RR: tried on a child of its own
    (and, where it may, the child is then under it)."""
    import os
    import subprocess
    import sys

    from memstream.stack.procs import run_first

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        may = run_first(child.pid)
        if may:
            assert os.sched_getscheduler(child.pid) == os.SCHED_RR
        return may
    finally:
        child.kill()
        child.wait()


def test_the_stacks_redis_runs_first_where_the_kernel_lets_it(redis_url: str) -> None:
    # A niceness is only a share: under a loaded group Redis at -10, session and all,
    # still waited seconds in the run queue. Where this user may set a real-time policy
    # (tried on a child of its own), Redis's main thread runs under SCHED_RR.
    import os

    from memstream.stack.procs import REALTIME_PRIORITY

    pid = _redis_pid(redis_url)
    may = _may_run_first()
    if may:
        assert os.sched_getscheduler(pid) == os.SCHED_RR
        assert os.sched_getparam(pid).sched_priority == REALTIME_PRIORITY
    else:
        assert os.sched_getscheduler(pid) == os.SCHED_OTHER


def _broker_pid(kafka_bootstrap: str) -> int:
    """The pid of the broker listening at `kafka_bootstrap` (its server.properties names
    the port)."""
    import os

    port = kafka_bootstrap.rsplit(":", 1)[1]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "kafka.Kafka" not in argv:
            continue
        with open(argv[argv.index("kafka.Kafka") + 1]) as config:
            listeners = [line for line in config if line.startswith("listeners=")]
        if any(f":{port}" in line for line in listeners):
            return int(entry)
    raise AssertionError(f"no broker of this stack listens at {kafka_bootstrap}")


def test_the_brokers_collector_threads_run_first_where_the_kernel_lets_them(
    kafka_bootstrap: str,
) -> None:
    # In a collection every request waits: starved of the CPU, a young collection took
    # 2.9 s and 12.6 s and every member's session expired. Where this user may set a
    # real-time policy (tried on a child of its own), they run under SCHED_RR.
    import os

    from memstream.stack.kafka import is_collector_thread

    pid = _broker_pid(kafka_bootstrap)
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            threads[int(tid)] = f.read().strip()
    collectors = [tid for tid, name in threads.items() if is_collector_thread(name)]
    # The safepoint thread and every parallel worker (made at start: one per core here).
    assert "VM Thread" in threads.values()
    assert sum(name.startswith("GC Thread#") for name in threads.values()) >= 1
    may = _may_run_first()
    want = os.SCHED_RR if may else os.SCHED_OTHER
    assert {tid: os.sched_getscheduler(tid) for tid in collectors} == dict.fromkeys(
        collectors, want
    )
    # Nothing else of the broker runs first: its request threads share the CPU as before.
    others = [tid for tid in threads if tid not in collectors][:20]
    assert all(os.sched_getscheduler(tid) == os.SCHED_OTHER for tid in others)
