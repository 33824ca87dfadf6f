"""The stack's pure parts and pid handling, without Kafka or Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memstream.stack import procs
from memstream.stack.config import (
    DEFAULT_KAFKA_VERSION,
    StackConfig,
    parse_env,
    render_env,
    render_pom,
    render_redis_conf,
    render_server_properties,
)
from memstream.stack.kafka import new_cluster_id
from memstream.stack.paths import StackPaths, find_project_root


def _props(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_defaults_avoid_the_usual_ports() -> None:
    cfg = StackConfig.from_env({})
    assert (cfg.kafka_port, cfg.controller_port, cfg.redis_port) == (19092, 19093, 16379)
    assert cfg.bootstrap == "127.0.0.1:19092"
    assert cfg.redis_url == "redis://127.0.0.1:16379/0"
    assert cfg.kafka_version == DEFAULT_KAFKA_VERSION
    assert cfg.kafka_version.startswith("4.")


def test_env_then_flags_override_defaults() -> None:
    env = {
        "MEMSTREAM_KAFKA_PORT": "29092",
        "MEMSTREAM_KAFKA_CONTROLLER_PORT": "29093",
        "MEMSTREAM_REDIS_PORT": "26379",
    }
    cfg = StackConfig.from_env(env)
    assert (cfg.kafka_port, cfg.controller_port, cfg.redis_port) == (29092, 29093, 26379)
    cfg = StackConfig.from_env(env, kafka_port=39092, redis_port=None)
    assert (cfg.kafka_port, cfg.redis_port) == (39092, 26379)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MEMSTREAM_KAFKA_PORT": "abc"}, "MEMSTREAM_KAFKA_PORT='abc'"),
        ({"MEMSTREAM_REDIS_PORT": "70000"}, "MEMSTREAM_REDIS_PORT=70000"),
        ({"MEMSTREAM_REDIS_PORT": "19092"}, "three different ports"),
    ],
)
def test_bad_ports_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StackConfig.from_env(env)


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    cfg = StackConfig(kafka_port=1111, controller_port=2222)
    props = _props(render_server_properties(cfg, tmp_path / "data"))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:2222"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:1111,CONTROLLER://127.0.0.1:2222"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:1111"
    assert props["log.dirs"] == str(tmp_path / "data")
    for key in (
        "default.replication.factor",
        "min.insync.replicas",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    ):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    # A projector group (KIP-848) may ask for a session short enough to move a dead
    # member's logs within the takeover goal (the broker's own bound is 45 s).
    assert int(props["group.consumer.min.session.timeout.ms"]) <= 6000
    assert int(props["group.consumer.min.heartbeat.interval.ms"]) <= 500
    assert int(props["group.min.session.timeout.ms"]) <= 4000  # the classic protocol's
    # A reconnect storm after a stall is accepted, not dropped (the default backlog: 50).
    assert int(props["socket.listen.backlog.size"]) >= 1024
    # Kafka's own broker session (9 s): a longer one kept a restarted broker from
    # registering until the old session ended (README, 5 December).
    assert "broker.session.timeout.ms" not in props
    # The log is the system of record: nothing expires, and logs are created deliberately.
    assert props["log.retention.ms"] == "-1"
    assert props["auto.create.topics.enable"] == "false"


def test_redis_conf_loopback_and_marked(tmp_path: Path) -> None:
    cfg = StackConfig(redis_port=4444)
    conf = render_redis_conf(cfg, tmp_path, tmp_path / "redis.pid")
    assert "bind 127.0.0.1" in conf
    assert "port 4444" in conf
    assert "daemonize no" in conf
    assert f'pidfile "{tmp_path / "redis.pid"}"' in conf
    assert "{config-file}" in conf  # how `down` recognises our redis-server


def test_pom_names_the_broker_and_a_logging_binding() -> None:
    pom = render_pom("4.9.9")
    assert "<artifactId>kafka_2.13</artifactId>" in pom
    assert "<version>4.9.9</version>" in pom
    assert "log4j-slf4j-impl" in pom


def test_env_file_round_trips() -> None:
    text = render_env("127.0.0.1:19092", "redis://127.0.0.1:16379/0")
    assert text.splitlines() == [
        "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:19092",
        "export REDIS_URL=redis://127.0.0.1:16379/0",
    ]
    assert parse_env(text) == {
        "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
        "REDIS_URL": "redis://127.0.0.1:16379/0",
    }


def test_env_file_is_valid_shell() -> None:
    text = render_env("h:1", "redis://h:2/0?x=a b")
    out = subprocess.run(
        ["bash", "-c", text + 'printf "%s|%s" "$KAFKA_BOOTSTRAP_SERVERS" "$REDIS_URL"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == "h:1|redis://h:2/0?x=a b"
    assert parse_env(text)["REDIS_URL"] == "redis://h:2/0?x=a b"


def test_cluster_id_shape() -> None:
    ids = {new_cluster_id() for _ in range(2000)}
    assert len(ids) == 2000
    for cid in ids:
        assert len(cid) == 22 and "=" not in cid
        assert not cid.startswith("-")  # the storage tool would take it for an option


def test_paths_live_under_the_root(tmp_path: Path) -> None:
    paths = StackPaths(tmp_path / ".stack")
    assert paths.kafka_lib("4.4.0") == tmp_path / ".stack" / "kafka-4.4.0" / "lib"
    shared = StackPaths(tmp_path / "a", cache=tmp_path / "cache")
    assert shared.kafka_lib("4.4.0") == tmp_path / "cache" / "kafka-4.4.0" / "lib"
    assert shared.kafka_data == tmp_path / "a" / "kafka" / "data"


def test_project_root_is_found_from_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert find_project_root(tmp_path / "a" / "b") == tmp_path


# --- pid checks -------------------------------------------------------------------------------


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[procs.ProcessRecord]:
    marker = str(tmp_path / "marker-for-this-test")
    record = procs.spawn(
        [sys.executable, "-c", "import time, sys; time.sleep(60)", marker],
        tmp_path / "sleeper.log",
        marker=marker,
    )
    yield record
    procs.terminate(record, timeout=2.0)


def test_spawned_process_is_recognised(sleeper: procs.ProcessRecord) -> None:
    assert procs.is_ours(sleeper)
    assert sleeper.starttime > 0


def test_pid_with_other_start_time_is_not_ours(sleeper: procs.ProcessRecord) -> None:
    reused = procs.ProcessRecord(sleeper.pid, sleeper.starttime + 1, sleeper.marker)
    assert not procs.is_ours(reused)
    assert procs.terminate(reused, timeout=1.0) is False
    assert procs.is_ours(sleeper)  # the real process was left alone


def test_pid_with_other_command_line_is_not_ours(sleeper: procs.ProcessRecord) -> None:
    other = procs.ProcessRecord(sleeper.pid, sleeper.starttime, "/some/other/stack/server.conf")
    assert not procs.is_ours(other)
    assert procs.terminate(other, timeout=1.0) is False
    assert procs.is_ours(sleeper)


def test_terminate_stops_and_reaps(sleeper: procs.ProcessRecord) -> None:
    assert procs.terminate(sleeper, timeout=5.0) is True
    assert not procs.is_ours(sleeper)
    assert procs.read_stat(sleeper.pid) is None  # reaped, not a zombie


def test_sigkill_after_timeout(tmp_path: Path) -> None:
    marker = str(tmp_path / "stubborn")
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    record = procs.spawn([sys.executable, "-c", code, marker], tmp_path / "s.log", marker=marker)
    procs.wait_exit(record, 0.5)  # let it install its handler
    assert procs.terminate(record, timeout=0.5) is True
    assert not procs.is_ours(record)


def test_dead_pid_is_not_ours() -> None:
    assert not procs.is_ours(procs.ProcessRecord(2**22 + 12345, 1, "x"))


def test_tail_of_missing_log(tmp_path: Path) -> None:
    assert "no log" in procs.tail(tmp_path / "nope.log")
    (tmp_path / "l.log").write_text("\n".join(str(i) for i in range(100)))
    assert procs.tail(tmp_path / "l.log", lines=3) == "97\n98\n99"


def test_a_cluster_node_renders_its_own_ports_and_the_replicated_shape(tmp_path: Path) -> None:
    """Node 2 of 3: its own id and listeners, every node a voter, replication 3, writes
    acknowledged by 2, unclean leader election off, internal topics replicated too."""
    cfg = StackConfig(brokers=3, kafka_port=31000, controller_port=31001).node(2)
    props = _props(render_server_properties(cfg, tmp_path / "data"))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == (
        "1@127.0.0.1:31001,2@127.0.0.1:31003,3@127.0.0.1:31005"
    )
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:31002,CONTROLLER://127.0.0.1:31003"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:31002"
    assert props["default.replication.factor"] == "3"
    assert props["min.insync.replicas"] == "2"
    assert props["unclean.leader.election.enable"] == "false"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert cfg.bootstrap == "127.0.0.1:31000,127.0.0.1:31002,127.0.0.1:31004"
    assert int(props["socket.listen.backlog.size"]) >= 1024


def test_the_single_broker_stays_the_default() -> None:
    cfg = StackConfig.from_env({})
    assert cfg.brokers == 1 and cfg.bootstrap == "127.0.0.1:19092"
    assert StackConfig.from_env({"MEMSTREAM_KAFKA_BROKERS": "3"}).brokers == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"brokers": 0}, "at least one Kafka node"),
        ({"brokers": 3, "kafka_ports": (1, 2)}, r"kafka_ports=\[1, 2\]: expected one port per"),
        # node 2's broker port (19094) is the controller port given for node 1
        ({"brokers": 3, "controller_port": 19094}, "must all differ"),
    ],
)
def test_bad_cluster_shapes_are_named(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StackConfig.from_env({}, **overrides)
    with pytest.raises(ValueError, match="MEMSTREAM_KAFKA_BROKERS='x'"):
        StackConfig.from_env({"MEMSTREAM_KAFKA_BROKERS": "x"})


def test_cluster_nodes_have_paths_of_their_own(tmp_path: Path) -> None:
    paths = StackPaths(tmp_path)
    homes = {paths.for_node(n).kafka_home for n in (1, 2, 3)}
    assert len(homes) == 3 and paths.kafka_home not in homes
    assert paths.for_node(2).kafka_data == tmp_path / "kafka-2" / "data"


def test_a_favoured_server_is_started_through_nice_only_where_it_may(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(procs.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(procs.os, "geteuid", lambda: 0)
    assert procs.favoured(["redis-server", "x.conf"]) == [
        "/usr/bin/nice",
        "-n",
        str(procs.FAVOURED_NICENESS),
        "redis-server",
        "x.conf",
    ]
    monkeypatch.setattr(procs.os, "geteuid", lambda: 1000)  # may not raise a priority
    assert procs.favoured(["redis-server", "x.conf"]) == ["redis-server", "x.conf"]
    monkeypatch.setattr(procs.os, "geteuid", lambda: 0)
    monkeypatch.setattr(procs.shutil, "which", lambda name: None)  # no coreutils nice
    assert procs.favoured(["redis-server"]) == ["redis-server"]


def test_running_first_is_asked_of_the_kernel_and_refusals_are_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[int, int, int]] = []

    def setscheduler(pid: int, policy: int, param: os.sched_param) -> None:
        asked.append((pid, policy, param.sched_priority))

    monkeypatch.setattr(procs.os, "sched_setscheduler", setscheduler)
    assert procs.run_first(4242) is True
    assert asked == [(4242, os.SCHED_RR, procs.REALTIME_PRIORITY)]

    def refuse(pid: int, policy: int, param: os.sched_param) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(procs.os, "sched_setscheduler", refuse)
    assert procs.run_first(4242) is False
    monkeypatch.delattr(procs.os, "sched_setscheduler")  # not Linux
    assert procs.run_first(4242) is False


def test_threads_run_first_are_chosen_by_their_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from memstream.stack.kafka import is_collector_thread

    asked: list[int] = []
    monkeypatch.setattr(procs, "run_first", lambda tid: asked.append(tid) or True)
    ready, release = threading.Event(), threading.Event()
    tids: list[int] = []

    def worker() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        release.wait(10)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        ready.wait(10)
        with open(f"/proc/self/task/{tids[0]}/comm", "w") as comm:
            comm.write("GC Thread#7")
        assert procs.run_threads_first(os.getpid(), is_collector_thread) == [tids[0]]
        assert asked == [tids[0]]
    finally:
        release.set()
        thread.join()
    assert [is_collector_thread(n) for n in ("VM Thread", "GC Thread#0", "G1 Conc#0")] == [
        True,
        True,
        False,
    ]
    assert procs.run_threads_first(2**22 + 1, is_collector_thread) == []  # no such process
