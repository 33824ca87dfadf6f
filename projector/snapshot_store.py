"""Snapshots of a folded log in Redis: append-only chunks plus one position key.

The audit state is essentially the log's content, so a snapshot is incremental: each
write adds ONE chunk holding the records folded since the previous one, and rewrites the
position key, both in one MULTI/EXEC: state and position are one.

A chunk is stored in the shape the reader merges it in, so hydrating is bulk list and
dict operations, with no validation, no re-tokenizing and no event models built:

- the accepted audit events as compact rows (`projector.audit.rows`), with the positions
  of the messages, documents and other events among them;
- the word index's fragment for those rows: ``seq -> words`` and ``word -> [seq]``;
- ``extras``, the other records in seq order: ``(seq, -2, reason, error)`` for a refused
  record (restored as its `Rejection`), ``(seq, -1, bytes)`` for an accepted graph
  envelope (restored by folding its bytes with the same `fold_record`: the graph fold
  does not read the audit state, so envelopes refold alone);
- now and then a graph checkpoint ``(seq, graph, intents, tasks, graph_seq)``: the three
  graphs as of that seq, so a reader refolds only the envelopes after the last one.

Chunks are stored in `projector.snapshot_format`: data only (never pickle: anyone who can
write a key would run code in every reader), checked before anything is built from it.

Small chunks are merged in the background (`compact`): four adjacent chunks of similar
size become one, so each record is rewritten a few times at most and a long-running
projector leaves a few dozen chunks, not thousands. A merge swaps the chunk list in the
position key under WATCH/MULTI like a write; the replaced chunks expire a minute later,
so a reader that read the old position still finds them.

Keys (prefix ``memstream:LOG:``): ``pos`` = JSON ``{"v", "epoch", "chunks", "last_seq",
"topic_id", "lifecycle"}`` with ``chunks`` the ``[first_seq, last_seq]`` of each chunk in
order; ``EPOCH:chunk:F-L`` = the chunk of seqs F..L. A rebuild (Redis was flushed, or the
projector starts over) uses a new epoch, so a reader never mixes chunks of two builds. A
reader that finds a chunk missing, or a position or chunk of another format, treats the
snapshot as absent and folds the log.

A snapshot belongs to one log: ``topic_id`` is the id of the Kafka topic it was folded from
(a topic deleted and created again under the same name has a new id), and a reader given
the log's identity (`LogIdentity`: topic id and partition end) refuses a snapshot of another
topic id, or one whose ``last_seq`` is at or past the partition's end, as absent.
``lifecycle`` is ``[count, offset]``: how many lifecycle events the records up to
``last_seq`` caused (the next event's lifecycle offset), and a lifecycle-topic offset from
which every later event's record lies; the projector resumes its dedup from there.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

import redis
from pyrsistent import pvector

from producers.logs.location import KafkaLocation, redact
from producers.logs.topic_identity import LogIdentity, log_identity
from projector.audit.index import WordFragment, WordIndex
from projector.audit.rows import DOCUMENT, FIELDS, MESSAGE, SEQ, Row, event_of, row_of
from projector.audit.state import Ledger, MemoryState, no_gc
from projector.authorship import Authorship, authorize
from projector.lifecycle import Lifecycle
from projector.record_fold import LogState, Rejection, empty_state, fold_record
from projector.snapshot_format import (
    FORMAT,
    MAX_CHUNK_BYTES,
    RAW,
    REJECTED,
    SnapshotFormatError,
    decode,
    encode,
    encode_checkpoint,
)
from schemas.audit import BaseEvent, Erasure
from schemas.codec import MAX_JSON_DEPTH, decode_record, encode_record
from schemas.errors import LogUnavailableError, MemstreamError
from schemas.signing import SIGNED_MAGIC, split_signed

__all__ = [
    "SnapshotStore",
    "SnapshotLost",
    "LeaseLost",
    "RedisAccessError",
    "redis_refused",
    "LogIdentity",
    "Position",
    "Entry",
    "Chunk",
    "entry_of",
    "encode_chunk",
    "decode_chunk",
    "merge_chunks",
]

log = logging.getLogger("memstream.projector.snapshot")

Entry = tuple[Any, ...]
_RAW = RAW
_REJECTED = REJECTED
# Of the position key and the chunks: a reader ignores (and the projector rebuilds) a
# snapshot of another format, such as the pickled chunks of format 2.
_FORMAT = FORMAT
# Merge four adjacent chunks of one size class (sizes in powers of four), up to this many
# records in one chunk.
_MERGE_RUN = 4
_MERGE_MAX_RECORDS = 1 << 18
# ... and up to this many bytes (well below the format's bound on a chunk).
_MERGE_MAX_BYTES = MAX_CHUNK_BYTES // 2
# The first bytes of every Erasure's record (Avro single-object encoding: marker and the
# schema's fingerprint), to tell a kept Erasure from a graph envelope without decoding.
_ERASURE_PREFIX = encode_record(
    Erasure(
        subject="s",
        erased=(uuid.UUID(int=0),),
        leaf_hashes=("00" * 32,),
        reason="r",
    )
)[:10]


class _NotThisLog(Exception):
    """A snapshot position of another log (`SnapshotStore._belongs` said no)."""


def _in_thread(ask: Callable[[], bool], name: str) -> Future[bool]:
    """`ask()` answered by a thread of its own (its error, if it raises, re-raised by
    `result()`)."""
    answer: Future[bool] = Future()

    def run() -> None:
        try:
            answer.set_result(ask())
        except BaseException as exc:  # handed to whoever waits for the answer
            answer.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return answer


# Chunks replaced by a merge stay readable this long for readers mid-load.
_REPLACED_TTL_MS = 60_000


def entry_of(seq: int, data: bytes, lifecycle: Sequence[Lifecycle]) -> Entry:
    """The snapshot entry of the record at `seq`, given what its fold emitted. An accepted
    Erasure (an encrypted log's) is kept as its record's bytes, as an envelope is."""
    if lifecycle:
        first = lifecycle[0]
        if first.namespace == "audit" and type(first.subject) is Erasure:
            return (seq, _RAW, bytes(data))
        if first.namespace == "audit" and isinstance(first.subject, BaseEvent):
            return row_of(seq, first.subject)
        if first.type == "record.rejected" and first.extra is not None:
            return (seq, _REJECTED, first.extra["reason"], first.extra["error"])
    return (seq, _RAW, bytes(data))


@dataclass
class Chunk:
    """One chunk, decoded: see the module's docstring."""

    first: int
    last: int
    rows: Sequence[Row]
    message_rel: Sequence[int]
    document_rel: Sequence[int]
    other_rel: Sequence[int]
    # The content rows' words: compact as decoded (built when first read), or an index.
    words: WordFragment | WordIndex
    extras: list[Entry]
    checkpoint: tuple[Any, ...] | None = None
    # The rows' seqs (as decoded: the rows' own int objects); None: read from the rows.
    seqs: list[int] | None = None

    @property
    def words_of(self) -> dict[int, tuple[str, ...]]:
        return self.words.words_of

    @property
    def postings(self) -> dict[str, list[int]]:
        return self.words.postings

    def cut(self, up_to_seq: int) -> Chunk:
        """This chunk without the seqs after `up_to_seq`."""
        if up_to_seq >= self.last:
            return self
        seqs = self.seqs if self.seqs is not None else [r[SEQ] for r in self.rows]
        n = bisect_right(seqs, up_to_seq)

        def below(rel: Sequence[int]) -> Sequence[int]:
            return rel[: bisect_left(rel, n)]

        words: WordFragment | WordIndex
        if isinstance(self.words, WordFragment):
            words = self.words.cut(up_to_seq)
        else:
            postings = {}
            for word, posting in self.postings.items():
                kept = posting[: bisect_right(posting, up_to_seq)]
                if kept:
                    postings[word] = kept
            words = WordIndex.of(
                {s: w for s, w in self.words_of.items() if s <= up_to_seq}, postings
            )
        checkpoint = self.checkpoint
        if checkpoint is not None and checkpoint[0] > up_to_seq:
            checkpoint = None
        return Chunk(
            self.first,
            up_to_seq,
            self.rows[:n],
            below(self.message_rel),
            below(self.document_rel),
            below(self.other_rel),
            words,
            [e for e in self.extras if e[0] <= up_to_seq],
            checkpoint,
            seqs[:n],
        )


def _fragment(rows: list[Row], rel: list[int], index: WordIndex | None) -> WordIndex:
    """An index of the content rows at `rel`, from `index` where it has them."""
    out = WordIndex()
    for r in rel:
        row = rows[r]
        seq = row[SEQ]
        found = None if index is None else index.words_of.get(seq)
        if found is not None:
            out.add_words(seq, found)
        else:  # (speaker, content) of a message, (name, text) of a document
            out.add(seq, (row[FIELDS], row[FIELDS + 1]))
    return out


def build_chunk(
    entries: Sequence[Entry], index: WordIndex | None, checkpoint: tuple[Any, ...] | None = None
) -> Chunk:
    """A chunk of consecutive entries; `index` gives the words (tokenized when absent)."""
    rows: list[Row] = []
    rels: tuple[list[int], list[int], list[int]] = ([], [], [])
    extras: list[Entry] = []
    for entry in entries:
        kind = entry[1]
        if kind >= 0:
            rels[0 if kind == MESSAGE else 1 if kind == DOCUMENT else 2].append(len(rows))
            rows.append(entry)
        else:
            extras.append(entry)
    content = sorted(rels[0] + rels[1])
    words = _fragment(rows, content, index)
    return Chunk(
        entries[0][0],
        entries[-1][0],
        rows,
        rels[0],
        rels[1],
        rels[2],
        words,
        extras,
        checkpoint,
    )


def encode_chunk(chunk: Chunk) -> bytes:
    """The chunk's bytes (`projector.snapshot_format`). A checkpoint a reader would refuse
    (a graph holding a value of a type its model does not declare, which an unvalidated
    update can put there) is left out, and `chunk.checkpoint` set to None: readers then
    refold the envelopes instead. `SnapshotFormatError` if the chunk itself cannot be
    stored (over the format's bounds)."""
    checkpoint = None
    if chunk.checkpoint is not None:
        try:
            checkpoint = encode_checkpoint(*chunk.checkpoint)
        except SnapshotFormatError as exc:
            log.info("no graph checkpoint in chunk %d-%d: %s", chunk.first, chunk.last, exc)
            chunk.checkpoint = None
    return encode(chunk.first, chunk.last, chunk.rows, chunk.extras, chunk.words_of, checkpoint)


def decode_chunk(data: bytes) -> Chunk:
    """The chunk `data` holds, checked whole first; `SnapshotFormatError` names what is
    wrong when it is not a chunk of this format."""
    return Chunk(*decode(data))


def merge_chunks(chunks: Sequence[Chunk]) -> Chunk:
    """Adjacent chunks as one."""
    rows: list[Row] = []
    rels: tuple[list[int], list[int], list[int]] = ([], [], [])
    words_of: dict[int, tuple[str, ...]] = {}
    postings: dict[str, list[int]] = {}
    extras: list[Entry] = []
    checkpoint = None
    for chunk in chunks:
        offset = len(rows)
        rows.extend(chunk.rows)
        for out, rel in zip(
            rels, (chunk.message_rel, chunk.document_rel, chunk.other_rel), strict=True
        ):
            out.extend(map(offset.__add__, rel))
        words_of.update(chunk.words_of)
        for word, posting in chunk.postings.items():
            have = postings.get(word)
            if have is None:
                postings[word] = list(posting)
            else:
                have.extend(posting)
        extras.extend(chunk.extras)
        checkpoint = chunk.checkpoint or checkpoint
    return Chunk(
        chunks[0].first,
        chunks[-1].last,
        rows,
        rels[0],
        rels[1],
        rels[2],
        WordIndex.of(words_of, postings),
        extras,
        checkpoint,
    )


def _erasure_of(data: bytes) -> Erasure | None:
    """The Erasure a raw entry holds, signed or not (None: a graph envelope's bytes)."""
    if data[:2] == SIGNED_MAGIC:
        data = split_signed(data).inner
    if not data.startswith(_ERASURE_PREFIX):
        return None
    record = decode_record(data)
    return record if type(record) is Erasure else None


def _extend_with_erasures(ledger: Ledger, chunk: Chunk, erasures: dict[int, Erasure]) -> None:
    """Fold a chunk holding Erasures (rare): its events one by one, in seq order, so each
    Erasure redacts what precedes it as the fold did."""
    events: list[tuple[int, Any]] = [(row[SEQ], row) for row in chunk.rows]
    events += [(seq, erasure) for seq, erasure in erasures.items()]
    events.sort(key=lambda pair: pair[0])
    for seq, item in events:
        if isinstance(item, Erasure):
            ledger.append(item.with_seq(seq))  # type: ignore[arg-type]
        else:
            ledger.append(event_of(item), chunk.words_of.get(seq))


def hydrate(chunks: Sequence[Chunk]) -> LogState:
    """The state the chunks (consecutive, from seq 0) hold."""
    ledger = Ledger()
    rejections: list[Rejection] = []
    # The graph side: from the last checkpoint, then its later envelopes refolded.
    graph = empty_state()
    # A signed log's enrolment state, from its envelopes (every one is kept raw).
    auth: Authorship | None = None
    since = -1
    for chunk in reversed(chunks):
        if chunk.checkpoint is not None:
            seq, g, intents, tasks, graph_seq = chunk.checkpoint
            graph = graph.with_(
                graph=g, intents=intents, tasks=tasks, last_seq=seq, graph_seq=graph_seq
            )
            since = seq
            break
    for chunk in chunks:
        erasures = {
            e[0]: erasure
            for e in chunk.extras
            if e[1] == _RAW and (erasure := _erasure_of(e[2])) is not None
        }
        if erasures:
            _extend_with_erasures(ledger, chunk, erasures)
        else:
            ledger.extend_rows(
                chunk.rows,
                chunk.message_rel,
                chunk.document_rel,
                chunk.other_rel,
                chunk.words,
                chunk.seqs,
            )
        for entry in chunk.extras:
            seq = entry[0]
            if entry[1] == _REJECTED:
                rejections.append(Rejection(seq, entry[2], entry[3]))
            elif seq in erasures:
                continue
            elif seq > since:
                # erasable: a raw entry is a record the fold accepted, the graph half of an
                # erasure receipt included (accepted only on a log that encrypts).
                graph = fold_record(
                    graph.with_(authorship=auth), seq, entry[2], erasable=True
                ).state
                auth = graph.authorship
                if graph.rejections:  # the fold is deterministic: this does not happen
                    rejections.extend(graph.rejections)
                    graph = graph.with_(rejections=pvector())
            else:
                # Under the graph checkpoint: only its part in who may sign (enrolments,
                # revocations, envelope ids), as the fold decided it.
                auth = _authorship_of(auth, seq, entry[2])
    return LogState(
        memory=MemoryState(ledger),
        graph=graph.graph,
        intents=graph.intents,
        tasks=graph.tasks,
        rejections=pvector(rejections),
        last_seq=chunks[-1].last if chunks else None,
        graph_seq=graph.graph_seq,
        authorship=auth,
    )


def _authorship_of(auth: Authorship | None, seq: int, data: bytes) -> Authorship | None:
    """The enrolment state after the envelope at `seq`, which the fold accepted."""
    if auth is None and data[:2] != SIGNED_MAGIC:
        return None  # an unsigned log: nothing to track
    try:
        signed = split_signed(data) if data[:2] == SIGNED_MAGIC else None
        record = decode_record(data, max_depth=MAX_JSON_DEPTH)
        return authorize(auth, seq, record, None if signed is None else signed.signer, {})
    except MemstreamError as exc:  # the projector folded it: a snapshot that lies
        log.warning("snapshot: seq %d: its authorship does not fold: %s", seq, exc)
        return auth


# A position key is a small JSON object; bytes read back from Redis are bounded and checked.
_MAX_POSITION_BYTES = 1 << 20
_EPOCH_CHARS = frozenset("0123456789abcdef")


def _is_int(value: object) -> bool:
    return type(value) is int and value >= 0


@dataclass(frozen=True)
class Position:
    epoch: str
    chunks: tuple[tuple[int, int], ...]
    last_seq: int | None
    # The id of the topic the snapshot was folded from (None: written without one, which a
    # reader that knows its log's identity refuses).
    topic_id: str | None = None
    # (lifecycle events caused up to last_seq, lifecycle-topic offset to resume dedup from)
    lifecycle: tuple[int, int] | None = None

    def dumps(self) -> str:
        return json.dumps(
            {
                "v": _FORMAT,
                "epoch": self.epoch,
                "chunks": [list(c) for c in self.chunks],
                "last_seq": self.last_seq,
                "topic_id": self.topic_id,
                "lifecycle": None if self.lifecycle is None else list(self.lifecycle),
            }
        )

    @classmethod
    def loads(cls, raw: bytes | str | None) -> Position | None:
        """The position in `raw` (untrusted bytes from Redis): None when absent or not a
        position; a position with no chunks when of another format (its epoch kept, so that
        its keys can be dropped)."""
        if raw is None or len(raw) > _MAX_POSITION_BYTES:
            return None
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict):
            return None
        epoch = data.get("epoch")
        if not isinstance(epoch, str) or not 0 < len(epoch) <= 32 or set(epoch) - _EPOCH_CHARS:
            return None  # an epoch names keys: hex only, never a pattern
        if data.get("v") != _FORMAT:
            return cls(epoch, (), None)
        chunks, last_seq = data.get("chunks"), data.get("last_seq")
        topic_id, lifecycle = data.get("topic_id"), data.get("lifecycle")
        if not isinstance(chunks, list) or not (last_seq is None or _is_int(last_seq)):
            return cls(epoch, (), None)
        spans: list[tuple[int, int]] = []
        for span in chunks:
            if not (
                isinstance(span, list)
                and len(span) == 2
                and _is_int(span[0])
                and _is_int(span[1])
                and span[0] <= span[1]
            ):
                return cls(epoch, (), None)
            spans.append((span[0], span[1]))
        if topic_id is not None and not (isinstance(topic_id, str) and 0 < len(topic_id) <= 64):
            return cls(epoch, (), None)
        if lifecycle is not None:
            if not (
                isinstance(lifecycle, list)
                and len(lifecycle) == 2
                and _is_int(lifecycle[0])
                and _is_int(lifecycle[1])
            ):
                return cls(epoch, (), None)
            lifecycle = (lifecycle[0], lifecycle[1])
        return cls(epoch, tuple(spans), last_seq, topic_id, lifecycle)


def _encoded(
    entries: Sequence[Entry], index: WordIndex | None, checkpoint: tuple[Any, ...] | None
) -> list[tuple[tuple[int, int], bytes, Chunk]]:
    """The entries as chunks ((first, last), bytes, chunk): one, or several when one would
    be over the format's size bound (the checkpoint, if any, in the last, or left out
    when even a single record with it is too large)."""
    chunk = build_chunk(entries, index, checkpoint)
    try:
        return [((chunk.first, chunk.last), encode_chunk(chunk), chunk)]
    except SnapshotFormatError:
        if len(entries) > 1:
            half = len(entries) // 2
            return _encoded(entries[:half], index, None) + _encoded(
                entries[half:], index, checkpoint
            )
        if checkpoint is None:
            raise
        log.info("seq %d: the graph checkpoint is too large for a chunk; left out", chunk.last)
        return _encoded(entries, index, None)


class SnapshotLost(Exception):
    """The position key is not the one this writer last wrote (Redis flushed, or another
    writer): the writer must rebuild."""


class LeaseLost(Exception):
    """A write fenced by a projector lease (`SnapshotStore.owner`) found the lease held by
    another owner, or by none: nothing was written."""


class RedisAccessError(LogUnavailableError):
    """Redis refused this client (no password or a wrong one: "authentication failed"; or
    its ACL user may not touch these keys): retrying cannot help. The message names the log
    and never the password."""


def redis_refused(location: KafkaLocation, doing: str, exc: Exception) -> RedisAccessError:
    """The error for a Redis refusal (`redis.AuthenticationError`, `NoPermissionError`)."""
    what = (
        "authentication failed"
        if isinstance(exc, redis.AuthenticationError)
        else "not authorized (the ACL user may not do this)"
    )
    return RedisAccessError(
        f"log {location.topic}: cannot {doing}: Redis at {redact(location.redis_url)} refused: "
        f"{what}: {exc} (a secured stack's REDIS_URL carries USER:PASSWORD@)"
    )


def _graph_size(state: LogState) -> int:
    return (
        len(state.graph.items)
        + len(state.graph.edges)
        + len(state.intents.intents)
        + len(state.tasks.tasks)
    )


# How many chunks a load's fetch thread reads ahead of its decoding (`_fetched`).
_FETCH_AHEAD = 8


class SnapshotStore:
    """Reads and writes one log's snapshots in Redis."""

    # Envelopes a reader may have to refold before the writer adds a graph checkpoint (or
    # a quarter of the graph's size, when larger: a checkpoint costs the graph's size).
    checkpoint_every = 20_000

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        identify: Callable[[], LogIdentity] | None = None,
    ) -> None:
        """`identify`: the log's identity now, asked by every load after it read the
        position (a store made by `connect` asks the broker; one made without it checks
        no identity: for tests of the store alone)."""
        self.redis = client
        self.prefix = prefix
        self.pos_key = f"{prefix}pos"
        self.lock_key = f"{prefix}projector"
        self.identify = identify
        # A projector's writes are fenced by its lease: set to its owner id, a write or a
        # merge happens only while the lease key holds it (checked in the same MULTI).
        self.owner: str | None = None
        self.position: Position | None = None  # what this writer last wrote
        self.loaded: Position | None = None  # the position of the snapshot last loaded
        self.envelopes_since_checkpoint = 0  # of the snapshot last loaded or written

    @classmethod
    def connect(cls, location: KafkaLocation) -> SnapshotStore:
        client = redis.Redis.from_url(
            location.redis_url, socket_timeout=30, socket_connect_timeout=5
        )
        return cls(
            client, location.key_prefix, lambda: log_identity(location.bootstrap, location.topic)
        )

    def chunk_key(self, epoch: str, span: tuple[int, int]) -> str:
        return f"{self.prefix}{epoch}:chunk:{span[0]}-{span[1]}"

    # --- reading ----------------------------------------------------------------------------

    def read_position(self) -> Position | None:
        raw = self.redis.get(self.pos_key)
        position = Position.loads(raw)
        if position is None and raw is not None:
            log.warning("%s: not a snapshot position (unreadable or forged); ignored", self.pos_key)
        return position

    def _read_chunks(
        self,
        position: Position,
        spans: Sequence[tuple[int, int]],
        up_to_seq: int | None = None,
        belongs: Callable[[], bool] | None = None,
    ) -> list[Chunk] | None:
        """The chunks of `spans` (the last cut after `up_to_seq` when given: its rows past
        it are never built); None if one is missing (a merge replaced it: read the position
        again). `SnapshotFormatError` naming the key of a chunk that fails its checks, or
        holds other seqs than its key says. `belongs` (the check that the position is of
        this log: a round trip to Kafka) is asked by a thread while the chunks are fetched
        and decoded (decoding is safe on any bytes), and answered before any chunk is
        returned: `_NotThisLog` when it says no."""
        keys = [self.chunk_key(position.epoch, span) for span in spans]
        chunks: list[Chunk] = []
        asked = None if belongs is None else _in_thread(belongs, "memstream-snapshot-identity")
        with no_gc(spans[-1][1] - spans[0][0] if spans else 0), self._fetched(keys) as values:
            for i, (key, span, raw) in enumerate(zip(keys, spans, values, strict=True)):
                if raw is None:
                    return None
                cut = up_to_seq if i == len(spans) - 1 else None
                try:
                    decoded = decode(raw, cut)
                except SnapshotFormatError as exc:
                    raise SnapshotFormatError(f"{key}: {exc}") from None
                if (decoded.first, decoded.last) != tuple(span):
                    raise SnapshotFormatError(
                        f"{key}: holds seqs {decoded.first}-{decoded.last}, not {span[0]}-{span[1]}"
                    )
                chunk = Chunk(*decoded)
                chunks.append(chunk if cut is None else chunk.cut(cut))
        if asked is not None and not asked.result():
            raise _NotThisLog
        return chunks

    @contextmanager
    def _fetched(self, keys: Sequence[str]) -> Iterator[Iterator[bytes | None]]:
        """The values of `keys` in order (None: missing), fetched by a thread while the
        caller decodes those before: a cold load waited for every chunk to arrive before
        decoding the first (a fifth of its time on a 1M-event log). One GET a chunk, in
        order, at most `_FETCH_AHEAD` chunks ahead of the decoding (bytes held bounded, as
        the batches of one MGET bounded them); chunks are never rewritten (a merge writes
        new keys and lets the old ones expire a minute later), so reading them one by one
        reads what one MGET would. The thread stops when the caller leaves (a chunk
        missing, a refusal); an error of the client reaches the caller as it was raised."""
        if len(keys) < 2:
            yield iter(cast("list[bytes | None]", self.redis.mget(keys)) if keys else [])
            return
        values: queue.Queue[tuple[bytes | None, BaseException | None]] = queue.Queue(_FETCH_AHEAD)
        stop = threading.Event()

        def hand(value: bytes | None, error: BaseException | None) -> bool:
            while not stop.is_set():
                try:
                    values.put((value, error), timeout=0.05)
                    return True
                except queue.Full:
                    continue
            return False

        def fetch() -> None:
            try:
                for key in keys:
                    # The client does not decode responses: values are bytes.
                    if not hand(cast(bytes | None, self.redis.get(key)), None):
                        return
            except BaseException as exc:  # handed to the reader, which raises it
                hand(None, exc)

        def read() -> Iterator[bytes | None]:
            for _ in keys:
                value, error = values.get()
                if error is not None:
                    raise error
                yield value

        thread = threading.Thread(target=fetch, name="memstream-snapshot-fetch", daemon=True)
        thread.start()
        try:
            yield read()
        finally:
            stop.set()
            thread.join()

    def _belongs(self, position: Position) -> bool:
        """Whether `position` is a snapshot of this store's log (`identify`; none: unchecked).

        The identity is asked after the position was read, so the partition's end it gives
        is at or past every record the snapshot can have folded."""
        if position.chunks and position.chunks[-1][1] != position.last_seq:
            log.warning(
                "%s: snapshot position ends at %s, its last chunk at %s; ignored",
                self.prefix,
                position.last_seq,
                position.chunks[-1][1],
            )
            return False
        if self.identify is None:
            return True
        identity = self.identify()
        if position.topic_id != identity.topic_id:
            log.warning(
                "%s: the snapshot is of topic id %s, the log's topic is %s (deleted "
                "and created again?); ignored",
                self.prefix,
                position.topic_id,
                identity.topic_id,
            )
            return False
        if position.last_seq is None or position.last_seq >= identity.end:
            log.warning(
                "%s: the snapshot reaches seq %s, the log ends before seq %d; ignored",
                self.prefix,
                position.last_seq,
                identity.end,
            )
            return False
        return True

    def load_position(self) -> Position | None:
        """The position of the log's snapshot, None if absent or not of this log (see
        `load`)."""
        position = self.read_position()
        if position is None or not position.chunks or not self._belongs(position):
            return None
        return position

    def load_chunks(self, up_to_seq: int | None = None) -> list[Chunk] | None:
        """The snapshot's chunks (cut at `up_to_seq` when given); None if absent, or not
        a snapshot of the log (see `load`)."""
        for _ in range(3):  # a merge may replace chunks while we read: read again
            position = self.read_position()
            if position is None or not position.chunks:
                return None
            spans = [s for s in position.chunks if up_to_seq is None or s[0] <= up_to_seq]
            if not spans:
                return None
            try:
                # The log's identity is asked while the chunks are on their way (two round
                # trips at once: a cold load's first wait is the chunks' bytes).
                chunks = self._read_chunks(
                    position, spans, up_to_seq, partial(self._belongs, position)
                )
            except _NotThisLog:
                return None
            except SnapshotFormatError as exc:  # a cache: a refused chunk means no snapshot
                log.warning("snapshot chunk refused, folding the log instead: %s", exc)
                return None
            if chunks is not None:
                self.loaded = position
                break
            log.info("%s: a snapshot chunk is missing; reading the position again", self.prefix)
        else:
            log.warning("%s: snapshot chunks missing; ignoring the snapshot", self.prefix)
            return None
        expected = 0
        for chunk in chunks:
            if chunk.first != expected:
                log.warning(
                    "%s: snapshot chunks do not follow each other (%d after %d)",
                    self.prefix,
                    chunk.first,
                    expected - 1,
                )
                return None
            expected = chunk.last + 1
        return chunks  # the last one cut at `up_to_seq` already (`_read_chunks`)

    def load(self, up_to_seq: int | None = None) -> LogState | None:
        """The snapshot's state (at or before `up_to_seq` when given); None if absent.

        A snapshot of another log is absent too: when the store has `identify` (the log's
        identity: topic id and partition end), a snapshot of another topic id, or one
        reaching at or past the partition's end, is refused (logged)."""
        # One pause of the collector for the whole load: each pause ends with a walk over
        # everything built during it.
        with no_gc(1 << 30):
            return self._load(up_to_seq)

    def _load(self, up_to_seq: int | None) -> LogState | None:
        chunks = self.load_chunks(up_to_seq)
        if chunks is None:
            return None
        since = -1
        envelopes = 0
        for chunk in reversed(chunks):
            if chunk.checkpoint is not None:
                since = chunk.checkpoint[0]
                break
        for chunk in chunks:
            if chunk.last > since:
                envelopes += sum(1 for e in chunk.extras if e[1] == _RAW and e[0] > since)
        self.envelopes_since_checkpoint = envelopes
        try:
            return hydrate(chunks)
        except Exception:  # checked chunks hydrate; still, a cache never fails its reader
            log.warning(
                "%s: the snapshot did not hydrate; folding the log instead",
                self.prefix,
                exc_info=True,
            )
            return None

    # --- writing (the projector) ------------------------------------------------------------

    def start_epoch(self, topic_id: str | None = None) -> Position:
        """A new, empty snapshot generation of the topic `topic_id` (written with the first
        chunk)."""
        self.position = Position(uuid.uuid4().hex[:12], (), None, topic_id)
        self.envelopes_since_checkpoint = 0
        return self.position

    def adopt(self, position: Position | None = None) -> Position | None:
        """Continue the snapshot in Redis (after `load`; `position`: the one it loaded), as
        its writer."""
        self.position = self.read_position() if position is None else position
        return self.position

    def _check_owner(self, pipe: Any) -> None:
        """Under WATCH: raise LeaseLost unless `owner` (when set) holds the lease."""
        if self.owner is None:
            return
        held = pipe.get(self.lock_key)
        if held is None or held.decode(errors="replace") != self.owner:
            raise LeaseLost(
                f"{self.prefix}: the projector lease is held by "
                f"{'nobody' if held is None else 'another projector'}"
            )

    def write(
        self,
        first_seq: int,
        entries: Sequence[Entry],
        state: LogState | None = None,
        *,
        lifecycle: tuple[int, int] | None = None,
    ) -> Position:
        """Add one chunk (a few, if one would be over the format's size bound) and move
        the position, atomically. SnapshotLost if the position in Redis is not the one
        this writer last wrote; LeaseLost if `owner` is set and does not hold the lease.

        `state`: the state after `entries` (its word index spares tokenizing; its graphs
        make a checkpoint now and then). `lifecycle`: (events caused up to the chunk's last
        seq, lifecycle-topic offset of the first later one), kept in the position."""
        mine = self.position
        if mine is None:
            raise SnapshotLost("no epoch started")
        last_seq = entries[-1][0]
        if entries[0][0] != first_seq:
            raise ValueError(f"chunk starts at {entries[0][0]}, expected {first_seq}")
        envelopes = self.envelopes_since_checkpoint + sum(1 for e in entries if e[1] == _RAW)
        checkpoint = None
        if state is not None and state.last_seq == last_seq and envelopes:
            if envelopes >= max(self.checkpoint_every, _graph_size(state) // 4):
                checkpoint = (last_seq, state.graph, state.intents, state.tasks, state.graph_seq)
        pieces = _encoded(entries, None if state is None else state.memory.index, checkpoint)
        checkpointed = pieces[-1][2].checkpoint is not None
        current: Position | None = None
        for _ in range(50):
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(self.pos_key, self.lock_key)
                    self._check_owner(pipe)
                    current = Position.loads(pipe.get(self.pos_key))
                    if mine.chunks and (
                        current is None
                        or current.epoch != mine.epoch
                        or current.last_seq != mine.last_seq
                        or current.topic_id != mine.topic_id
                    ):
                        raise SnapshotLost(f"position is {current}, expected {mine}")
                    # A merge may have changed the chunk list since: keep what it made.
                    if current is not None and current.epoch == mine.epoch:
                        spans = current.chunks
                    else:
                        spans = ()  # a fresh epoch replaces whatever was there
                    new = Position(
                        mine.epoch,
                        (*spans, *(p[0] for p in pieces)),
                        last_seq,
                        mine.topic_id,
                        lifecycle,
                    )
                    pipe.multi()
                    for span, data, _ in pieces:
                        pipe.set(self.chunk_key(mine.epoch, span), data)
                    pipe.set(self.pos_key, new.dumps())
                    pipe.execute()
                    break
                except redis.WatchError:
                    continue  # the position moved (a merge) or the lease was renewed
        else:
            raise SnapshotLost("the position kept changing while writing")
        if not mine.chunks and current is not None and current.epoch != mine.epoch:
            self._drop_epoch(current.epoch)
        self.envelopes_since_checkpoint = 0 if checkpointed else envelopes
        self.position = new
        return new

    def _drop_epoch(self, epoch: str) -> None:
        keys = list(self.redis.scan_iter(match=f"{self.prefix}{epoch}:chunk:*", count=1000))
        for start in range(0, len(keys), 1000):
            self.redis.delete(*keys[start : start + 1000])

    # --- merging small chunks (the projector, in the background) ----------------------------

    @staticmethod
    def _size_class(span: tuple[int, int]) -> int:
        return ((span[1] - span[0] + 1).bit_length() + 1) // 2  # about log4(records)

    def _pick_run(
        self, spans: Sequence[tuple[int, int]], nbytes: Sequence[int] | None = None
    ) -> tuple[int, int] | None:
        """[i, j): the smallest run of `_MERGE_RUN` adjacent chunks of about one size (size
        classes at most one apart: chunks written every T ms vary in size). Smallest first:
        merging small chunks is cheap and is what keeps their number down. `nbytes`: the
        chunks' sizes; runs over `_MERGE_MAX_BYTES` in all are not merged."""
        classes = [self._size_class(s) for s in spans]
        best: tuple[int, int] | None = None
        best_size = _MERGE_MAX_RECORDS + 1
        for i in range(len(spans) - _MERGE_RUN + 1):
            j = i + _MERGE_RUN
            size = spans[j - 1][1] - spans[i][0] + 1
            if nbytes is not None and sum(nbytes[i:j]) > _MERGE_MAX_BYTES:
                continue
            if size < best_size and max(classes[i:j]) - min(classes[i:j]) <= 1:
                best, best_size = (i, j), size
        return best

    def compact(self, epoch: str | None = None, stop: threading.Event | None = None) -> int:
        """Merge runs of small chunks until none is left; how many merges were made.

        `epoch`: merge only in that epoch (the writer's); `stop`: checked between merges."""
        merges = 0
        while stop is None or not stop.is_set():
            position = self.read_position()
            if position is None or (epoch is not None and position.epoch != epoch):
                return merges
            with self.redis.pipeline(transaction=False) as pipe:
                for span in position.chunks:
                    pipe.strlen(self.chunk_key(position.epoch, span))
                nbytes = pipe.execute()
            picked = self._pick_run(position.chunks, nbytes)
            if picked is None:
                return merges
            i, j = picked
            run = position.chunks[i:j]
            try:
                chunks = self._read_chunks(position, run)
                if chunks is None:
                    return merges
                merged = merge_chunks(chunks)
                span = (merged.first, merged.last)
                data = encode_chunk(merged)
            except SnapshotFormatError as exc:  # readers refuse it too: nothing to merge
                log.warning("not merging snapshot chunks: %s", exc)
                return merges
            old_keys = [self.chunk_key(position.epoch, s) for s in run]
            done = False
            for _ in range(50):
                with self.redis.pipeline(transaction=True) as pipe:
                    try:
                        pipe.watch(self.pos_key)
                        current = Position.loads(pipe.get(self.pos_key))
                        if current is None or current.epoch != position.epoch:
                            return merges
                        spans = current.chunks
                        try:
                            at = spans.index(run[0])
                        except ValueError:
                            return merges
                        if spans[at : at + len(run)] != run:
                            return merges
                        new = replace(current, chunks=(*spans[:at], span, *spans[at + len(run) :]))
                        pipe.multi()
                        pipe.set(self.chunk_key(position.epoch, span), data)
                        pipe.set(self.pos_key, new.dumps())
                        for key in old_keys:
                            pipe.pexpire(key, _REPLACED_TTL_MS)
                        pipe.execute()
                        done = True
                        break
                    except redis.WatchError:
                        continue  # the writer added a chunk: check again
            if not done:
                return merges
            merges += 1
        return merges
