"""The path and query parameters that many routes share, with their bounds."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from queryd.daemon.settings import MAX_PAGE

__all__ = ["ItemId", "Limit", "LogName", "MinSeq", "Offset"]

MinSeq = Annotated[
    int | None,
    Query(
        ge=0,
        description="answer only once the state reflects at least this seq; wait for it up "
        "to the daemon's --min-seq-timeout, then 504",
    ),
]
Limit = Annotated[int | None, Query(ge=0, le=MAX_PAGE, description="at most this many")]
Offset = Annotated[int, Query(ge=0, le=2**53, description="skip this many first")]
LogName = Annotated[str, Path(description="the log's name (directory name or Kafka topic)")]
ItemId = Annotated[str, Path(description="a memory item id")]
