"""Fixtures of the query daemon's tests (helpers live in daemon_support.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_support import LOCATIONS, Seeded, in_process, seed
from fastapi.testclient import TestClient


@pytest.fixture(
    params=[
        pytest.param("embedded"),
        pytest.param("kafka", marks=pytest.mark.kafka),
    ]
)
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty log location: an embedded directory, or a kafka:// URL of its own."""
    return LOCATIONS[request.param](request, tmp_path)


@pytest.fixture
def seeded(location: str) -> Seeded:
    return seed(location)


@pytest.fixture
def client(seeded: Seeded) -> Iterator[TestClient]:
    with in_process([seeded.location]) as c:
        yield c


@pytest.fixture
def embedded_location(tmp_path: Path) -> str:
    """A fresh embedded log directory named memory-db."""
    return str(tmp_path / "memory-db")
