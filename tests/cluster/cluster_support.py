"""The cluster tests' handle on their three-node cluster (see conftest.py)."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass

from memstream.stack import StackError, StackPaths
from memstream.stack.manager import kill_node, partition_leaders, start_node, status


@dataclass(frozen=True)
class Cluster:
    paths: StackPaths
    bootstrap: str
    redis_url: str

    def location(self, log: str, **params: object) -> str:
        query = "".join(f"&{k}={v}" for k, v in params.items())
        return f"kafka://{self.bootstrap}/{log}?redis={self.redis_url}{query}"

    def leader(self, topic: str) -> int:
        """The node leading the topic's partition now (-1: none)."""
        deadline = time.monotonic() + 60
        while True:
            live = ",".join(str(n.address) for n in status(self.paths).nodes if n.up)
            try:
                found = [p for p in partition_leaders(live, timeout=10) if p.topic == topic]
            except StackError:  # every node busy (a loaded machine): ask again
                if time.monotonic() > deadline:
                    raise
                continue
            assert found, f"no topic {topic} on the cluster"
            return found[0].leader

    def kill(self, node: int) -> int:
        return kill_node(self.paths, node)

    def start(self, node: int) -> int:
        return start_node(self.paths, node)

    def pid(self, node: int) -> int:
        pid = status(self.paths).nodes[node - 1].pid
        assert pid is not None, f"node {node} is not running"
        return pid

    def pause(self, node: int) -> int:
        return kill_node(self.paths, node, signal.SIGSTOP)

    def resume(self, node: int) -> int:
        return kill_node(self.paths, node, signal.SIGCONT)

    def all_up(self) -> None:
        """Every node running again (a test that failed halfway may have left one down)."""
        for node in status(self.paths).nodes:
            number = int(node.name.split("-")[1])
            if node.up:
                self.resume(number)  # harmless on a running node; wakes a paused one
            else:
                self.start(number)
