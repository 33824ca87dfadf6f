"""Copy a log written without encryption into a new encrypted log (`memstream reencrypt`).

A log written before encryption keeps its content readable in its stored bytes forever:
its records cannot change (the log is append-only, and the Merkle tree covers them). The
way to make such content erasable is a new log: every record of the old one is appended,
in order, to a new encrypted log, where content is sealed under its subject's key. Events
keep their ids, timestamps and fields; graph envelopes are copied as they are. Records the
old log's fold refused are skipped (they have no effect), so seqs are kept exactly when the
old log has none (the embedded log never has).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from os import PathLike

from producers.logs import open_log
from schemas.audit import BaseEvent
from schemas.codec import decode_record
from schemas.errors import EncryptionError
from schemas.records import Record

__all__ = ["reencrypt"]

log = logging.getLogger("memstream.producers.reencrypt")

_BATCH = 1000


def reencrypt(
    source: str | PathLike[str],
    target: str | PathLike[str],
    *,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Copy every record the fold of `source` accepted into a new encrypted log at `target`
    (an embedded path or a kafka:// location, which must not hold records); the number
    copied.

    `EncryptionError` when `source` is encrypted already or `target` holds records;
    `LogNotFoundError` when `source` does not exist.
    """
    src = open_log(source, create=False)
    try:
        if getattr(src, "keys", None) is not None:
            raise EncryptionError(f"reencrypt: log {source} is encrypted already")
        state = src.state()
        if state.authorship is not None:
            raise EncryptionError(
                f"reencrypt: log {source} requires signatures: a re-encrypted copy changes "
                "the bytes its writers signed, and their keys are theirs, so the copy's "
                "signatures would not verify; a log meant to be signed and erasable is "
                "created so (Memory(..., signed=True, encrypt=True)). Nothing was written"
            )
        rejected = {r.seq for r in state.rejections}
        last = state.last_seq
        dst = open_log(target, create=True)
        try:
            held = dst.state().next_seq
            if held:
                raise EncryptionError(
                    f"reencrypt: target {target} holds {held} records; it must be a new log"
                )
            dst.enable_encryption()  # type: ignore[attr-defined]
            batch: list[Record] = []
            copied = 0
            if last is not None:
                for seq, data in src.records(0, timeout=0):
                    if seq not in rejected:
                        record = decode_record(data)
                        if isinstance(record, BaseEvent):
                            record = record.model_copy(update={"seq": None})
                        batch.append(record)
                    if len(batch) >= _BATCH or seq >= last:
                        dst.append(batch)
                        copied += len(batch)
                        batch = []
                        if progress is not None:
                            progress(copied)
                    if seq >= last:
                        break
            return copied
        finally:
            dst.close()
    finally:
        src.close()
