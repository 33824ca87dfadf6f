"""Snapshots of a folded log in Redis: append-only chunks plus one position key.

The audit state is essentially the log's content, so a snapshot is incremental: each
write adds ONE chunk holding the records folded since the previous one, and rewrites the
position key, both in one MULTI/EXEC (invariant 10: state and position are one). A chunk
is a pickle of compact tuples, one entry per seq:

- ``(seq, kind, fields...)`` for an audit event the fold accepted (kind 0..3), restored
  without validation (trusted data the fold already checked);
- ``(seq, -1, bytes)`` for any other record (graph envelopes, refused records), restored
  by folding its bytes with the same `fold_record`, so the graphs and the rejections come
  back exactly.

Keys (prefix ``memstream:LOG:``): ``pos`` = JSON ``{"epoch", "chunks", "last_seq"}``;
``EPOCH:chunk:I`` = the I-th chunk of that epoch. A rebuild (Redis was flushed, or the
projector starts over) uses a new epoch, so a reader never mixes chunks of two builds. A
reader that finds a chunk missing treats the snapshot as absent and folds the log.
"""

from __future__ import annotations

import json
import logging
import pickle
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import redis

from producers.logs.location import KafkaLocation
from projector.audit import fold
from projector.log_state import Lifecycle, LogState, empty_state, fold_record
from schemas.audit import BaseEvent, Deletion, Document, Message, Recall
from schemas.graph._fast import construct

__all__ = [
    "SnapshotStore",
    "Position",
    "Entry",
    "entry_of",
    "restore",
    "encode_chunk",
    "decode_chunk",
]

log = logging.getLogger("memstream.projector.snapshot")

Entry = tuple[Any, ...]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RAW = -1
_MESSAGE, _DOCUMENT, _RECALL, _DELETION = 0, 1, 2, 3


def _us(value: datetime | None) -> int | None:
    if value is None:
        return None
    return (value - _EPOCH) // timedelta(microseconds=1)


def _dt(us: int | None) -> datetime | None:
    return None if us is None else _EPOCH + timedelta(microseconds=us)


def entry_of(seq: int, data: bytes, lifecycle: Sequence[Lifecycle]) -> Entry:
    """The snapshot entry of the record at `seq`, given what its fold emitted."""
    if lifecycle and lifecycle[0].namespace == "audit":
        e = lifecycle[0].subject
        head = (seq, e.id.bytes, _us(e.timestamp), e.session_id, e.source, e.actor)
        if isinstance(e, Message):
            return (*head[:1], _MESSAGE, *head[1:], e.speaker, e.content, _us(e.retain_until))
        if isinstance(e, Document):
            return (*head[:1], _DOCUMENT, *head[1:], e.name, e.text, e.media_type, e.sha256,
                    _us(e.retain_until))  # fmt: skip
        if isinstance(e, Recall):
            return (*head[:1], _RECALL, *head[1:], e.query, tuple(r.bytes for r in e.recalled))
        if isinstance(e, Deletion):
            return (*head[:1], _DELETION, *head[1:], tuple(t.bytes for t in e.targets),
                    e.reason, e.requested_by)  # fmt: skip
    return (seq, _RAW, bytes(data))


def _event(entry: Entry) -> BaseEvent:
    seq, kind, idb, ts, session_id, source, actor = entry[:7]
    base = {
        "id": UUID(bytes=idb),
        "timestamp": _dt(ts),
        "seq": seq,
        "session_id": session_id,
        "source": source,
        "actor": actor,
    }
    rest = entry[7:]
    if kind == _MESSAGE:
        speaker, content, retain = rest
        return construct(Message, {**base, "kind": "message", "speaker": speaker,
                                   "content": content, "retain_until": _dt(retain)})  # fmt: skip
    if kind == _DOCUMENT:
        name, text, media_type, sha256, retain = rest
        return construct(Document, {**base, "kind": "document", "name": name, "text": text,
                                    "media_type": media_type, "sha256": sha256,
                                    "retain_until": _dt(retain)})  # fmt: skip
    if kind == _RECALL:
        query, recalled = rest
        return construct(Recall, {**base, "kind": "recall", "query": query,
                                  "recalled": tuple(UUID(bytes=b) for b in recalled)})  # fmt: skip
    targets, reason, requested_by = rest
    return construct(Deletion, {**base, "kind": "deletion",
                                "targets": tuple(UUID(bytes=b) for b in targets),
                                "reason": reason, "requested_by": requested_by})  # fmt: skip


def restore(state: LogState, entries: Iterable[Entry], up_to_seq: int | None = None) -> LogState:
    """Fold snapshot entries onto `state` (entries must continue it, one per seq)."""
    memory = state.memory
    last = state.last_seq
    for entry in entries:
        seq = entry[0]
        if up_to_seq is not None and seq > up_to_seq:
            break
        if entry[1] == _RAW:
            state = state.with_(memory=memory, last_seq=last)
            state = fold_record(state, seq, entry[2]).state
            memory = state.memory
        else:
            memory = fold(memory, _event(entry))  # type: ignore[arg-type]
        last = seq
    return state.with_(memory=memory, last_seq=last)


def encode_chunk(first_seq: int, entries: Sequence[Entry]) -> bytes:
    return pickle.dumps((1, first_seq, list(entries)), protocol=pickle.HIGHEST_PROTOCOL)


def decode_chunk(data: bytes) -> tuple[int, list[Entry]]:
    version, first_seq, entries = pickle.loads(data)  # noqa: S301 - our own Redis keys
    if version != 1:
        raise ValueError(f"snapshot chunk format {version} is not readable here")
    return first_seq, entries


@dataclass(frozen=True)
class Position:
    epoch: str
    chunks: int
    last_seq: int | None

    def dumps(self) -> str:
        return json.dumps({"epoch": self.epoch, "chunks": self.chunks, "last_seq": self.last_seq})

    @classmethod
    def loads(cls, raw: bytes | str | None) -> Position | None:
        if raw is None:
            return None
        data = json.loads(raw)
        return cls(data["epoch"], int(data["chunks"]), data["last_seq"])


class SnapshotLost(Exception):
    """The position key is not the one this writer last wrote (Redis flushed, or another
    writer): the writer must rebuild."""


class SnapshotStore:
    """Reads and writes one log's snapshots in Redis."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        self.pos_key = f"{prefix}pos"
        self.lock_key = f"{prefix}projector"
        self.position: Position | None = None  # what this writer last wrote

    @classmethod
    def connect(cls, location: KafkaLocation) -> SnapshotStore:
        client = redis.Redis.from_url(
            location.redis_url, socket_timeout=30, socket_connect_timeout=5
        )
        return cls(client, location.key_prefix)

    def chunk_key(self, epoch: str, index: int) -> str:
        return f"{self.prefix}{epoch}:chunk:{index}"

    # --- reading ----------------------------------------------------------------------------

    def read_position(self) -> Position | None:
        return Position.loads(self.redis.get(self.pos_key))

    def load(self, up_to_seq: int | None = None) -> LogState | None:
        """The snapshot's state (at or before `up_to_seq` when given); None if absent."""
        pos = self.read_position()
        if pos is None or pos.chunks == 0:
            return None
        keys = [self.chunk_key(pos.epoch, i) for i in range(pos.chunks)]
        state = empty_state()
        for start in range(0, len(keys), 256):
            raws = self.redis.mget(keys[start : start + 256])
            for raw in raws:
                if raw is None:
                    log.warning("%s: a snapshot chunk is missing; ignoring the snapshot",
                                self.prefix)  # fmt: skip
                    return None
                first, entries = decode_chunk(raw)
                if first != state.next_seq:
                    log.warning("%s: snapshot chunks do not follow each other (%d after %s)",
                                self.prefix, first, state.last_seq)  # fmt: skip
                    return None
                if up_to_seq is not None and first > up_to_seq:
                    return state
                state = restore(state, entries, up_to_seq)
                if up_to_seq is not None and state.last_seq is not None:
                    if state.last_seq >= up_to_seq:
                        return state
        return state

    # --- writing (the projector) ------------------------------------------------------------

    def start_epoch(self) -> Position:
        """A new, empty snapshot generation (written with the first chunk)."""
        self.position = Position(uuid.uuid4().hex[:12], 0, None)
        return self.position

    def adopt(self) -> Position | None:
        """Continue the snapshot in Redis (after `load`), as its writer."""
        self.position = self.read_position()
        return self.position

    def write(self, first_seq: int, entries: Sequence[Entry]) -> Position:
        """Add one chunk and move the position, atomically. SnapshotLost if the position
        in Redis is not the one this writer last wrote."""
        mine = self.position
        if mine is None:
            raise SnapshotLost("no epoch started")
        last_seq = entries[-1][0]
        new = Position(mine.epoch, mine.chunks + 1, last_seq)
        data = encode_chunk(first_seq, entries)
        with self.redis.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(self.pos_key)
                current = Position.loads(pipe.get(self.pos_key))
                if mine.chunks > 0 and current != mine:
                    raise SnapshotLost(f"position is {current}, expected {mine}")
                if mine.chunks == 0 and current is not None and current.epoch != mine.epoch:
                    # A fresh epoch replaces whatever was there (the writer rebuilds).
                    pass
                pipe.multi()
                pipe.set(self.chunk_key(mine.epoch, mine.chunks), data)
                pipe.set(self.pos_key, new.dumps())
                pipe.execute()
            except redis.WatchError:
                raise SnapshotLost("the position changed while writing") from None
        if mine.chunks == 0 and current is not None and current.epoch != mine.epoch:
            self._drop_epoch(current)
        self.position = new
        return new

    def _drop_epoch(self, old: Position) -> None:
        keys = [self.chunk_key(old.epoch, i) for i in range(old.chunks)]
        for start in range(0, len(keys), 1000):
            self.redis.delete(*keys[start : start + 1000])

    def acquire(self, owner: str, ttl_ms: int) -> bool:
        """Take (or renew) the one-projector-per-log lease."""
        if self.redis.set(self.lock_key, owner, nx=True, px=ttl_ms):
            return True
        held = self.redis.get(self.lock_key)
        if held is not None and held.decode() == owner:
            self.redis.pexpire(self.lock_key, ttl_ms)
            return True
        return False

    def release(self, owner: str) -> None:
        held = self.redis.get(self.lock_key)
        if held is not None and held.decode() == owner:
            self.redis.delete(self.lock_key)
