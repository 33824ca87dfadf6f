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
ENV_BROKERS = "MEMSTREAM_KAFKA_BROKERS"
ENV_SECURE = "MEMSTREAM_STACK_SECURE"

# A cluster's node k (from 0) listens on the first node's ports plus PORT_STRIDE * k, unless
# its ports are given one by one: 19092/19093, 19094/19095, 19096/19097 by default.
PORT_STRIDE = 2
# The replicated shape of a cluster of 3 or more nodes: every log on 3 nodes, an append
# acknowledged once 2 hold it, and a replica that fell behind never elected leader.
CLUSTER_REPLICATION = 3
CLUSTER_MIN_INSYNC = 2

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
    # How many combined broker+controller nodes; 1 is the default stack.
    brokers: int = 1
    # Each node's ports, when given one by one (else derived with PORT_STRIDE).
    kafka_ports: tuple[int, ...] = ()
    controller_ports: tuple[int, ...] = ()
    # The node a rendered server.properties is for (1-based, as Kafka's node.id).
    node_id: int = 1
    # SASL/SCRAM and ACLs on the broker, ACL users on Redis (`memstream.stack.secure`).
    secure: bool = False

    @property
    def broker_ports(self) -> tuple[int, ...]:
        """Every node's broker port, node 1 first."""
        if self.kafka_ports:
            return self.kafka_ports
        return tuple(self.kafka_port + PORT_STRIDE * k for k in range(self.brokers))

    @property
    def quorum_ports(self) -> tuple[int, ...]:
        """Every node's KRaft controller port, node 1 first."""
        if self.controller_ports:
            return self.controller_ports
        return tuple(self.controller_port + PORT_STRIDE * k for k in range(self.brokers))

    @property
    def bootstrap(self) -> str:
        """Every node's broker address, comma-separated (the location's HOST:PORT list)."""
        return ",".join(f"{self.host}:{port}" for port in self.broker_ports)

    @property
    def node_address(self) -> str:
        """The broker address of the node this config is for."""
        return f"{self.host}:{self.broker_ports[self.node_id - 1]}"

    @property
    def replication(self) -> int:
        """The replication factor of the topics this stack makes by default."""
        return min(self.brokers, CLUSTER_REPLICATION)

    @property
    def min_insync(self) -> int:
        return CLUSTER_MIN_INSYNC if self.replication >= CLUSTER_REPLICATION else 1

    def node(self, node_id: int) -> StackConfig:
        """This config as node `node_id` (1-based) renders and checks it."""
        if not 1 <= node_id <= self.brokers:
            raise ValueError(f"node {node_id}: this stack has nodes 1 to {self.brokers}")
        return replace(
            self,
            node_id=node_id,
            kafka_port=self.broker_ports[node_id - 1],
            controller_port=self.quorum_ports[node_id - 1],
            kafka_ports=self.broker_ports,
            controller_ports=self.quorum_ports,
        )

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
        if env.get(ENV_BROKERS):
            from_env["brokers"] = _count(env[ENV_BROKERS], ENV_BROKERS)
        if env.get(ENV_SECURE):
            from_env["secure"] = _flag(env[ENV_SECURE], ENV_SECURE)
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise TypeError(f"unknown stack settings: {sorted(unknown)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        cfg = replace(cfg, **{**from_env, **given})  # type: ignore[arg-type]
        cfg.check()
        return cfg

    def check(self) -> None:
        """ValueError naming what is wrong: a node count below 1, a port list of the wrong
        length, or two servers on one port."""
        if self.brokers < 1:
            raise ValueError(f"brokers={self.brokers}: a stack has at least one Kafka node")
        if self.secure and self.brokers > 1:
            raise ValueError("a secured stack (--secure) runs one Kafka node, not a cluster")
        for name, given in (
            ("kafka_ports", self.kafka_ports),
            ("controller_ports", self.controller_ports),
        ):
            if given and len(given) != self.brokers:
                raise ValueError(
                    f"{name}={list(given)}: expected one port per node ({self.brokers})"
                )
        ports = [*self.broker_ports, *self.quorum_ports, self.redis_port]
        for port in ports:
            if not 0 < port < 65536:
                raise ValueError(f"port {port}: expected a port between 1 and 65535")
        if len(set(ports)) != len(ports):
            if self.brokers == 1:
                raise ValueError(
                    f"kafka_port={self.kafka_port}, controller_port={self.controller_port} and "
                    f"redis_port={self.redis_port} must be three different ports"
                )
            raise ValueError(
                f"broker ports {list(self.broker_ports)}, controller ports "
                f"{list(self.quorum_ports)} and redis_port={self.redis_port} must all differ"
            )


def _count(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r}: expected a number of Kafka nodes") from None
    if value < 1:
        raise ValueError(f"{name}={value}: a stack has at least one Kafka node")
    return value


def _flag(text: str, name: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{name}={text!r}: expected 1/true/yes or 0/false/no")


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


def render_server_properties(
    cfg: StackConfig, data_dir: Path, secure: Mapping[str, str] | None = None
) -> str:
    """One combined broker+controller KRaft node on loopback (node `cfg.node_id` of
    `cfg.brokers`), sized for tests.

    Topic auto-creation is off: a memstream log must be created with its own settings
    (one partition, never deleted), and a typo should fail rather than make a new log.
    Retention is unlimited for the same reason: the log is the system of record. A cluster
    (3 nodes or more) replicates every topic on 3 nodes, acknowledges a write once 2 hold
    it (``acks=all`` against ``min.insync.replicas=2``), and never elects a replica that
    fell behind (unclean leader election off), so an acknowledged record survives one
    node's death.
    """
    if cfg.brokers > 1 and (cfg.kafka_port, cfg.controller_port) != (
        cfg.broker_ports[cfg.node_id - 1],
        cfg.quorum_ports[cfg.node_id - 1],
    ):
        cfg = cfg.node(cfg.node_id)
    voters = ",".join(f"{k + 1}@{cfg.host}:{port}" for k, port in enumerate(cfg.quorum_ports))
    rf, isr = str(cfg.replication), str(cfg.min_insync)
    props = {
        "process.roles": "broker,controller",
        "node.id": str(cfg.node_id),
        "controller.quorum.voters": voters,
        "listeners": (
            f"PLAINTEXT://{cfg.host}:{cfg.kafka_port},CONTROLLER://{cfg.host}:{cfg.controller_port}"
        ),
        "advertised.listeners": f"PLAINTEXT://{cfg.host}:{cfg.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "default.replication.factor": rf,
        "min.insync.replicas": isr,
        "unclean.leader.election.enable": "false",
        "offsets.topic.replication.factor": rf,
        # Few internal partitions: creating 50 of them on the first group join is slow.
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": isr,
        "group.initial.rebalance.delay.ms": "0",
        # Projector groups (issue 17) use the consumer group protocol of KIP-848: the
        # coordinator assigns, and a member learns of its new logs on its next heartbeat.
        # Its defaults (a 45 s session, a 5 s heartbeat) would make a dead member's logs
        # wait 45 s for a new owner; the group's own settings may now go down to these.
        "group.consumer.min.session.timeout.ms": "2000",
        "group.min.session.timeout.ms": "2000",  # the same for the classic protocol
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "250",
        "group.consumer.heartbeat.interval.ms": "500",
        # Hundreds of clients on one host (a projector process of 33 logs holds about 130
        # connections): after a stall they all reconnect at once, and the default backlog of
        # 50 dropped their SYNs (the kernel's ListenOverflows counted 264 in one session),
        # each drop a retransmission 1, 3, 7 s later.
        "socket.listen.backlog.size": "1024",
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        "log.retention.ms": "-1",
        "log.retention.bytes": "-1",
    }
    if cfg.brokers > 1:
        # A cluster on one shared machine (three JVMs beside the writers, often on 2 cores):
        # with KRaft's defaults (2 s fetch and request timeouts, 1 s elections) a starved
        # quorum churned through elections, and a node restarted after a SIGKILL could not
        # register its broker within 60 s, so it shut itself down (seen in the failover
        # test). Longer quorum timeouts; a broker keeps trying to register.
        props.update(
            {
                "controller.quorum.fetch.timeout.ms": "6000",
                "controller.quorum.request.timeout.ms": "6000",
                "controller.quorum.election.timeout.ms": "2000",
                "initial.broker.registration.timeout.ms": "300000",
            }
        )
    if secure is not None:
        props["listeners"] = (
            f"SASL_PLAINTEXT://{cfg.host}:{cfg.kafka_port},"
            f"CONTROLLER://{cfg.host}:{cfg.controller_port}"
        )
        props["advertised.listeners"] = f"SASL_PLAINTEXT://{cfg.host}:{cfg.kafka_port}"
        props.update(secure)
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


def render_redis_conf(
    cfg: StackConfig, home: Path, pidfile: Path, aclfile: Path | None = None
) -> str:
    """Redis as a foreground child on loopback; no persistence, since Redis only caches.

    The process title carries the config path so `down` can tell our redis-server from any
    other one by /proc/PID/cmdline. `aclfile` (a secured stack): its users, kept there by
    ``ACL SAVE``.
    """
    acl = [f"aclfile {_quote(aclfile)}"] if aclfile is not None else []
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
            *acl,
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
