"""Large answers serialized in chunks, so that a worker thread lets the event loop run.

pydantic serializes a whole model in one call that holds the GIL throughout (tens of ms
for a page of 10,000 events): a worker thread doing it would still stop the event loop
for that long. `dump_chunked` writes the same JSON (the fields in order, by alias, as
FastAPI would) but serializes long lists `CHUNK` items at a time, so other threads,
the event loop's included, get the GIL between chunks.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pydantic import BaseModel, TypeAdapter

__all__ = ["CHUNK", "dump_chunked"]

CHUNK = 200


@cache
def _fields(model: type[BaseModel]) -> tuple[tuple[str, bytes, TypeAdapter[Any]], ...]:
    out = []
    for name, info in model.model_fields.items():
        key = info.serialization_alias or info.alias or name
        annotation = Any if info.annotation is None else info.annotation
        out.append((name, json.dumps(key).encode(), TypeAdapter(annotation)))
    return tuple(out)


def dump_chunked(answer: BaseModel, chunk: int = CHUNK) -> bytes:
    """`answer` as JSON bytes, long list fields serialized `chunk` items at a time."""
    parts: list[bytes] = []
    for name, key, adapter in _fields(type(answer)):
        value = getattr(answer, name)
        if isinstance(value, list) and len(value) > chunk:
            pieces = [
                adapter.dump_json(value[i : i + chunk], by_alias=True)[1:-1]
                for i in range(0, len(value), chunk)
            ]
            body = b"[" + b",".join(pieces) + b"]"
        else:
            body = adapter.dump_json(value, by_alias=True)
        parts.append(key + b":" + body)
    return b"{" + b",".join(parts) + b"}"
