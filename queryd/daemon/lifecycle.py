"""Server-sent events of a log's lifecycle stream: the frame of one event.

The daemon serves its streams from one shared reader per log (`queryd.daemon.streams`),
which formats each event's frame once, here.
"""

from __future__ import annotations

import json

from producers.logs.base import LifecycleRecord

__all__ = ["sse_frame"]

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
