"""Stack settings and the config files rendered from them (pure: no I/O)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

# The newest Kafka 4.x that resolved on Maven Central when this was written; pinned so every
# machine runs the same broker. Override with MEMSTREAM_KAFKA_VERSION or --kafka-version.
DEFAULT_KAFKA_VERSION = "4.4.0"
# Kafka 4 logs through SLF4J 1.7 with log4j2 on the classpath but ships no binding; this one
# matches the log4j-core that kafka_2.13 4.4.0 pulls in.
LOG4J_VERSION = "2.25.5"

ENV_KAFKA_PORT = "MEMSTREAM_KAFKA_PORT"
ENV_CONTROLLER_PORT = "MEMSTREAM_KAFKA_CONTROLLER_PORT"
ENV_REDIS_PORT = "MEMSTREAM_REDIS_PORT"
ENV_KAFKA_VERSION = "MEMSTREAM_KAFKA_VERSION"
ENV_KAFKA_HEAP = "MEMSTREAM_KAFKA_HEAP"

HEALTH_TOPIC = "memstream-stack-health"


@dataclass(frozen=True)
class StackConfig:
    """What `stack up` starts. Defaults sit away from the usual 9092/6379 to avoid clashes."""

    host: str = "127.0.0.1"
    kafka_port: int = 19092
    controller_port: int = 19093
    redis_port: int = 16379
    kafka_version: str = DEFAULT_KAFKA_VERSION
    kafka_heap: str = "1g"
    start_timeout: float = 120.0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://{self.host}:{self.redis_port}/0"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> StackConfig:
        """Defaults, then MEMSTREAM_* variables, then `overrides` (flags); None means unset."""
        env = os.environ if env is None else env
        cfg = cls()
        from_env: dict[str, object] = {}
        for var, name in (
            (ENV_KAFKA_PORT, "kafka_port"),
            (ENV_CONTROLLER_PORT, "controller_port"),
            (ENV_REDIS_PORT, "redis_port"),
        ):
            if env.get(var):
                from_env[name] = _port(env[var], var)
        if env.get(ENV_KAFKA_VERSION):
            from_env["kafka_version"] = env[ENV_KAFKA_VERSION]
        if env.get(ENV_KAFKA_HEAP):
            from_env["kafka_heap"] = env[ENV_KAFKA_HEAP]
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown stack settings: {sorted(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        cfg = replace(cfg, **{**from_env, **given})  # type: ignore[arg-type]
        ports = {cfg.kafka_port, cfg.controller_port, cfg.redis_port}
        if len(ports) != 3:
            raise ValueError(
                f"kafka_port={cfg.kafka_port}, controller_port={cfg.controller_port} and "
                f"redis_port={cfg.redis_port} must be three different ports"
            )
        return cfg


def _port(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a port number") from None
    if not 0 < value < 65536:
        raise ValueError(f"{name}={value}: expected a port between 1 and 65535")
    return value


def render_pom(kafka_version: str) -> str:
    """A throwaway pom whose runtime dependencies are the broker and a log4j2 binding."""
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>memstream.stack</groupId>
  <artifactId>kafka-broker</artifactId>
  <version>{kafka_version}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{kafka_version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""


def render_server_properties(cfg: StackConfig, data_dir: Path) -> str:
    """One combined broker+controller KRaft node on loopback, sized for tests.

    Topic auto-creation is off: a memstream log must be created with its own settings
    (one partition, never deleted), and a typo should fail rather than make a new log.
    Retention is unlimited for the same reason: the log is the system of record.
    """
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{cfg.host}:{cfg.controller_port}",
        "listeners": (
            f"PLAINTEXT://{cfg.host}:{cfg.kafka_port},CONTROLLER://{cfg.host}:{cfg.controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{cfg.host}:{cfg.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1",
        # Few internal partitions: creating 50 of them on the first group join is slow.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "log.retention.ms": "-1",
        "log.retention.bytes": "-1",
    }
    lines = ["# Written by `memstream stack up` on every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in props.items()]
    return "\n".join(lines) + "\n"


def render_log4j2() -> str:
    """Everything to stdout, which `stack up` sends to one log file per start.

    log4j's own shutdown hook is off so the broker's shutdown is logged to the end.
    """
    return """status = warn
shutdownHook = disable
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
"""


def render_redis_conf(cfg: StackConfig, home: Path, pidfile: Path) -> str:
    """Redis as a foreground child on loopback; no persistence, since Redis only caches.

    The process title carries the config path so `down` can tell our redis-server from any
    other one by /proc/PID/cmdline.
    """
    return "\n".join(
        [
            "# Written by `memstream stack up` on every start; edits are overwritten.",
            f"bind {cfg.host}",
            f"port {cfg.redis_port}",
            "protected-mode yes",
            "daemonize no",
            "supervised no",
            f"pidfile {_quote(pidfile)}",
            f"dir {_quote(home)}",
            'logfile ""',
            'save ""',
            "appendonly no",
            "set-proc-title yes",
            'proc-title-template "{title} {listen-addr} {server-mode} {config-file}"',
            "",
        ]
    )


def _quote(path: Path) -> str:
    # redis.conf takes double-quoted strings; paths under .stack/ have no quotes in practice.
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_env(bootstrap: str, redis_url: str) -> str:
    """Shell lines for `eval` / `source`: what tests and the command line read."""
    return (
        f"export KAFKA_BOOTSTRAP_SERVERS={shlex.quote(bootstrap)}\n"
        f"export REDIS_URL={shlex.quote(redis_url)}\n"
    )


def parse_env(text: str) -> dict[str, str]:
    """Read back what `render_env` wrote (only `export NAME=VALUE` lines)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("export "):
            continue
        name, sep, value = line[len("export ") :].partition("=")
        if not sep:
            continue
        parts = shlex.split(value)
        out[name.strip()] = parts[0] if parts else ""
    return out
