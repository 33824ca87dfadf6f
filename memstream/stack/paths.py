"""Where the stack keeps its files: one `.stack/` folder, ignored by git."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

STACK_DIR_ENV = "MEMSTREAM_STACK_DIR"


def find_project_root(start: Path | None = None) -> Path:
    """The nearest folder at or above `start` holding a pyproject.toml, else `start`.

    So `memstream stack status` finds the same `.stack/` from any subfolder of the repo.
    """
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").is_file():
            return candidate
    return here


def default_stack_dir(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    configured = env.get(STACK_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return find_project_root() / ".stack"


@dataclass(frozen=True)
class StackPaths:
    """Every file the stack reads or writes, derived from its root folder.

    `cache` holds what is fetched once and reused (the broker's jars); it defaults to the
    root but can be shared, so a throwaway stack (e.g. in a test) does not fetch again.
    """

    root: Path
    cache: Path | None = None
    # Which Kafka node the kafka_* paths are of: 0 for the one broker of the default stack
    # (`kafka/`), k for node k of a cluster (`kafka-k/`, each its own config, data and log).
    node: int = 0

    def for_node(self, node: int) -> StackPaths:
        """These paths with kafka_* those of cluster node `node` (1-based)."""
        return replace(self, node=node)

    @property
    def cache_dir(self) -> Path:
        return self.cache if self.cache is not None else self.root

    @property
    def lock(self) -> Path:
        return self.root / "lock"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def env_file(self) -> Path:
        return self.root / "env"

    def kafka_dist(self, version: str) -> Path:
        return self.cache_dir / f"kafka-{version}"

    def kafka_lib(self, version: str) -> Path:
        return self.kafka_dist(version) / "lib"

    @property
    def kafka_home(self) -> Path:
        return self.root / ("kafka" if self.node == 0 else f"kafka-{self.node}")

    @property
    def kafka_data(self) -> Path:
        return self.kafka_home / "data"

    @property
    def kafka_config(self) -> Path:
        return self.kafka_home / "server.properties"

    @property
    def kafka_log4j(self) -> Path:
        return self.kafka_home / "log4j2.properties"

    @property
    def kafka_log(self) -> Path:
        return self.kafka_home / "kafka.log"

    @property
    def kafka_cluster_id(self) -> Path:
        return self.kafka_data / "memstream-cluster-id"

    @property
    def redis_home(self) -> Path:
        return self.root / "redis"

    @property
    def redis_config(self) -> Path:
        return self.redis_home / "redis.conf"

    @property
    def redis_log(self) -> Path:
        return self.redis_home / "redis.log"

    @property
    def redis_pidfile(self) -> Path:
        return self.redis_home / "redis.pid"
