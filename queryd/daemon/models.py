"""The daemon's request and response bodies, built on the seeds' own models.

Every answer carries `seq`: the position in the log that the answer reflects (None for a
log with no record yet). Request bodies are validated strictly: an unknown key anywhere,
nested filters included, or a non-finite number is a 422 naming the field.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, ValidationError
from pydantic_core import CoreSchema, InitErrorDetails, core_schema

from queryd.graph.costs import CostName
from schemas.audit import AnyAuditEvent, Deletion, Document, Erasure, Message, Recall
from schemas.graph.filters import (
    DiversityOptions,
    EdgeFilter,
    MemoryFilter,
    QueryOptions,
    ScoredQueryOptions,
)
from schemas.graph.intents import Intent, IntentFilter
from schemas.graph.items import Edge, MemoryItem
from schemas.graph.results import ScoredItem
from schemas.graph.scoring import ScoreWeights
from schemas.graph.tasks import Task, TaskFilter
from schemas.graph.transplant import ExportOptions, MemexExport
from schemas.records import GraphEnvelope

M = TypeVar("M", bound=BaseModel)

ContentEvent = Annotated[Message | Document, Field(discriminator="kind")]
_REQUEST = ConfigDict(extra="forbid", allow_inf_nan=False)

# Every kind a log holds, memstream's own (Erasure) included; `schemas.audit.Event` is the
# seed's four kinds (what an importer accepts from a seed system).
EventOut = Annotated[AnyAuditEvent, Field(discriminator="kind")]


# --- strict request bodies ----------------------------------------------------------------------


def _non_finite(value: Any, location: tuple[str | int, ...]) -> list[InitErrorDetails]:
    if isinstance(value, float) and not math.isfinite(value):
        return [{"type": "finite_number", "loc": location, "input": value}]
    errors: list[InitErrorDetails] = []
    if isinstance(value, dict):
        for key, item in value.items():
            errors.extend(_non_finite(item, (*location, str(key))))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            errors.extend(_non_finite(item, (*location, index)))
    return errors


class _Strict:
    """Validates the model it annotates as a request body: unknown keys forbidden at
    every depth, numbers finite (what the model's own validation says comes after)."""

    def __get_pydantic_core_schema__(
        self, model: type[BaseModel], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        def validate(data: Any) -> Any:
            if not isinstance(data, dict):
                return data  # the model's own validation names what is wrong
            errors = _non_finite(data, ())
            if errors:
                raise ValidationError.from_exception_data(model.__name__, errors)
            return model.model_validate(data, extra="forbid")

        return core_schema.no_info_before_validator_function(validate, handler(model))


STRICT = _Strict()
StrictBody = Annotated[M, STRICT]  # StrictBody[Model]: `Model` as a strict request body


# --- answers ------------------------------------------------------------------------------------


class Answer(BaseModel):
    seq: int | None = Field(description="the log seq this answer reflects (None: empty log)")


class ErrorBody(BaseModel):
    detail: Any = Field(description="what was wrong: a message, or the validation errors")
    message: str = Field(description="one line naming the field, id or seq at fault")
    seq: int | None = None


class ProjectorOut(BaseModel):
    """The projector of a Kafka log, as its status record in Redis says."""

    state: Literal["up", "stale", "missing", "unknown"] = Field(
        description="up: a fresh heartbeat; stale: none for 3 lease periods; missing: no "
        "status record; unknown: Redis did not answer"
    )
    cause: str | None = None
    owner: str | None = None
    heartbeat_age_s: float | None = Field(default=None, description="seconds since its heartbeat")
    folded_seq: int | None = None
    published_seq: int | None = Field(
        default=None, description="the seq whose lifecycle events it published last"
    )
    lag: int | None = Field(default=None, description="records it has not folded yet")
    lifecycle_lag: int | None = Field(
        default=None, description="records whose lifecycle events are not published yet"
    )


class LogSummary(BaseModel):
    name: str
    mode: Literal["embedded", "kafka"]
    ready: bool = Field(description="hydrated, and its storage answers")
    status: Literal["hydrating", "missing", "ready", "unavailable"]
    hydrated: bool
    seq: int | None
    head: int | None
    lag: int
    error: str | None = Field(default=None, description="why it is not ready (None when it is)")
    projector: ProjectorOut | None = Field(
        default=None, description="Kafka logs only: the projector that publishes lifecycle events"
    )


class LogsAnswer(BaseModel):
    logs: list[LogSummary]


class ReadyAnswer(LogsAnswer):
    ready: bool = Field(description="every log is ready (and its projector up, if required)")


class LogAnswer(Answer):
    log: LogSummary
    audit_events: int
    items: int
    edges: int
    intents: int
    tasks: int
    rejections: int


class EventAnswer(Answer):
    event: EventOut


class EventsAnswer(Answer):
    events: list[EventOut]
    next_after_seq: int | None = Field(
        description="pass as after_seq for the next page; None when this page is the last"
    )
    prev_before_seq: int | None = Field(
        None,
        description="pass as before_seq for the page before; None when none precedes it",
    )
    deleted_at: dict[UUID, int] = Field(
        default_factory=dict,
        description="the events of this page deleted at the head (also those deleted "
        "after up_to_seq): id -> the Deletion's seq",
    )
    erased_at: dict[UUID, int] = Field(
        default_factory=dict,
        description="the events of this page whose content is erased (crypto-shredded; "
        "their content reads as erased at every seq): id -> the Erasure's seq",
    )


class DeletedItem(BaseModel):
    id: UUID
    tombstone: Deletion


class RecallStat(BaseModel):
    id: UUID
    num_recalled: int
    last_recalled_at: datetime | None


class StateAnswer(Answer):
    up_to_seq: int | None = Field(description="the audit seq the state stands at")
    visible_messages: list[Message]
    visible_documents: list[Document]
    deleted: list[DeletedItem]
    recall_stats: list[RecallStat]
    next_after_seq: int | None = Field(
        None,
        description="more content follows: pass as after_seq (with up_to_seq set to this "
        "page's up_to_seq for one consistent state); None when this page is the last",
    )


class SearchAnswer(Answer):
    query: str
    items: list[ContentEvent]


class RecallRequest(BaseModel):
    model_config = _REQUEST
    query: str = Field(min_length=1, max_length=10_000)
    limit: int = Field(default=5, ge=0, le=1000)
    session_id: str | None = None
    source: str = "unknown"
    actor: str | None = None


class RecallAnswer(Answer):
    recall: Recall
    items: list[ContentEvent]


class RejectionOut(BaseModel):
    seq: int
    reason: str
    error: str


class RejectionsAnswer(Answer):
    rejections: list[RejectionOut]


# --- graph --------------------------------------------------------------------------------------


class ItemsQuery(BaseModel):
    model_config = _REQUEST
    filter: MemoryFilter | None = None
    options: QueryOptions | None = None


class ItemsAnswer(Answer):
    items: list[MemoryItem]
    total: int = Field(description="items matching the filter, before offset and limit")


class ItemListAnswer(Answer):
    items: list[MemoryItem]


class ItemAnswer(Answer):
    item: MemoryItem


class ScoredQuery(BaseModel):
    model_config = _REQUEST
    weights: ScoreWeights
    options: ScoredQueryOptions | None = None


class ScoredAnswer(Answer):
    items: list[ScoredItem]


class SmartRetrieveQuery(BaseModel):
    model_config = _REQUEST
    budget: float = Field(ge=0)
    cost: CostName = Field(
        default="content_chars",
        description="named cost per item: unit (1), content_chars (length of the content "
        "as compact JSON), content_tokens (content_chars / 4, rounded up)",
    )
    weights: ScoreWeights
    filter: MemoryFilter | None = None
    contradictions: Literal["filter", "surface"] | None = None
    diversity: DiversityOptions | None = None


class SupportNodeOut(BaseModel):
    item: MemoryItem
    parents: list[str] = Field(description="ids of the nodes below this one in the tree")


class SupportTreeAnswer(Answer):
    root: str
    nodes: list[SupportNodeOut] = Field(
        description="the tree in pre-order, each item once; a node's parents are ids of "
        "other nodes (flat, so a chain of any depth travels)"
    )


# The graph's result records are NamedTuples (as the seed's); over HTTP they stay objects.
class Contradiction(BaseModel):
    a: MemoryItem
    b: MemoryItem
    edge: Edge | None = None


class StaleItem(BaseModel):
    item: MemoryItem
    missing_parents: list[str]


class ItemStats(BaseModel):
    total: int
    by_kind: dict[str, int]
    by_source_kind: dict[str, int]
    by_author: dict[str, int]
    by_scope: dict[str, int]
    with_parents: int
    root: int


class EdgeStats(BaseModel):
    total: int
    active: int
    by_kind: dict[str, int]


class GraphStats(BaseModel):
    items: ItemStats
    edges: EdgeStats

    @classmethod
    def of(cls, stats: Any) -> GraphStats:
        return cls.model_construct(
            items=ItemStats.model_construct(**stats.items._asdict()),
            edges=EdgeStats.model_construct(**stats.edges._asdict()),
        )


class ContradictionsAnswer(Answer):
    contradictions: list[Contradiction]


class StaleAnswer(Answer):
    stale: list[StaleItem]


class EdgesQuery(BaseModel):
    model_config = _REQUEST
    filter: EdgeFilter | None = None


class EdgesAnswer(Answer):
    edges: list[Edge]


class EdgeAnswer(Answer):
    edge: Edge


class IntentsQuery(BaseModel):
    model_config = _REQUEST
    filter: IntentFilter | None = None


class IntentsAnswer(Answer):
    intents: list[Intent]


class IntentAnswer(Answer):
    intent: Intent


class TasksQuery(BaseModel):
    model_config = _REQUEST
    filter: TaskFilter | None = None


class TasksAnswer(Answer):
    tasks: list[Task]


class TaskAnswer(Answer):
    task: Task


class StatsAnswer(Answer):
    stats: GraphStats


class ExportQuery(ExportOptions):
    model_config = _REQUEST


class ExportAnswer(Answer):
    slice: MemexExport


class LifecycleEvent(BaseModel):
    """One server-sent event's data: its offset (also the SSE id), cause seq, envelope."""

    offset: int
    seq: int
    envelope: GraphEnvelope


# --- history: diff, activity, a Recall's context (queryd.daemon.routes.history) ----------------


class Shown(BaseModel):
    """A content event as a view may show it: `event` is None when it is deleted at the
    head, even if after the seq read (its `deletion` then says when, why and by whom):
    never its text. An erased one keeps its event, whose content reads as erased."""

    id: UUID
    event: ContentEvent | None
    deletion: Deletion | None
    erasure: Erasure | None = Field(
        default=None,
        description="the Erasure that made its content unreadable (`event` then shows the "
        "content as erased)",
    )


class RecallCountChange(BaseModel):
    id: UUID
    before: int
    after: int


class DiffAnswer(Answer):
    from_seq: int
    to_seq: int
    appeared: list[Shown] = Field(
        description="content added and visible at to_seq (without its text when deleted "
        "at the head since)"
    )
    deleted: list[Shown] = Field(description="content visible at from_seq, deleted by to_seq")
    recalls: list[RecallCountChange] = Field(description="items recalled in between")
    truncated: bool = Field(description="a list was cut at `limit`")


class ActivityBucketOut(BaseModel):
    start: datetime
    counts: dict[str, int] = Field(description="events by kind in this bucket")


class ActivityAnswer(Answer):
    bucket_seconds: int
    buckets: list[ActivityBucketOut] = Field(description="ascending; only non-empty buckets")


class RecallContextAnswer(Answer):
    recall: Recall
    items: list[Shown] = Field(description="what the Recall named, in its order")
    before: list[Shown] = Field(description="its session's messages just before it")
    after: list[Shown] = Field(description="its session's messages just after it")
