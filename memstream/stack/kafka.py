"""The Kafka broker: fetch its jars with Maven, format KRaft storage, run it with Java."""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
import time
import uuid
from functools import partial

import memstream.stack.secure as secure
from memstream.stack.config import StackConfig, render_log4j2, render_pom, render_server_properties
from memstream.stack.errors import StackError
from memstream.stack.health import broker_ids, kafka_roundtrip
from memstream.stack.paths import StackPaths
from memstream.stack.procs import (
    ProcessRecord,
    is_ours,
    launch,
    port_open,
    run_threads_first,
    spawn,
    tail,
)
from memstream.stack.progress import LogReporter, Reporter

log = logging.getLogger(__name__)

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"
_COMPLETE = ".complete"  # written last, so a half-finished fetch is never taken as a cache


def is_collector_thread(name: str) -> bool:
    """A broker thread that runs first where the stack may set it (`collector_first`): the
    JVM's safepoint thread and G1's parallel workers, which run only while every other
    thread of the broker is stopped (its concurrent threads, ``G1 Conc#N``, are not)."""
    return name == "VM Thread" or name.startswith("GC Thread#")


def collector_first(record: ProcessRecord) -> list[int]:
    """Put the broker's stop-the-world collector threads under SCHED_RR (`run_first`).

    In a pause every request waits, heartbeats included. Sharing two cores with a loaded
    projector group (`bench cluster`, 7 December, twenty-fourth session) the workers sat
    runnable and unscheduled through young collections of 0.4-0.5 s (a few ms of work),
    2.9 s (``User=0.09s Real=2.92s``) and once 12.6 s, and a stall past the group's 4 s
    session expired every member at once. Under SCHED_RR, 372 collections over eight runs
    took 0.04 s at most. The broker starts with all its workers made
    (``-XX:-UseDynamicNumberOfGCThreads``); a thread made later inherits its creator's
    policy. The thread ids set (none where the kernel refuses)."""
    return run_threads_first(record.pid, is_collector_thread)


def _require(tool: str, hint: str) -> str:
    found = shutil.which(tool)
    if found is None:
        raise StackError(f"`{tool}` not found on PATH: {hint}")
    return found


def ensure_dist(paths: StackPaths, version: str, reporter: Reporter | None = None) -> None:
    """Fetch kafka_2.13:<version> and its runtime dependencies once; reuse them after."""
    reporter = reporter or LogReporter()
    lib = paths.kafka_lib(version)
    if (lib / _COMPLETE).is_file():
        return
    mvn = _require("mvn", "install Maven 3 (apt-get install -y maven)")
    dist = paths.kafka_dist(version)
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "pom.xml").write_text(render_pom(version))
    staging = dist / "lib.partial"
    shutil.rmtree(staging, ignore_errors=True)
    argv = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(dist / "pom.xml"),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    with reporter.step(f"fetching Apache Kafka {version} jars from Maven Central"):
        started = time.monotonic()
        result = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        log.info(
            "mvn finished in %.1fs with exit code %d", time.monotonic() - started, result.returncode
        )
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise StackError(
            f"mvn could not fetch org.apache.kafka:kafka_2.13:{version} "
            f"(exit code {result.returncode}):\n{output}"
        )
    if not any(staging.glob(f"kafka_2.13-{version}.jar")):
        raise StackError(f"mvn finished but kafka_2.13-{version}.jar is not in {staging}")
    shutil.rmtree(lib, ignore_errors=True)
    staging.rename(lib)
    (lib / _COMPLETE).write_text(version + "\n")


def _java_argv(paths: StackPaths, cfg: StackConfig, main: str, *args: str) -> list[str]:
    java = _require(
        "java", "install a Java 17+ runtime (apt-get install -y openjdk-17-jre-headless)"
    )
    return [
        java,
        f"-Xmx{cfg.kafka_heap}",
        "-XX:+UseG1GC",
        # Every parallel collector thread made at start, so that `collector_first` finds them.
        *(("-XX:-UseDynamicNumberOfGCThreads",) if main == MAIN_CLASS else ()),
        "-XX:+ExitOnOutOfMemoryError",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={paths.kafka_log4j}",
        "-cp",
        str(paths.kafka_lib(cfg.kafka_version) / "*"),
        main,
        *args,
    ]


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as Kafka's Uuid).

    Like Kafka's Uuid.randomUuid, never one starting with '-': the storage tool would read
    it as an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def admin_credentials(paths: StackPaths, cfg: StackConfig) -> secure.Credentials | None:
    """The admin's credentials on a secured stack (made by `manager.up`), else None."""
    return secure.load_admin(paths.root) if cfg.secure else None


def write_config(paths: StackPaths, cfg: StackConfig) -> None:
    paths.kafka_home.mkdir(parents=True, exist_ok=True)
    admin = admin_credentials(paths, cfg)
    text = render_server_properties(
        cfg, paths.kafka_data, secure.server_properties(admin) if admin else None
    )
    if admin is None:
        paths.kafka_config.write_text(text)
    else:  # it holds the admin's password
        secure.write_private(paths.kafka_config, text)
    paths.kafka_log4j.write_text(render_log4j2())


def format_storage(
    paths: StackPaths,
    cfg: StackConfig,
    reporter: Reporter | None = None,
    cluster_id: str | None = None,
) -> None:
    """Format the data dir on first start, keeping the cluster id inside it (`cluster_id`:
    the one all nodes of a cluster share; else the one kept, or a new one)."""
    reporter = reporter or LogReporter()
    if (paths.kafka_data / "meta.properties").is_file():
        return
    paths.kafka_data.mkdir(parents=True, exist_ok=True)
    kept = paths.kafka_cluster_id.read_text().strip() if paths.kafka_cluster_id.is_file() else ""
    if cluster_id is not None:
        paths.kafka_cluster_id.write_text(cluster_id + "\n")
    elif len(kept) == 22 and not kept.startswith("-"):
        cluster_id = kept
    else:
        cluster_id = new_cluster_id()
        paths.kafka_cluster_id.write_text(cluster_id + "\n")
    argv = _java_argv(
        paths, cfg, STORAGE_TOOL, "format", "-t", cluster_id, "-c", str(paths.kafka_config)
    )
    admin = admin_credentials(paths, cfg)
    if admin is not None:
        # KRaft keeps SCRAM credentials in its metadata log: the admin's is written with
        # the storage, so the broker can authenticate its own inter-broker client.
        argv += ["--add-scram", secure.scram_argument(admin)]
    with reporter.step(f"formatting KRaft storage (cluster id {cluster_id})"):
        result = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
    if result.returncode != 0:
        output = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        if admin is not None:
            output = output.replace(admin.password, "<hidden>")
        raise StackError(
            f"Kafka storage format failed in {paths.kafka_data} "
            f"(exit code {result.returncode}):\n{output}"
        )


def start(paths: StackPaths, cfg: StackConfig, reporter: Reporter | None = None) -> ProcessRecord:
    """Start the broker and return once a produce/consume round trip succeeds."""
    reporter = reporter or LogReporter()
    for port in (cfg.kafka_port, cfg.controller_port):
        if port_open(cfg.host, port):
            raise StackError(
                f"cannot start Kafka: {cfg.host}:{port} is already in use by a process this "
                f"stack did not start; choose other ports (--kafka-port/--kafka-controller-port "
                f"or MEMSTREAM_KAFKA_PORT/MEMSTREAM_KAFKA_CONTROLLER_PORT)"
            )
    ensure_dist(paths, cfg.kafka_version, reporter)
    write_config(paths, cfg)
    format_storage(paths, cfg, reporter)
    argv = _java_argv(paths, cfg, MAIN_CLASS, str(paths.kafka_config))
    with reporter.step(f"starting Kafka {cfg.kafka_version} on {cfg.bootstrap}"):
        record = launch(
            argv,
            paths.kafka_log,
            marker=str(paths.kafka_config),
            cwd=paths.kafka_home,
            wait_ready=partial(wait_ready, paths, cfg),
            stop_timeout=10.0,
        )
        collector_first(record)
        return record


def spawn_node(
    paths: StackPaths, cfg: StackConfig, cluster_id: str, reporter: Reporter | None = None
) -> ProcessRecord:
    """Start node `cfg.node_id` of a cluster (`paths` and `cfg` of that node) without
    waiting for it: a KRaft quorum forms only once a majority of its nodes run."""
    reporter = reporter or LogReporter()
    for port in (cfg.kafka_port, cfg.controller_port):
        if port_open(cfg.host, port):
            raise StackError(
                f"cannot start Kafka node {cfg.node_id}: {cfg.host}:{port} is already in use "
                "by a process this stack did not start; choose other ports"
            )
    ensure_dist(paths, cfg.kafka_version, reporter)
    write_config(paths, cfg)
    format_storage(paths, cfg, reporter, cluster_id=cluster_id)
    if paths.kafka_log.exists():  # one log per start, the previous one kept
        paths.kafka_log.replace(paths.kafka_log.with_suffix(".log.1"))
    argv = _java_argv(paths, cfg, MAIN_CLASS, str(paths.kafka_config))
    return spawn(argv, paths.kafka_log, marker=str(paths.kafka_config), cwd=paths.kafka_home)


def wait_node(paths: StackPaths, cfg: StackConfig, record: ProcessRecord) -> None:
    """Return once node `cfg.node_id` answers on its own port and the cluster's metadata
    (as that node serves it) lists it as a broker; `StackError` with its log's last lines
    if it exits or `cfg.start_timeout` passes."""
    deadline = time.monotonic() + cfg.start_timeout
    last_error = "the broker port never opened"
    while time.monotonic() < deadline:
        if not is_ours(record):
            raise StackError(
                f"Kafka node {cfg.node_id} (pid {record.pid}) exited while starting; last "
                f"lines of {paths.kafka_log}:\n{tail(paths.kafka_log)}"
            )
        if port_open(cfg.host, cfg.kafka_port):
            try:
                ids = broker_ids(cfg.node_address, timeout=5.0)
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = f"metadata request failed: {exc}"
            else:
                if cfg.node_id in ids:
                    collector_first(record)
                    return
                last_error = f"the cluster lists brokers {sorted(ids)}, not yet this one"
        time.sleep(0.5)
    raise StackError(
        f"Kafka node {cfg.node_id} did not join the cluster within {cfg.start_timeout:.0f}s "
        f"({last_error}); last lines of {paths.kafka_log}:\n{tail(paths.kafka_log)}"
    )


def wait_ready(paths: StackPaths, cfg: StackConfig, record: ProcessRecord) -> None:
    deadline = time.monotonic() + cfg.start_timeout
    last_error = "the broker port never opened"
    while time.monotonic() < deadline:
        if not is_ours(record):
            raise StackError(
                f"Kafka (pid {record.pid}) exited while starting; last lines of "
                f"{paths.kafka_log}:\n{tail(paths.kafka_log)}"
            )
        if port_open(cfg.host, cfg.kafka_port):
            try:
                offset = kafka_roundtrip(
                    cfg.bootstrap,
                    timeout=10.0,
                    replication_factor=cfg.replication,
                    credentials=admin_credentials(paths, cfg),
                )
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last_error = f"round trip failed: {exc}"
                log.debug("kafka not ready: %s", last_error)
            else:
                log.info("kafka round trip ok at offset %d", offset)
                return
        time.sleep(0.5)
    raise StackError(
        f"Kafka did not pass its health check within {cfg.start_timeout:.0f}s ({last_error}); "
        f"last lines of {paths.kafka_log}:\n{tail(paths.kafka_log)}"
    )


def installed_version(paths: StackPaths, version: str) -> bool:
    return (paths.kafka_lib(version) / _COMPLETE).is_file()
