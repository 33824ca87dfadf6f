"""Issue 11, item 11: readers never create the log they were asked to read. A reader of
the log itself is part of the `Log` contract (`test_log_contract`); here, the projector."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from schemas.errors import LogNotFoundError


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
