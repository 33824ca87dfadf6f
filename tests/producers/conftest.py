"""The location fixture: behaviour both modes share is tested once, over every location."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Each entry builds a fresh, empty log location for one test. The Kafka entry is added
# by the distributed log (it needs the kafka_bootstrap/redis_url fixtures).
LOCATIONS: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "embedded": lambda request, tmp_path: str(tmp_path / "memory-db"),
}


@pytest.fixture(params=sorted(LOCATIONS))
def memory_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh log location: an embedded path, or a kafka:// URL with its own topic."""
    yield LOCATIONS[request.param](request, tmp_path)
