"""`memstream stack up` is idempotent and `status` reports up, on the real servers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memstream.cli import main
from memstream.stack import StackConfig, StackPaths, down, status
from memstream.stack.probes import free_ports

pytestmark = pytest.mark.kafka

REPO_STACK = Path(__file__).resolve().parents[2] / ".stack"


@pytest.fixture(scope="module")
def stack_args(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """`--stack-dir` (and ports) of a running local stack: the repo's when it is up (as under
    `make test`), else a throwaway one on free ports that reuses the repo's jar cache."""
    if status(StackPaths(REPO_STACK)).up:
        yield ["--stack-dir", str(REPO_STACK)]
        return
    root = tmp_path_factory.mktemp("stack")
    kafka_port, controller_port, redis_port = free_ports(3)
    args = [
        "--stack-dir",
        str(root),
        "--kafka-port",
        str(kafka_port),
        "--kafka-controller-port",
        str(controller_port),
        "--redis-port",
        str(redis_port),
    ]
    # Share the fetched jars so this does not fetch Kafka a second time.
    version = StackConfig.from_env().kafka_version
    if (REPO_STACK / f"kafka-{version}").is_dir():
        (root / f"kafka-{version}").symlink_to(REPO_STACK / f"kafka-{version}")
    yield args
    down(StackPaths(root))


def _common(args: list[str]) -> list[str]:
    return args[:2]


def test_up_twice_is_idempotent_and_status_reports_up(
    stack_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stack", "up", *stack_args]) == 0
    first = capsys.readouterr().out
    assert "KAFKA_BOOTSTRAP_SERVERS=" in first and "REDIS_URL=" in first
    paths = StackPaths(Path(stack_args[1]))
    before = status(paths)
    assert before.up

    assert main(["stack", "up", *stack_args]) == 0
    second = capsys.readouterr().out
    assert "already up" in second
    after = status(paths)
    assert (after.kafka.pid, after.redis.pid) == (before.kafka.pid, before.redis.pid)

    assert main(["stack", "status", *_common(stack_args)]) == 0
    out = capsys.readouterr().out
    kafka_line = next(line for line in out.splitlines() if line.startswith("kafka"))
    redis_line = next(line for line in out.splitlines() if line.startswith("redis"))
    assert " up " in kafka_line and f"pid={after.kafka.pid}" in kafka_line
    assert f"version={after.kafka.version}" in kafka_line and after.kafka.version
    assert " up " in redis_line and f"pid={after.redis.pid}" in redis_line

    assert main(["stack", "env", *_common(stack_args)]) == 0
    env = capsys.readouterr().out
    assert f"export KAFKA_BOOTSTRAP_SERVERS={after.kafka.address}" in env
    assert f"export REDIS_URL={after.redis.address}" in env


def test_status_of_an_empty_stack_dir_is_down(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stack", "status", "--stack-dir", str(tmp_path)]) == 3
    out = capsys.readouterr().out
    assert "kafka  down" in out and "redis  down" in out
    assert main(["stack", "env", "--stack-dir", str(tmp_path)]) == 1
    assert main(["stack", "down", "--stack-dir", str(tmp_path)]) == 0
