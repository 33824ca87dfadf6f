"""Answers too large to build on the event loop, built in a small pool of threads.

A page of thousands of events takes tens of ms to build and serialize: `HeavyPool` runs
that in at most `heavy_workers` threads, and `json_answer` serializes in chunks
(`dump_chunked`), so the event loop gets the GIL between them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from fastapi import Response
from pydantic import BaseModel

from queryd.daemon.errors import ApiError
from queryd.daemon.jsonbody import dump_chunked
from queryd.daemon.seq import SEQ_HEADER, seq_text
from schemas.errors import MemstreamError

__all__ = ["HeavyPool", "json_answer"]

T = TypeVar("T")


class HeavyPool:
    """At most `workers` threads, made on first use (on the event loop only)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None

    async def run(self, call: Callable[[], T]) -> T:
        """`call`'s result, computed in the pool."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="memstream-heavy")
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    def shutdown(self) -> None:
        """Let the threads go (not waiting for them); a later `run` makes new ones."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)


async def json_answer(pool: HeavyPool, build: Callable[[], BaseModel], seq: int | None) -> Response:
    """The answer `build` makes, built and serialized in `pool`; what the query refuses of
    the client's input is a 422."""

    def dump() -> bytes:
        return dump_chunked(build())

    try:
        body = await pool.run(dump)
    except (ValueError, TypeError, MemstreamError) as exc:
        raise ApiError(422, str(exc) or type(exc).__name__) from None
    return Response(body, media_type="application/json", headers={SEQ_HEADER: seq_text(seq)})
