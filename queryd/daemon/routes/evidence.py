"""The evidence routes (issue 14): a log's latest signed checkpoint, an inclusion proof of
one record and a consistency proof between two tree sizes, as the JSON of
`schemas.evidence.proof` (the same for the embedded log and Kafka). Nothing is verified
here: a client checks what it gets with the log's public key (`memstream keys show`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query

from queryd.daemon.dependencies import Served
from queryd.daemon.errors import ERROR_RESPONSES, ApiError
from queryd.daemon.models import ErrorBody
from schemas.errors import MemstreamError
from schemas.evidence.proof import EvidenceMismatchError, NoCheckpointError, ProofRangeError

__all__ = ["router"]

T = TypeVar("T")

router = APIRouter(
    tags=["evidence"],
    responses={
        **ERROR_RESPONSES,
        409: {"model": ErrorBody, "description": "the log disagrees with its checkpoint"},
    },
)


async def _ask(served: Served, call: Callable[[Any], T]) -> T:
    """`call(memory)` off the event loop; the evidence errors as answers naming the cause."""
    memory = served.handle.memory
    if memory is None:
        raise ApiError(503, f"log {served.handle.name!r} is not open yet")
    try:
        return await asyncio.to_thread(call, memory)
    except (ProofRangeError, NoCheckpointError) as exc:
        raise ApiError(404, str(exc)) from None
    except EvidenceMismatchError as exc:
        raise ApiError(409, str(exc)) from None
    except MemstreamError as exc:
        raise ApiError(503, str(exc)) from None


@router.get(
    "/logs/{log}/checkpoint",
    summary="the log's latest signed checkpoint (a C2SP signed note)",
)
async def latest_checkpoint(served: Served) -> dict[str, Any]:
    note: str = await _ask(served, lambda memory: memory.latest_checkpoint())
    body = note.split("\n")
    return {"checkpoint": note, "origin": body[0], "tree_size": int(body[1])}


@router.get(
    "/logs/{log}/proofs/inclusion",
    summary="an inclusion proof of the record of a seq against a signed checkpoint",
)
async def inclusion_proof(
    served: Served,
    seq: Annotated[int, Query(ge=0, description="the record's seq (its leaf index)")],
    size: Annotated[
        int | None, Query(ge=0, description="against the checkpoint of this tree size")
    ] = None,
) -> dict[str, Any]:
    return await _ask(served, lambda memory: memory.prove(seq, size=size).to_json())


@router.get(
    "/logs/{log}/proofs/consistency",
    summary="a consistency proof: the first old_size records are a prefix of a checkpoint",
)
async def consistency_proof(
    served: Served,
    old_size: Annotated[int, Query(ge=0, description="the older tree's size")],
    new_size: Annotated[
        int | None, Query(ge=0, description="the checkpoint's size (default: the latest)")
    ] = None,
) -> dict[str, Any]:
    return await _ask(served, lambda memory: memory.consistency(old_size, new_size).to_json())
