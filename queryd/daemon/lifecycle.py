"""Server-sent events of a log's lifecycle stream: the frame of one event.

The daemon serves its streams from one shared reader per log (`queryd.daemon.streams`).
`lifecycle_stream`, one reader per stream (a fold of the whole embedded log each), is the
former way, no longer used by the daemon: it is kept only until this module's other
pending change is merged, then goes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import Any

from producers.logs.base import LifecycleRecord
from producers.memory import Memory

__all__ = ["lifecycle_stream", "sse_frame"]

log = logging.getLogger("memstream.queryd.lifecycle")

_END = object()


_LINE_BREAKS = str.maketrans({"\r": "\\r", "\n": "\\n", "\0": "\\0"})


def sse_frame(record: LifecycleRecord) -> str:
    """One SSE frame: ``id`` (the offset), ``event`` (the lifecycle type), ``data`` (JSON).

    Field lines never carry a line break from the data (it would end the field and forge
    others, or whole events): CR, LF and NUL in the type are escaped as ``\\r``, ``\\n``
    and ``\\0``; the id is an integer, the data JSON (which escapes them itself)."""
    data = {"offset": record.offset, "seq": record.seq, "envelope": record.envelope.to_json_dict()}
    text = json.dumps(data, separators=(",", ":"), default=str)
    event = record.envelope.type.translate(_LINE_BREAKS)
    return f"id: {int(record.offset)}\nevent: {event}\ndata: {text}\n\n"


async def lifecycle_stream(
    memory: Memory,
    from_offset: int,
    *,
    limit: int | None = None,
    keepalive: float = 15.0,
    queue_size: int = 1000,
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=queue_size)
    stop = threading.Event()

    def put(item: Any) -> bool:
        """Hand one item to the loop, waiting while the queue is full; False once stopped."""
        try:
            future = asyncio.run_coroutine_threadsafe(queue.put(item), loop)
        except RuntimeError:  # the loop is closed
            return False
        while True:
            try:
                future.result(timeout=0.5)
                return True
            except concurrent.futures.TimeoutError:
                if stop.is_set():
                    future.cancel()
                    return False

    def pump() -> None:
        try:
            for record in memory.lifecycle(from_offset, stop=stop):
                if stop.is_set() or not put(record):
                    return
        except Exception as exc:
            log.warning("lifecycle stream from offset %d failed", from_offset, exc_info=True)
            put(exc)
        finally:
            if not stop.is_set():
                put(_END)

    thread = threading.Thread(target=pump, name="memstream-queryd-sse", daemon=True)
    thread.start()
    sent = 0
    try:
        yield "retry: 1000\n\n"
        while limit is None or sent < limit:
            try:
                item = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if item is _END:
                return
            if isinstance(item, Exception):
                message = json.dumps({"message": f"{type(item).__name__}: {item}"})
                yield f"event: error\ndata: {message}\n\n"
                return
            yield sse_frame(item)
            sent += 1
    finally:
        stop.set()
