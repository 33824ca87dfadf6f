"""A Kafka broker and a Redis of a test's own, on free loopback ports, to stop and break.

The shared stack must never be stopped; outage tests start these instead (the broker's
jars come from the repository's `.stack/` cache, or `MEMSTREAM_KAFKA_JARS`, else are
fetched once with mvn into the test's directory) and stop them by pid whatever happens.
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path

from memstream.stack import kafka, redis
from memstream.stack.config import StackConfig
from memstream.stack.paths import StackPaths
from memstream.stack.procs import ProcessRecord, terminate

REPO_ROOT = Path(__file__).resolve().parents[3]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _jar_cache(version: str) -> Path | None:
    """A directory holding kafka-VERSION/lib already fetched, if one is known."""
    candidates = [
        os.environ.get("MEMSTREAM_KAFKA_JARS", ""),
        os.environ.get("MEMSTREAM_STACK_DIR", ""),
        str(REPO_ROOT / ".stack"),
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / f"kafka-{version}" / "lib" / ".complete").is_file():
            return Path(candidate)
    return None


@dataclass
class PrivateStack:
    paths: StackPaths
    cfg: StackConfig
    kafka: ProcessRecord
    redis: ProcessRecord

    @property
    def bootstrap(self) -> str:
        return self.cfg.bootstrap

    @property
    def redis_url(self) -> str:
        return self.cfg.redis_url

    def location(self, topic: str) -> str:
        return f"kafka://{self.bootstrap}/{topic}?redis={self.redis_url}"

    def pause_kafka(self) -> None:
        os.kill(self.kafka.pid, signal.SIGSTOP)

    def resume_kafka(self) -> None:
        with suppress(ProcessLookupError):
            os.kill(self.kafka.pid, signal.SIGCONT)

    def pause_redis(self) -> None:
        os.kill(self.redis.pid, signal.SIGSTOP)

    def resume_redis(self) -> None:
        with suppress(ProcessLookupError):
            os.kill(self.redis.pid, signal.SIGCONT)

    def kill_kafka(self) -> None:
        self.resume_kafka()
        with suppress(ProcessLookupError):
            os.kill(self.kafka.pid, signal.SIGKILL)
        terminate(self.kafka, timeout=10)

    def restart_kafka(self) -> None:
        """Start the broker again on the same data directory (its topics are kept)."""
        self.kafka = kafka.start(self.paths, self.cfg)

    def stop(self) -> None:
        for record in (self.redis, self.kafka):
            with suppress(ProcessLookupError):
                os.kill(record.pid, signal.SIGCONT)
            terminate(record, timeout=15)


@contextmanager
def private_stack(root: Path) -> Iterator[PrivateStack]:
    """Kafka (one KRaft node, small heap) and Redis on free ports under `root`."""
    kafka_port, controller_port, redis_port = free_ports(3)
    cfg = replace(
        StackConfig(),
        kafka_port=kafka_port,
        controller_port=controller_port,
        redis_port=redis_port,
        kafka_heap="384m",
    )
    paths = StackPaths(root, cache=_jar_cache(cfg.kafka_version))
    redis_record = redis.start(paths, cfg)
    try:
        kafka_record = kafka.start(paths, cfg)
    except BaseException:
        terminate(redis_record, timeout=10)
        raise
    stack = PrivateStack(paths, cfg, kafka_record, redis_record)
    try:
        yield stack
    finally:
        stack.stop()
