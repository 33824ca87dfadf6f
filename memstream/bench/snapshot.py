"""`memstream bench snapshot`: loading a large Redis snapshot, in the format before (pickle,
format 2) and now (format 3, `projector.snapshot_format`), side by side in one run.

The snapshot is the one a projector leaves for a log of N messages (as `bench kafka`
writes them) with M graph envelopes among them (``memory.create``, one every N/M
records), folded, cut into chunks of 2**18 records (what merging leaves) with a graph
checkpoint in the last. Timed: decoding every chunk and hydrating the state from them
with Redis's MGETs as `SnapshotStore.load` makes them (in memory when no Redis is
given), whole and up to seq n/2 (a cold replay); and encoding them (the writer's side).
Sizes are the bytes each format stores in Redis.

Pickle is used here only on bytes this process has just made, to time the format the
snapshots had before; memstream itself never unpickles anything.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import redis
from rich.console import Console

from memstream.bench.report import Row, print_table

__all__ = ["run", "add_arguments"]

_CHUNK = 1 << 18


def _first(blobs: list[bytes], count: int) -> list[bytes]:
    return blobs[:count]


def _mget(client: redis.Redis, keys: list[str], count: int) -> list[bytes]:
    return cast(list[bytes], client.mget(keys[:count]))


def _log(events: int, items: int) -> tuple[list[tuple[Any, ...]], Any, Any]:
    """(entries, word index, state of the graphs): the snapshot's content."""
    from projector.audit.index import WordIndex
    from projector.audit.rows import row_of
    from projector.record_fold import empty_state, fold_record
    from projector.snapshot_store import entry_of
    from schemas.audit import Message
    from schemas.codec import encode_record
    from schemas.graph.envelopes import now_iso
    from schemas.graph.ids import uuid7
    from schemas.graph.items import create_memory_item
    from schemas.records import GraphEnvelope

    # One envelope every `every` records while items remain (then the rest at the end).
    every = events // items + 1 if items else 0
    index = WordIndex()
    graph = empty_state()
    entries: list[tuple[Any, ...]] = []
    made = 0
    for seq in range(events + items):
        n = len(graph.graph.items)
        if n < items and (made == events or seq % every == every - 1):
            item = create_memory_item(
                scope=f"scope-{n % 50}",
                kind="observation",
                content={"n": n},
                author=f"agent{n % 8}",
                source_kind="observed",
                authority=(n * 7919 % 1000) / 1000,
                importance=(n * 104729 % 1000) / 1000,
            ).model_dump(mode="json", exclude_none=True)
            envelope = GraphEnvelope(
                id=uuid7(),
                namespace="memory",
                type="memory.create",
                ts=now_iso(),
                payload={"type": "memory.create", "item": item},
            )
            data = encode_record(envelope)
            graph, lifecycle = fold_record(graph, seq, data)
            entries.append(entry_of(seq, data, lifecycle))
        else:
            pid = 1000 + made % 8
            message = Message(
                speaker="agent", content=f"event {made} of {events // 8} from pid {pid}"
            )
            event = message.with_seq(seq)
            index.add(seq, (message.speaker, message.content))
            entries.append(row_of(seq, event))
            made += 1
    return entries, index, graph


def _pickled(chunk: Any) -> bytes:
    """Format 2, as `encode_chunk` wrote it before."""
    return pickle.dumps(
        (
            2,
            chunk.first,
            chunk.last,
            chunk.rows,
            chunk.message_rel,
            chunk.document_rel,
            chunk.other_rel,
            chunk.words_of,
            chunk.postings,
            chunk.extras,
            chunk.checkpoint,
        ),
        protocol=pickle.HIGHEST_PROTOCOL,
    )


def _unpickled(data: bytes) -> Any:
    from projector.audit.index import WordIndex
    from projector.snapshot_store import Chunk

    value = pickle.loads(data)  # noqa: S301 - bytes this process made a moment ago
    # Format 2 held the index built: (..., words_of, postings, extras, checkpoint).
    fields = [*value[1:7], WordIndex.of(value[7], value[8]), *value[9:]]
    return Chunk(*fields)


def _load(
    read: Callable[[], list[bytes]], decode: Callable[[bytes], Any], up_to_seq: int | None
) -> Any:
    """What `SnapshotStore.load` does: read the chunks' bytes, decode, hydrate."""
    from projector.audit.state import no_gc
    from projector.snapshot_store import hydrate

    with no_gc(1 << 30):
        chunks = [decode(b) for b in read()]
        if up_to_seq is not None:
            chunks = [c for c in chunks if c.first <= up_to_seq]
            chunks[-1] = chunks[-1].cut(up_to_seq)
        return hydrate(chunks)


def _decode_only(blobs: list[bytes], decode: Callable[[bytes], Any]) -> list[Any]:
    from projector.audit.state import no_gc

    with no_gc(1 << 30):
        return [decode(b) for b in blobs]


def _timed(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    """The best wall time of `runs` calls (a shared machine: the least disturbed one)."""
    best, value = float("inf"), None
    for _ in range(runs):
        value = None
        gc.collect()
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def _wall_and_cpu(fn: Callable[[], Any]) -> tuple[float, float]:
    """One call's wall time and this process's CPU time (less disturbed by other load)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def run(args: argparse.Namespace) -> int:
    from projector.snapshot_store import build_chunk, decode_chunk, encode_chunk

    console = Console(width=160)
    events, items, runs = args.snapshot_events, args.snapshot_items, args.snapshot_runs
    console.print(f"bench snapshot: {events:,} messages and {items:,} graph items ...")
    start = time.perf_counter()
    entries, index, graph = _log(events, items)
    last = entries[-1][0]
    chunks = []
    for i in range(0, len(entries), _CHUNK):
        part = entries[i : i + _CHUNK]
        checkpoint = None
        if i + _CHUNK >= len(entries) and items:
            checkpoint = (last, graph.graph, graph.intents, graph.tasks, graph.graph_seq)
        chunks.append(build_chunk(part, index, checkpoint))
    console.print(
        f"  {len(entries):,} records folded into {len(chunks)} chunks "
        f"in {time.perf_counter() - start:.1f}s"
    )

    rows: list[Row] = []
    t_old, old = _timed(lambda: [_pickled(c) for c in chunks], runs)
    t_new, new = _timed(lambda: [encode_chunk(c) for c in chunks], runs)
    old_mb = sum(map(len, old)) / 1e6
    new_mb = sum(map(len, new)) / 1e6
    rows.append(Row("snapshot size in Redis", old_mb, new_mb, "MB"))
    rows.append(Row("encoding the chunks (the writer)", t_old, t_new, "s"))
    half = last // 2
    halves = sum(1 for c in chunks if c.first <= half)
    url = getattr(args, "redis", None) or os.environ.get("REDIS_URL")
    client = redis.Redis.from_url(url, socket_timeout=120) if url else None
    prefix = f"memstream:bench-snapshot-{uuid.uuid4().hex[:8]}:"
    reads: list[Callable[[int], list[bytes]]] = []
    for name, blobs in (("old", old), ("new", new)):
        if client is None:
            reads.append(partial(_first, blobs))
            continue
        keys = [f"{prefix}{name}:{i}" for i in range(len(blobs))]
        client.mset(dict(zip(keys, blobs, strict=True)))
        reads.append(partial(_mget, client, keys))
    where = "from Redis" if client is not None else "in memory"
    try:
        # The two formats take turns, so drift on the machine falls on both; the best of
        # the runs shows, wall time and CPU time apart.
        best: dict[tuple[str, int], float] = {}
        for _ in range(runs):
            for k, decode in enumerate((_unpickled, decode_chunk)):
                cases = (
                    ("full", lambda r=reads[k], d=decode: _load(lambda: r(len(chunks)), d, None)),
                    ("half", lambda r=reads[k], d=decode: _load(lambda: r(halves), d, half)),
                    ("decode", lambda r=reads[k], d=decode: _decode_only(r(len(chunks)), d)),
                )
                for case, fn in cases:
                    wall, cpu = _wall_and_cpu(fn)
                    for what, value in ((f"{case} wall", wall), (f"{case} cpu", cpu)):
                        best[what, k] = min(best.get((what, k), float("inf")), value)
        before = _load(lambda: reads[0](len(chunks)), _unpickled, None)
        after = _load(lambda: reads[1](len(chunks)), decode_chunk, None)
    finally:
        if client is not None:
            client.delete(
                *[f"{prefix}{name}:{i}" for name in ("old", "new") for i in range(len(chunks))]
            )
    for what, label in (
        ("full wall", f"load {where}: read + decode + hydrate, {last + 1:,} records (wall)"),
        ("full cpu", "  the same, CPU time of the reading process"),
        ("decode cpu", "  of which: reading and decoding the chunks, CPU time"),
        ("half wall", f"load up to seq {half:,}, a cold replay (wall)"),
        ("half cpu", "  the same, CPU time of the reading process"),
    ):
        rows.append(Row(label, best[what, 0], best[what, 1], "s"))
    same = after == before and after.memory.index.postings == before.memory.index.postings
    print_table(
        f"memstream bench snapshot ({events:,} messages, {items:,} graph items, best of {runs})",
        "pickle (format 2, before)",
        rows,
        console,
    )
    console.print(
        "  the two formats hydrate equal states"
        if same
        else "  [red]the two formats hydrate DIFFERENT states[/red]"
    )
    return 0 if same else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("snapshot suite")
    group.add_argument(
        "--snapshot-events",
        type=int,
        default=1_000_000,
        help="snapshot: messages in the snapshotted log",
    )
    group.add_argument(
        "--snapshot-items",
        type=int,
        default=100_000,
        help="snapshot: graph items in its checkpoint",
    )
    group.add_argument(
        "--snapshot-runs",
        type=int,
        default=3,
        help="snapshot: timed runs of each format (the best shows)",
    )
