"""`memstream bench audit`: the audit memory beside audit-ready-memory 0.0.2, one run."""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
import random
import shutil
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console

from memstream.bench.report import (
    Row,
    append_all,
    appends_one_by_one,
    best_of,
    ms,
    per_call,
    per_second,
    print_table,
)
from producers.logs.sqlite import SqliteLog, record_checksum
from producers.memex_store import MemexStore
from producers.memory import Memory
from projector.audit import MemoryState, replay
from queryd.audit import search
from schemas.audit import Message
from schemas.codec import encode_record

__all__ = ["run", "add_arguments"]

SEED = "audit-ready-memory 0.0.2"


def _corpus(n: int, rng: random.Random) -> list[tuple[uuid.UUID, datetime, str, str]]:
    """Chat-like messages over a Zipf-shaped vocabulary, so common words are common."""
    vocab = [f"w{i}" for i in range(5000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = []
    for i in range(n):
        text = " ".join(rng.choices(vocab, weights, k=rng.randint(6, 18)))
        rows.append(
            (
                uuid.UUID(int=rng.getrandbits(128), version=4),
                start + timedelta(seconds=i),
                f"agent{i % 8}",
                text,
            )
        )
    return rows


def _queries(count: int, rng: random.Random) -> list[str]:
    vocab = [f"w{i}" for i in range(5000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    return [" ".join(rng.choices(vocab, weights, k=rng.randint(2, 5))) for _ in range(count)]


def _events(cls: Any, rows: list) -> list:
    return [
        cls(id=i, timestamp=t, speaker=s, content=c, seq=n) for n, (i, t, s, c) in enumerate(rows)
    ]


def _retained_bytes(build: Callable[[], object]) -> tuple[float, object]:
    gc.collect()
    tracemalloc.start()
    kept = build()
    gc.collect()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return float(size), kept


def _searchable(state: MemoryState) -> MemoryState:
    """The state with its word index built (postings are built when a search first reads
    them): the memory a searched state holds."""
    _ = state.index.postings
    return state


def _listed(rates: list[float]) -> str:
    return ", ".join(f"{r:,.0f}" for r in rates)


def _sqlite_alone(path: Path, messages: list[Message]) -> float:
    """Appends per second of the statements alone: BEGIN IMMEDIATE, PRAGMA data_version,
    INSERT, COMMIT on the log's own connection (same table, WAL, FULL), records encoded
    beforehand. What the disk allows before any Python of ours runs."""
    rows = [
        (seq, str(m.id), m.kind, data, record_checksum(seq, data))
        for seq, m in enumerate(messages)
        for data in (encode_record(m),)
    ]
    log = SqliteLog(path)
    try:
        cursor = log._conn.cursor()  # the connection, not the log: no check, no fold
        start = time.perf_counter()
        for row in rows:
            cursor.execute("BEGIN IMMEDIATE")
            cursor.execute("PRAGMA data_version").fetchone()
            cursor.execute(
                "INSERT INTO events (seq, id, kind, record, crc) VALUES (?, ?, ?, ?, ?)", row
            )
            cursor.execute("COMMIT")
        return per_second(len(rows), time.perf_counter() - start)
    finally:
        log.close()


def _writer(path: str, count: int, barrier: Any, finished: Any, out: Any) -> None:
    """One writer process: `count` appends one by one, timed from the common start. It
    stays until every writer is done: a writer that ended at once (closing its log, the
    interpreter's teardown: tens of milliseconds of CPU) would run on the cores the
    others still append with, which one process alone never pays within its time."""
    with Memory(path) as memory:
        messages = [Message(speaker="w", content=f"append number {i}") for i in range(count)]
        barrier.wait()
        start = time.perf_counter()
        for message in messages:
            memory.add_message(message)
        out.put((start, time.perf_counter()))
        finished.wait(600)  # the parent gives up on a writer after as long


def _writers_rate(path: Path, processes: int, count: int) -> float:
    """Appends per second in all, `processes` processes appending `count` each one by one
    to one fresh embedded path (each fsynced), from the first start to the last end."""
    ctx = mp.get_context("spawn")
    Memory(path).close()  # the log, created once
    barrier, finished = ctx.Barrier(processes), ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(str(path), count, barrier, finished, out))
        for _ in range(processes)
    ]
    for proc in procs:
        proc.start()
    spans = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    with Memory(path, create=False) as memory:  # every append landed, seqs dense
        if [e.seq for e in memory.events()] != list(range(processes * count)):
            raise SystemExit(f"bench audit: {processes} writers left seqs that are not dense")
    return per_second(processes * count, max(e for _, e in spans) - min(s for s, _ in spans))


def _encrypted_appends(path: Path, n: int, *, sessions: bool) -> float:
    """Appends per second one by one on a new encrypted log (content sealed, keys created
    in the same commit)."""
    return appends_one_by_one(str(path), n, encrypt=True, sessions=sessions)


def _graph_creates(path: Path, n: int, *, encrypt: bool) -> float:
    """Graph items created one by one per second (`MemexStore`) on a new log, 8 scopes;
    encrypted: each content value sealed under its scope's key."""
    Memory(path, encrypt=encrypt).close()
    with MemexStore.open(str(path)) as store:
        start = time.perf_counter()
        for i in range(n):
            store.create(
                scope=f"scope{i % 8}",
                kind="observation",
                content={"text": f"item number {i}", "n": i},
                author="bench",
                source_kind="user_explicit",
                authority=0.5,
            )
        return per_second(n, time.perf_counter() - start)


def run(args: argparse.Namespace) -> int:
    import audit_ready_memory as seed  # the benchmark extra: timed, never read

    console = Console(width=160)
    rng = random.Random(7)
    n_search = args.messages
    rows: list[Row] = []
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-"))
    try:
        # Appends one by one, each durable before it returns, each run on a fresh log. The
        # disk's fsync latency drifts from second to second, so the systems take turns and
        # the rows show each one's median run. Beside them, the statements of an append
        # alone (sqlite3, the same connection): the ceiling this disk sets.
        n_ours, n_seed = args.appends, max(args.appends // 4, 100)
        ours_rates: list[float] = []
        # Encryption on (issue 14), in the same turns: the same messages (no session, so
        # each is its own subject with a key of its own), and messages of 8 sessions.
        sealed_rates: list[float] = []
        session_rates: list[float] = []
        seed_rates: list[float] = []
        alone_rates: list[float] = []
        graph_plain: list[float] = []
        graph_sealed: list[float] = []
        batch_rate = 0.0
        for k in range(args.append_runs):
            alone_rates.append(
                _sqlite_alone(
                    work / f"alone{k}",
                    [Message(speaker="a", content=f"append number {i}") for i in range(n_ours)],
                )
            )
            with Memory(work / f"ours{k}") as memory:
                msgs = [Message(speaker="a", content=f"append number {i}") for i in range(n_ours)]
                start = time.perf_counter()
                for m in msgs:
                    memory.add_message(m)
                ours_rates.append(per_second(n_ours, time.perf_counter() - start))
                if k == 0:
                    batch = [Message(speaker="a", content=f"batch {i}") for i in range(n_ours * 4)]
                    start = time.perf_counter()
                    for j in range(0, len(batch), 100):
                        memory.transact(partial(append_all, batch[j : j + 100]))
                    batch_rate = per_second(len(batch), time.perf_counter() - start)
            sealed_rates.append(_encrypted_appends(work / f"sealed{k}", n_ours, sessions=False))
            session_rates.append(_encrypted_appends(work / f"session{k}", n_ours, sessions=True))
            graph_plain.append(_graph_creates(work / f"graph{k}", n_ours, encrypt=False))
            graph_sealed.append(_graph_creates(work / f"graphenc{k}", n_ours, encrypt=True))
            seed_memory = seed.Memory(str(work / f"seed{k}"))
            try:
                seed_msgs = [
                    seed.Message(speaker="a", content=f"append number {i}") for i in range(n_seed)
                ]
                start = time.perf_counter()
                for m in seed_msgs:
                    seed_memory.add_message(m)
                seed_rates.append(per_second(n_seed, time.perf_counter() - start))
            finally:
                seed_memory.close()
        console.print(
            f"appends one by one, runs of {n_ours:,}: memstream {_listed(ours_rates)} "
            f"/s, sqlite3 alone {_listed(alone_rates)} /s; runs of {n_seed:,}: "
            f"{SEED} {_listed(seed_rates)} /s"
        )
        runs = "" if args.append_runs == 1 else f", median of {args.append_runs} runs"
        rows.append(
            Row(
                f"appends one by one, embedded (durable){runs}",
                statistics.median(seed_rates),
                statistics.median(ours_rates),
                "/s",
                True,
                "> 5,000/s",
            )
        )
        share = statistics.median(ours_rates) / statistics.median(alone_rates)
        rows.append(
            Row(
                f"  sqlite3 alone: the same statements, nothing else{runs}",
                None,
                statistics.median(alone_rates),
                "/s",
                True,
                f"this disk's ceiling; memstream {share:.0%} of it (goal >= 90%)",
            )
        )

        # Several processes appending one by one to one path, each append fsynced, in
        # turns with one process appending as many alone (fsync latency drifts).
        writers, per_writer = args.writers, args.writer_appends
        many_rates: list[float] = []
        one_rates: list[float] = []
        for k in range(args.append_runs):
            one_rates.append(_writers_rate(work / f"one{k}", 1, writers * per_writer))
            many_rates.append(_writers_rate(work / f"many{k}", writers, per_writer))
        console.print(
            f"{writers} processes appending one by one to one path: "
            f"{_listed(many_rates)} /s in all; one process alone {_listed(one_rates)} /s"
        )
        ratio = statistics.median(many_rates) / statistics.median(one_rates)
        rows.append(
            Row(
                f"{writers} processes appending one by one to one path, in all{runs}",
                None,
                statistics.median(many_rates),
                "/s",
                True,
                f"{ratio:.2f}x one process (goal >= 0.8x)",
            )
        )
        rows.append(
            Row(
                f"  one process appending as many, same run{runs}",
                None,
                statistics.median(one_rates),
                "/s",
                True,
                "",
            )
        )
        console.print(
            f"appends one by one, encrypted: {_listed(sealed_rates)} /s (a key per event), "
            f"{_listed(session_rates)} /s (8 sessions)"
        )
        plain = statistics.median(ours_rates)
        for label, rates in (
            ("encrypted, a key per event (no session)", sealed_rates),
            ("encrypted, 8 sessions (a key per session)", session_rates),
        ):
            rate = statistics.median(rates)
            rows.append(
                Row(
                    f"  {label}{runs}",
                    None,
                    rate,
                    "/s",
                    True,
                    f"within 10% of unencrypted ({rate / plain:.0%})",
                )
            )
        console.print(
            f"graph items created one by one: {_listed(graph_plain)} /s, encrypted "
            f"{_listed(graph_sealed)} /s (8 scopes)"
        )
        graph_rate = statistics.median(graph_plain)
        rows.append(Row(f"graph items created one by one{runs}", None, graph_rate, "/s", True, ""))
        rate = statistics.median(graph_sealed)
        rows.append(
            Row(
                f"  encrypted, 8 scopes (a key per scope){runs}",
                None,
                rate,
                "/s",
                True,
                f"within 10% of unencrypted ({rate / graph_rate:.0%})",
            )
        )
        rows.append(
            Row(
                "appends in batches of 100, embedded",
                None,
                batch_rate,
                "/s",
                True,
                "more than one by one",
            )
        )

        # Search over the same visible messages, same ids: results must be identical.
        corpus = _corpus(n_search, rng)
        ours_state = replay(_events(Message, corpus))
        seed_state = seed.replay(_events(seed.Message, corpus))
        queries = _queries(args.queries, rng)
        seed_queries = queries[: args.seed_queries]
        mismatches = sum(
            [m.id for m in search(ours_state, q)] != [m.id for m in seed.search(seed_state, q)]
            for q in seed_queries
        )
        t_seed = best_of(lambda: [seed.search(seed_state, q) for q in seed_queries], 1)
        t_ours = best_of(lambda: [search(ours_state, q) for q in queries], 3)
        rows.append(
            Row(
                f"search per query, {n_search:,} visible messages",
                ms(t_seed / len(seed_queries)),
                ms(t_ours / len(queries)),
                "ms",
                goal="< 2 ms",
            )
        )
        console.print(
            f"search results compared on {len(seed_queries)} queries: "
            f"{len(seed_queries) - mismatches} identical, {mismatches} different"
        )

        # Memory held per event by the folded state (events included) and its index.
        seed_bytes, _ = _retained_bytes(lambda: seed.replay(_events(seed.Message, corpus)))
        ours_bytes, _ = _retained_bytes(lambda: _searchable(replay(_events(Message, corpus))))
        rows.append(
            Row(
                "memory per event, folded state + index",
                seed_bytes / n_search,
                ours_bytes / n_search,
                "B",
            )
        )

        # recall and replay(up_to_seq) against log length: flat for memstream.
        for size in (args.log_events // 10, args.log_events):
            with Memory(work / f"log{size}") as memory:
                events = _events(Message, _corpus(size, rng))
                unsequenced = [e.model_copy(update={"seq": None}) for e in events]
                for k in range(0, size, 2000):
                    memory.transact(partial(append_all, unsequenced[k : k + 2000]))
                t_recall = per_call(partial(memory.recall, "w1 w17 w300"), 200)
                t_replay = per_call(partial(memory.replay, up_to_seq=size // 2), 200)
            rows.append(
                Row(
                    f"recall, {size:,}-event log",
                    None,
                    ms(t_recall),
                    "ms",
                    goal="independent of log length",
                )
            )
            rows.append(
                Row(
                    f"replay(up_to_seq={size // 2:,}), {size:,}-event log",
                    None,
                    ms(t_replay),
                    "ms",
                    goal="independent of log length",
                )
            )
        seed_size = args.seed_log_events
        seed_memory = seed.Memory(str(work / "seedlog"))
        try:
            for m in _events(seed.Message, _corpus(seed_size, rng)):
                seed_memory.add_message(m.model_copy(update={"seq": None}))
            t_recall = per_call(lambda: seed_memory.recall("w1 w17 w300"), 3)
            t_replay = per_call(lambda: seed_memory.replay(up_to_seq=seed_size // 2), 3)
        finally:
            seed_memory.close()
        rows.append(Row(f"recall, {seed_size:,}-event log", ms(t_recall), None, "ms"))
        rows.append(
            Row(
                f"replay(up_to_seq={seed_size // 2:,}), {seed_size:,}-event log",
                ms(t_replay),
                None,
                "ms",
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table("memstream bench audit", SEED, rows, console)
    return 1 if mismatches else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--appends", type=int, default=2000, help="appends one by one, a run")
    parser.add_argument(
        "--append-runs",
        type=int,
        default=3,
        help="runs of appends one by one, each system in turn (the median shows)",
    )
    parser.add_argument(
        "--writers", type=int, default=6, help="processes appending to one path at once"
    )
    parser.add_argument(
        "--writer-appends", type=int, default=500, help="appends one by one, each writer"
    )
    parser.add_argument("--messages", type=int, default=100_000, help="messages searched")
    parser.add_argument("--queries", type=int, default=1000, help="queries for memstream")
    parser.add_argument(
        "--seed-queries",
        type=int,
        default=10,
        help="queries for the seed system (about 0.7 s each at 100k)",
    )
    parser.add_argument(
        "--log-events",
        type=int,
        default=100_000,
        help="log length for recall/replay (also a tenth of it)",
    )
    parser.add_argument(
        "--seed-log-events",
        type=int,
        default=2000,
        help="log length for the seed system's recall/replay (it appends "
        "about 1,400 a second at best)",
    )
