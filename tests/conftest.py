"""Shared fixtures: the real Kafka broker and Redis, unique names, and CI's no-skip rule.

Servers come from, in order: KAFKA_BOOTSTRAP_SERVERS / REDIS_URL in the environment; the
stack in `.stack/` if it is up (`memstream stack up`); else this session starts the stack
itself and stops it at the end.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from memstream.stack import StackPaths

log = logging.getLogger("memstream.tests")

REPO_ROOT = Path(__file__).resolve().parents[1]

# pytester lets tests/memstream/test_stack_ci.py check the skip rule below on a tiny suite.
pytest_plugins = ["pytester"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# --- CI: a skipped test is a failure --------------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    # xfail is reported as a skip with `wasxfail`; it is an expectation, not a skip.
    if _in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI (CI is set, so a skip is a failure): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if _in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"module skipped in CI (CI is set, so a skip is a failure): {report.longrepr}"
        )


# --- servers ----------------------------------------------------------------------------------


def _stack_paths() -> StackPaths:
    # Imported late: a suite that needs no server should not depend on the stack importing.
    from memstream.stack import StackPaths

    root = os.environ.get("MEMSTREAM_STACK_DIR")
    return StackPaths(Path(root).resolve() if root else REPO_ROOT / ".stack")


@pytest.fixture(scope="session")
def _servers() -> Generator[tuple[str, str], None, None]:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    redis_url = os.environ.get("REDIS_URL")
    if bootstrap and redis_url:
        yield bootstrap, redis_url
        return

    from memstream.stack import down, read_env, up

    paths = _stack_paths()
    env = read_env(paths)
    if env is not None:
        yield (
            bootstrap or env["KAFKA_BOOTSTRAP_SERVERS"],
            redis_url or env["REDIS_URL"],
        )
        return

    log.info("starting the stack in %s for this test session", paths.root)
    result = up(paths=paths)
    try:
        yield bootstrap or result.bootstrap, redis_url or result.redis_url
    finally:
        if result.started:  # stop only what this session started
            down(paths)


@pytest.fixture(scope="session")
def kafka_bootstrap(_servers: tuple[str, str]) -> str:
    """host:port of the real Kafka broker."""
    return _servers[0]


@pytest.fixture(scope="session")
def redis_url(_servers: tuple[str, str]) -> str:
    """redis:// URL of the real Redis."""
    return _servers[1]


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A topic name / Redis key prefix no other test (or run) uses: t-<test-slug>-<uuid8>.

    Valid as a Kafka topic name (letters, digits, '.', '_', '-'; at most 249 characters).
    """
    slug = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-").lower()[:80]
    return f"t-{slug}-{uuid.uuid4().hex[:8]}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The test process never hosts ArcadeDB's JVM: the seed's database and the importer's
    reads run it in child processes (a JVM fault there fails one test; here it ended the
    whole run with a segfault once). A test that started it here fails the run."""
    import sys

    jpype = sys.modules.get("jpype")
    if jpype is not None and jpype.isJVMStarted():
        print("\nerror: a test started ArcadeDB's JVM in the test process (run it in a child)")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
