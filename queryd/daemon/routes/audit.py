"""The audit memory's routes: events, the state as of a seq, search, recall, rejections.

Only ``POST /logs/{log}/recall`` appends to a log (its Recall, through `Memory.recall`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated
from uuid import UUID

from fastapi import APIRouter, Query, Request, Response

from producers.logs.signing_key import SigningKeyError
from projector.record_fold import LogState
from queryd.audit import search
from queryd.audit.events import select_events
from queryd.audit.state_page import select_state
from queryd.daemon.access import acting_agent
from queryd.daemon.dependencies import DaemonContext, Served
from queryd.daemon.errors import ERROR_RESPONSES, ApiError
from queryd.daemon.heavy import json_answer
from queryd.daemon.models import (
    DeletedItem,
    EventAnswer,
    EventsAnswer,
    RecallAnswer,
    RecallRequest,
    RecallStat,
    RejectionOut,
    RejectionsAnswer,
    SearchAnswer,
    StateAnswer,
    StrictBody,
)
from queryd.daemon.params import MinSeq
from queryd.daemon.routes.families import ById, PagedList, add_by_id, add_paged_list
from queryd.daemon.seq import SEQ_HEADER, seq_text, stamp_seq
from queryd.daemon.settings import MAX_PAGE, STATE_PAGE
from schemas.audit import EventKind
from schemas.errors import MemstreamError
from schemas.evidence.note import NoteSigner
from schemas.tokens import ScopeRefused

__all__ = ["router"]

log = logging.getLogger("memstream.queryd.recall")

router = APIRouter(tags=["audit"], responses=ERROR_RESPONSES)

add_by_id(
    router,
    ById(
        path="/logs/{log}/events/{event_id}",
        name="get_event",
        summary="one event, deleted or not",
        param="event_id",
        key_type=UUID,
        what="event",
        lookup=lambda state, event_id: state.memory.get(event_id),
        answer=EventAnswer,
        field="event",
    ),
)


@router.get(
    "/logs/{log}/events",
    summary="the log in seq order, filtered, paged",
    response_model=EventsAnswer,
)
async def list_events(
    served: Served,
    kind: Annotated[EventKind | None, Query()] = None,
    session_id: Annotated[str | None, Query()] = None,
    actor: Annotated[str | None, Query(max_length=1_000)] = None,
    text: Annotated[
        str | None,
        Query(
            max_length=1_000,
            description="a case-insensitive substring of what an event says (content, "
            "name and text, query, reason); events deleted at the head never match",
        ),
    ] = None,
    after_seq: Annotated[int | None, Query(ge=-1)] = None,
    before_seq: Annotated[
        int | None,
        Query(ge=0, description="the last `limit` matching events before this seq"),
    ] = None,
    up_to_seq: Annotated[int | None, Query(ge=-1)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    min_seq: MinSeq = None,
) -> Response:
    state = await served.state(min_seq)

    def build() -> EventsAnswer:
        found = select_events(
            state.memory,
            kind=kind,
            session_id=session_id,
            actor=actor,
            text=text or None,
            after_seq=after_seq,
            before_seq=before_seq,
            up_to_seq=up_to_seq,
            limit=limit,
        )
        deleted = state.memory.deleted
        return EventsAnswer.model_construct(
            seq=state.last_seq,
            events=found.events,
            next_after_seq=found.next_after_seq,
            prev_before_seq=found.prev_before_seq,
            deleted_at={e.id: deleted[e.id].seq for e in found.events if e.id in deleted},
            erased_at={
                e.id: erasure.seq
                for e in found.events
                if (erasure := state.memory.erasure_of(e.id)) is not None
            },
        )

    return await json_answer(served.daemon.heavy, build, state.last_seq)


@router.get(
    "/logs/{log}/state",
    summary="the audit state at the head or as of a seq, one page at a time",
    description="The state's lists (visible messages and documents, deleted items, "
    "recall statistics) for the content events (messages and documents) with a seq "
    f"after `after_seq`, at most `limit` of them (default {STATE_PAGE}) in seq order, "
    "each in the list it belongs to. `next_after_seq` is set when more follow: pass it "
    "as `after_seq`, with `up_to_seq` set to the first page's `up_to_seq` so that every "
    "page reads the same state. A state of up to `limit` content events comes whole.",
    response_model=StateAnswer,
)
async def get_state(
    served: Served,
    up_to_seq: Annotated[
        int | None, Query(ge=-1, description="the state as it stood after this seq")
    ] = None,
    after_seq: Annotated[
        int | None, Query(ge=-1, description="the page after this content seq")
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_PAGE, description="content events in this page at most")
    ] = STATE_PAGE,
    min_seq: MinSeq = None,
) -> Response:
    state = await served.state(min_seq)
    seq = state.last_seq
    if up_to_seq is not None and seq is not None and up_to_seq < seq:
        seq = up_to_seq

    def build() -> StateAnswer:
        memory = state.memory.at(up_to_seq)
        found = select_state(memory, after_seq=after_seq, limit=limit)
        return StateAnswer.model_construct(
            seq=seq,
            up_to_seq=memory.last_seq,
            visible_messages=found.visible_messages,
            visible_documents=found.visible_documents,
            deleted=[DeletedItem.model_construct(id=k, tombstone=v) for k, v in found.deleted],
            recall_stats=[
                RecallStat.model_construct(
                    id=k, num_recalled=v.num_recalled, last_recalled_at=v.last_recalled_at
                )
                for k, v in found.recall_stats
            ],
            next_after_seq=found.next_after_seq,
        )

    return await json_answer(served.daemon.heavy, build, seq)


@router.get("/logs/{log}/search", summary="keyword search of visible memory")
async def search_memory(
    served: Served,
    response: Response,
    q: Annotated[str, Query(max_length=10_000, description="the query words")],
    limit: Annotated[int, Query(ge=0, le=MAX_PAGE)] = 5,
    up_to_seq: Annotated[int | None, Query(ge=-1)] = None,
    min_seq: MinSeq = None,
) -> SearchAnswer:
    state = await served.state(min_seq)
    seq = stamp_seq(response, state.last_seq)
    memory = state.memory
    if up_to_seq is not None:
        memory = memory.at(up_to_seq)
        if seq is not None and up_to_seq < seq:
            seq = up_to_seq
            response.headers[SEQ_HEADER] = seq_text(seq)
    items = search(memory, q, limit=limit)
    return SearchAnswer.model_construct(seq=seq, query=q, items=items)


@router.post(
    "/logs/{log}/recall",
    summary="search, and append a Recall naming exactly what was returned",
    description="With access control on, the Recall's actor is the token's agent: an "
    "`actor` naming anyone else is a 403.",
)
async def recall(
    served: Served,
    body: StrictBody[RecallRequest],
    response: Response,
    request: Request,
) -> RecallAnswer:
    handle = served.handle
    try:
        actor = acting_agent(request.scope, body.actor, handle.name)
    except ScopeRefused as exc:
        raise ApiError(403, str(exc), detail={"missing": exc.what, "message": str(exc)}) from None
    state = handle.current()  # 503 while hydrating
    memory = handle.memory
    if memory is None:
        raise ApiError(503, handle.not_ready_message())
    signer = _recall_signer(served.daemon, state, actor, handle.name)
    health = handle.health()
    if health.status == "unavailable":  # the append could only wait, then fail
        raise ApiError(503, f"recall: not appended: {health.cause}")
    try:
        stored, items = await asyncio.to_thread(
            memory.recall,
            body.query,
            limit=body.limit,
            session_id=body.session_id,
            source=body.source,
            actor=actor,
            agent_key=signer,
        )
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    except MemstreamError as exc:
        raise ApiError(503, f"recall on log {handle.name!r} failed: {exc}") from None
    try:  # so that reads right after this answer see the Recall (bounded wait)
        await handle.at_least(stored.seq, served.daemon.settings.min_seq_timeout)
    except MemstreamError:
        pass
    response.headers[SEQ_HEADER] = seq_text(stored.seq)
    return RecallAnswer.model_construct(seq=stored.seq, recall=stored, items=items)


def _recall_signer(
    daemon: DaemonContext, state: LogState, actor: str | None, log_name: str
) -> NoteSigner | None:
    """The key a Recall over HTTP is signed with: on a signed log, the token's agent's own
    key from the daemon's keyring (`--agent-keys`); None on a log without signatures.

    A 403 naming what is missing when queryd cannot sign as that agent: access control
    off (then anyone could name any actor, and a signature would prove nothing), no
    keyring, or no key of that agent in it. Nothing is appended then."""
    if state.authorship is None:
        return None
    where = f"recall on log {log_name!r}: this log requires signatures, and queryd signs a Recall"
    if daemon.access is None or actor is None:
        message = (
            f"{where} only as the agent of a bearer token; access control is off "
            "(start queryd with --tokens PATH and --agent-keys DIR)"
        )
        raise ApiError(403, message, detail={"missing": "token", "message": message})
    keyring = daemon.keyring
    try:
        signer = None if keyring is None else keyring.signer(actor)
    except SigningKeyError as exc:
        log.error("recall on log %r: agent %r: %s", log_name, actor, exc)
        raise ApiError(
            503, f"{where} as agent {actor!r}, whose key file queryd cannot use (see its log)"
        ) from None
    if signer is None:
        held = "holds no agent keys" if keyring is None else f"holds no key of agent {actor!r}"
        message = (
            f"{where} as the token's agent with that agent's own key; queryd {held} "
            "(its --agent-keys directory needs AGENT.key, as `memstream agents create` "
            "writes it)"
        )
        raise ApiError(403, message, detail={"missing": "agent_key", "message": message})
    return signer


add_paged_list(
    router,
    PagedList(
        path="/logs/{log}/rejections",
        name="rejections",
        summary="records the fold refused",
        rows=lambda state: list(state.rejections),
        out=lambda r: RejectionOut(seq=r.seq, reason=r.reason, error=r.error),
        answer=RejectionsAnswer,
        field="rejections",
    ),
)
