"""Server-sent events of a log's lifecycle stream: the frame of one event.

The daemon serves its streams from one shared reader per log (`queryd.daemon.streams`),
which formats each event's frame once, here.
"""

from __future__ import annotations

import json
import re

from producers.logs.base import LifecycleRecord

__all__ = ["frame_seq", "sse_frame"]

# The start of a frame's data line, as `sse_frame` writes it: offset, then seq.
_SEQ_AT = re.compile(r'\ndata: \{"offset":-?\d+,"seq":(-?\d+)[,}]')
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


def frame_seq(frame: str) -> int:
    """The seq of the log record that caused the event of a frame `sse_frame` wrote."""
    found = _SEQ_AT.search(frame)
    if found is None:  # not a frame of sse_frame's: a bug, not input
        raise ValueError("frame_seq: not a lifecycle frame")
    return int(found.group(1))
