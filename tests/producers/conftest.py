"""The location fixture: behaviour both modes share is tested once, over every location."""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def _kafka(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    redis_url = request.getfixturevalue("redis_url")
    topic = request.getfixturevalue("unique_name")
    return f"kafka://{bootstrap}/{topic}?redis={redis_url}"


# Each entry builds a fresh, empty log location for one test.
LOCATIONS: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "embedded": lambda request, tmp_path: str(tmp_path / "memory-db"),
    "kafka": _kafka,
}
_MARKS = {"kafka": [pytest.mark.kafka]}


@pytest.fixture(params=[pytest.param(n, marks=_MARKS.get(n, [])) for n in sorted(LOCATIONS)])
def memory_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh log location: an embedded path, or a kafka:// URL with its own topic."""
    yield LOCATIONS[request.param](request, tmp_path)


# Issue 14: the verifier built from transparency-dev's Go modules (tests/schemas/evidence).
GO_VERIFIER = Path(__file__).parents[1] / "schemas" / "evidence" / "goverify"


@pytest.fixture(scope="session")
def go_verifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("the go command is not installed")
    out = tmp_path_factory.mktemp("goverify") / "goverify"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_VERIFIER, check=True, timeout=300)
    return out


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt during the test: code that earlier tests ran in
    this process (a CLI's main) may have installed a handler of its own."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
