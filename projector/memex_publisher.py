"""Publishing the derived topic ``LOG.memex`` from the projector (see `projector.memex_topic`).

Each graph record the projector folds becomes the TypeScript envelopes
`memex_envelopes` makes; they are produced, as plain JSON text, to ``LOG.memex``, one
partition, in log order, each with the seq of its record and its index among that record's
envelopes in headers. Exactly once, as the lifecycle topic: the projector produces a
record's envelopes in the same Kafka transaction as its lifecycle events (fenced by the
same transactional id), and skips them on a refold exactly when it finds that record's
lifecycle events already published; nothing is read back from this topic, so nothing
written to it by others can make the projector skip or repeat an envelope.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from confluent_kafka.admin import AdminClient

from producers.logs.kafka_client import (
    DERIVED_TOPIC_MAX_MESSAGE_BYTES,
    INDEX_HEADER,
    SEQ_HEADER,
    KafkaHeaders,
    ensure_topic,
)
from producers.logs.location import KafkaLocation
from projector.lifecycle import MAX_LIFECYCLE_BYTES, Lifecycle
from projector.memex_topic import memex_envelopes, memex_topic
from projector.record_fold import LogState
from schemas.codec import decode_record
from schemas.errors import DecodeError

__all__ = ["MemexPublisher"]

_GRAPH_NAMESPACES = frozenset({"memory", "intent", "task", "memstream"})
_JSON_KIND = ("kind", b"memex-json")
log = logging.getLogger(__name__)


class MemexPublisher:
    """The derived topic of one log: created with the projector, its records made here and
    produced by the projector's transactional producer."""

    def __init__(self, location: KafkaLocation, admin: AdminClient) -> None:
        self.topic = memex_topic(location.topic)
        self._replication = location.replication_factor
        self.ensure(admin)

    def ensure(self, admin: AdminClient) -> None:
        """Create the derived topic, or check it (as `ensure_topic` does)."""
        ensure_topic(
            admin, self.topic, self._replication, message_bytes=DERIVED_TOPIC_MAX_MESSAGE_BYTES
        )

    def records(
        self, before: LogState, after: LogState, seq: int, data: bytes, events: list[Lifecycle]
    ) -> list[tuple[bytes, KafkaHeaders]]:
        """(value, headers) of the envelopes of the record ``data`` at ``seq``, folded from
        ``before`` into ``after`` with ``events``; none for an audit event or a rejection."""
        if not events or events[0].namespace not in _GRAPH_NAMESPACES:
            return []
        try:
            record = decode_record(data)
        except DecodeError:
            return []
        out = []
        for index, envelope in enumerate(memex_envelopes(before, after, seq, record, events)):
            value = _json_bytes(envelope)
            if len(value) > MAX_LIFECYCLE_BYTES:
                # Never seen from records under the logs' size limit (an envelope's JSON is
                # about its record's); left out, and said, rather than fail the projector.
                log.error(
                    "seq %d: its LOG.memex envelope %d is %d bytes, over the limit of "
                    "%d; left out of %s",
                    seq,
                    index,
                    len(value),
                    MAX_LIFECYCLE_BYTES,
                    self.topic,
                )
                continue
            headers: KafkaHeaders = [
                _JSON_KIND,
                (SEQ_HEADER, str(seq).encode()),
                (INDEX_HEADER, str(index).encode()),
            ]
            out.append((value, headers))
        return out


def _json_bytes(envelope: dict[str, Any]) -> bytes:
    return json.dumps(envelope, separators=(",", ":"), ensure_ascii=False).encode()
