"""The history routes: what changed between two seqs, activity over time, and what a
Recall put into a model's context. All read-only, over the audit state
(`queryd.audit.history`); a content event deleted at the head is answered without its
text (`Shown`), even when the answer reads an earlier seq: as the web view shows it.
"""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response

from projector.audit.state import MemoryState
from queryd.audit.history import BUCKET_CHOICES, MAX_CONTEXT, activity, diff, recall_context
from queryd.daemon.dependencies import Served
from queryd.daemon.errors import ERROR_RESPONSES, ApiError
from queryd.daemon.heavy import json_answer
from queryd.daemon.models import (
    ActivityAnswer,
    ActivityBucketOut,
    DiffAnswer,
    RecallContextAnswer,
    RecallCountChange,
    Shown,
)
from queryd.daemon.params import MinSeq
from queryd.daemon.settings import MAX_PAGE
from schemas.audit import Deletion, Document, Message

__all__ = ["router", "shown"]

router = APIRouter(tags=["history"], responses=ERROR_RESPONSES)


def shown(memory: MemoryState, event: Message | Document | None, item_id: UUID) -> Shown:
    """`event` as a view may show it, `memory` being the newest state: without it when
    deleted there."""
    deletion: Deletion | None = memory.deleted.get(item_id)
    return Shown.model_construct(
        id=item_id,
        event=None if deletion is not None else event,
        deletion=deletion,
        erasure=memory.erasure_of(item_id),
    )


def _not_past(field: str, value: int | None, head: int | None) -> None:
    """A 422 naming `field` when it asks for a seq the log has not reached."""
    if value is not None and value > (-1 if head is None else head):
        raise ApiError(422, f"{field}: seq {value} is past the log's head ({head})", seq=head)


@router.get(
    "/logs/{log}/diff",
    summary="what appeared, was deleted, or was recalled between two seqs",
    response_model=DiffAnswer,
)
async def get_diff(
    served: Served,
    from_seq: Annotated[int, Query(ge=-1, description="the state after this seq (-1: empty)")],
    to_seq: Annotated[int, Query(ge=-1, description="... to the state after this seq")],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="entries a list at most")] = 1_000,
    min_seq: MinSeq = None,
) -> Response:
    state = await served.state(min_seq)
    _not_past("to_seq", to_seq, state.last_seq)

    def build() -> DiffAnswer:
        found = diff(state.memory, from_seq, to_seq, limit)
        return DiffAnswer.model_construct(
            seq=state.last_seq,
            from_seq=found.from_seq,
            to_seq=found.to_seq,
            appeared=[shown(state.memory, e, e.id) for e in found.appeared],
            deleted=[
                Shown.model_construct(
                    id=event.id,
                    event=None,
                    deletion=deletion,
                    erasure=state.memory.erasure_of(event.id),
                )
                for event, deletion in found.deleted
            ],
            recalls=[
                RecallCountChange.model_construct(id=r.id, before=r.before, after=r.after)
                for r in found.recalls
            ],
            truncated=found.truncated,
        )

    return await json_answer(served.daemon.heavy, build, state.last_seq)


@router.get(
    "/logs/{log}/activity",
    summary="events per time bucket and kind, by the events' timestamps",
    response_model=ActivityAnswer,
)
async def get_activity(
    served: Served,
    bucket_seconds: Annotated[
        int | None,
        Query(
            ge=1,
            le=BUCKET_CHOICES[-1],
            description="the bucket's length; by default the smallest of "
            f"{', '.join(map(str, BUCKET_CHOICES))} s that keeps the log in 2000 buckets",
        ),
    ] = None,
    up_to_seq: Annotated[int | None, Query(ge=-1)] = None,
    min_seq: MinSeq = None,
) -> Response:
    state = await served.state(min_seq)

    def build() -> ActivityAnswer:
        found = activity(state.memory, bucket_seconds=bucket_seconds, up_to_seq=up_to_seq)
        return ActivityAnswer.model_construct(
            seq=state.last_seq,
            bucket_seconds=found.bucket_seconds,
            buckets=[
                ActivityBucketOut.model_construct(start=b.start, counts=b.counts)
                for b in found.buckets
            ],
        )

    return await json_answer(served.daemon.heavy, build, state.last_seq)


@router.get(
    "/logs/{log}/recalls/{recall_id}/context",
    summary="what the model saw: a Recall, the items it named, the messages around it",
    description="The items it named; one deleted at the head (even after the Recall or "
    "`up_to_seq`) comes without its text, with its Deletion. `before` and `after` "
    "are the Recall's session's messages just before and after it (the prompt, and the "
    "answer when the Assistant wrote them).",
    response_model=RecallContextAnswer,
)
async def get_recall_context(
    served: Served,
    recall_id: Annotated[UUID, Path(description="the Recall's event id")],
    around: Annotated[int, Query(ge=0, le=MAX_CONTEXT)] = 5,
    up_to_seq: Annotated[int | None, Query(ge=-1)] = None,
    min_seq: MinSeq = None,
) -> Response:
    state = await served.state(min_seq)
    memory = state.memory.at(up_to_seq)
    found = recall_context(memory, recall_id, around)
    if found is None:
        raise ApiError(
            404,
            f"recall_id: no Recall {str(recall_id)!r} in log {served.handle.name!r}",
            seq=state.last_seq,
        )

    def build() -> RecallContextAnswer:
        return RecallContextAnswer.model_construct(
            seq=state.last_seq,
            recall=found.recall,
            items=[shown(state.memory, item.event, item.id) for item in found.items],
            before=[shown(state.memory, m, m.id) for m in found.before],
            after=[shown(state.memory, m, m.id) for m in found.after],
        )

    return await json_answer(served.daemon.heavy, build, state.last_seq)
