"""What a log record holds: an audit event, or an envelope of the memory, intent and task graphs.

One log carries both. A `GraphEnvelope` is the @ai2070/memex event envelope: a memory,
intent or task command (its `type` is the command tag, its `payload` the command), an
operation that the fold decides in log order (namespace ``memstream``, see
`projector.record_fold`), or a lifecycle event on the lifecycle topic.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from schemas.audit import Deletion, Document, Erasure, Message, Recall

__all__ = ["AuditEvent", "GraphEnvelope", "Record", "OPERATION_NAMESPACE"]

AuditEvent = Message | Document | Recall | Deletion | Erasure

# Envelopes whose outcome depends on state (decided at fold time, so that interleaving does
# not change answers) live in this namespace; their types all start with "memstream." so
# they cannot collide with a TypeScript command tag.
OPERATION_NAMESPACE = "memstream"


class GraphEnvelope(BaseModel):
    """id, namespace, type, ts (ISO-8601), trace_id and payload, as the TS library writes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    namespace: str
    type: str
    ts: str
    trace_id: str | None = None
    payload: Any = None

    def to_json_dict(self) -> dict[str, Any]:
        """The envelope as the TypeScript library serializes it (trace_id left out if unset)."""
        data: dict[str, Any] = {
            "id": self.id,
            "namespace": self.namespace,
            "type": self.type,
            "ts": self.ts,
        }
        if self.trace_id is not None:
            data["trace_id"] = self.trace_id
        data["payload"] = self.payload
        return data


Record = AuditEvent | GraphEnvelope
