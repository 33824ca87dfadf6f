"""A three-node KRaft cluster of the cluster tests' own: started once per session by
`memstream.stack.up(brokers=3)` in a temporary folder, on free loopback ports, with the
stack's jars, and stopped at the end whatever happens. The shared stack is never touched.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import Cluster

from memstream.stack import StackConfig, StackPaths, down, up
from memstream.stack.manager import kill_node, status
from memstream.stack.probes import free_ports

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    stack_root = os.environ.get("MEMSTREAM_STACK_DIR")
    paths = StackPaths(
        tmp_path_factory.mktemp("cluster"),
        cache=Path(stack_root) if stack_root else REPO_ROOT / ".stack",  # the jars, fetched once
    )
    ports = free_ports(7)
    cfg = StackConfig(
        brokers=3,
        kafka_port=ports[0],
        controller_port=ports[3],
        kafka_ports=tuple(ports[0:3]),
        controller_ports=tuple(ports[3:6]),
        redis_port=ports[6],
        kafka_heap="512m",  # three JVMs on a shared machine
        # A node restarted after a kill, with the writers, a projector and queryd beside
        # three JVMs on two cores, once took 180 s to be unfenced (the fresh-clone run of
        # 5 December, 20:28): the start waits longer than that.
        start_timeout=300.0,
    )
    try:
        result = up(cfg, paths)
        yield Cluster(paths, result.bootstrap, result.redis_url)
    finally:
        for node in status(paths).nodes:
            if node.up:
                try:
                    kill_node(paths, int(node.name.split("-")[1]), signal.SIGCONT)
                except Exception:  # noqa: BLE001 - stopping is what matters
                    pass
        down(paths, timeout=20.0)


@pytest.fixture
def healthy(cluster: Cluster) -> Iterator[Cluster]:
    """The cluster with every node up before and after the test."""
    cluster.all_up()
    yield cluster
    cluster.all_up()
