"""The seq an answer reflects, as the ``X-Memstream-Seq`` header carries it.

Every answer says which position in the log it reflects: in its body (`seq`) and in this
header (``none`` for a log with no record yet), errors that know it included.
"""

from __future__ import annotations

from fastapi import Response

__all__ = ["SEQ_HEADER", "seq_text", "stamp_seq"]

SEQ_HEADER = "X-Memstream-Seq"


def seq_text(seq: int | None) -> str:
    """The header's value for `seq`."""
    return "none" if seq is None else str(seq)


def stamp_seq(response: Response, seq: int | None) -> int | None:
    """Put `seq` in `response`'s header; return it, for the body."""
    response.headers[SEQ_HEADER] = seq_text(seq)
    return seq
