"""Issue 11, item 11: readers never create the log they were asked to read."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from producers.memory import Memory
from schemas.errors import LogNotFoundError


def test_embedded_reader_does_not_create(tmp_path: Path) -> None:
    with pytest.raises(LogNotFoundError, match="only writers create"):
        Memory(tmp_path / "typo", create=False)
    assert not (tmp_path / "typo").exists()


@pytest.mark.kafka
def test_kafka_reader_does_not_create(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with pytest.raises(LogNotFoundError, match="only writers create"):
        Memory(location, create=False)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert unique_name not in topics
    assert f"{unique_name}.lifecycle" not in topics
    with Memory(location):  # a writer creates it
        pass
    with Memory(location, create=False) as reader:
        assert len(reader) == 0


@pytest.mark.kafka
def test_the_projector_does_not_create_the_log_it_folds(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    from projector.service import Projector

    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with pytest.raises(LogNotFoundError, match=unique_name):
        Projector(location)
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert unique_name not in topics
