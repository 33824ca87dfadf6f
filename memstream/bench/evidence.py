"""`memstream bench evidence`: what tamper evidence costs the embedded log.

Rows: appends one by one without a signing key and with one (a signed checkpoint in each
commit), the runs taking turns on fresh logs (the disk's fsync latency drifts); `verify`
of a log of `--evidence-records` records (default 1M, written in commits of 1,000, a
signed checkpoint each), in records a second; an inclusion proof and a consistency proof
on that log (`Memory.prove(seq).to_json()`), the median and the 99th percentile.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
import uuid
from functools import partial
from pathlib import Path

from rich.console import Console

from memstream.bench.report import Row, append_all, ms, once, per_second, print_table
from producers.logs.sqlite_evidence import verify_sqlite_log
from producers.memory import Memory
from schemas.audit import Message
from schemas.evidence.note import NoteSigner

__all__ = ["run", "add_arguments"]


def _appends(path: Path, key: NoteSigner | bool, n: int) -> tuple[float, float]:
    """Appends a second, and this process's CPU time per append (all its threads)."""
    with Memory(path, key=key) as memory:
        messages = [Message(speaker="a", content=f"append number {i}") for i in range(n)]
        cpu = time.process_time()
        start = time.perf_counter()
        for m in messages:
            memory.add_message(m)
        wall = time.perf_counter() - start
        return per_second(n, wall), (time.process_time() - cpu) / n


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(args: argparse.Namespace) -> int:
    console = Console(width=160)
    signer = NoteSigner.generate("memstream.bench")
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-evidence-"))
    rows: list[Row] = []
    try:
        plain: list[float] = []
        signed: list[float] = []
        cpu_plain: list[float] = []
        cpu_signed: list[float] = []
        n = args.evidence_appends
        for k in range(args.evidence_runs):
            rate, cpu = _appends(work / f"plain{k}", False, n)
            plain.append(rate)
            cpu_plain.append(cpu)
            rate, cpu = _appends(work / f"signed{k}", signer, n)
            signed.append(rate)
            cpu_signed.append(cpu)
        console.print(
            f"appends one by one, runs of {n:,}: no key {', '.join(f'{r:,.0f}' for r in plain)}"
            f" /s; signed {', '.join(f'{r:,.0f}' for r in signed)} /s"
        )
        base, ours = statistics.median(plain), statistics.median(signed)
        runs = f", median of {args.evidence_runs} runs"
        rows.append(Row(f"appends one by one, no signing key{runs}", None, base, "/s", True))
        rows.append(
            Row(
                f"appends one by one, a signed checkpoint each{runs}",
                None,
                ours,
                "/s",
                True,
                f"within 10% of no key: {ours / base - 1:+.1%}",
            )
        )
        cpu_base, cpu_ours = statistics.median(cpu_plain), statistics.median(cpu_signed)
        rows.append(Row("  CPU time per append, no signing key", None, ms(cpu_base), "ms"))
        rows.append(
            Row(
                "  CPU time per append, a signed checkpoint each",
                None,
                ms(cpu_ours),
                "ms",
                goal=f"{(cpu_ours - cpu_base) * 1e6:+.0f} us",
            )
        )

        size = args.evidence_records
        path = work / "big"
        rng = random.Random(14)
        t_build, _ = once(partial(_build, path, signer, size))
        console.print(f"built a {size:,}-record signed log in {t_build:.1f} s (commits of 1,000)")
        walls, cpus = [], []
        for _ in range(2):
            cpu = time.process_time()
            wall, report = once(partial(verify_sqlite_log, path, signer.verifier))
            cpus.append(time.process_time() - cpu)
            walls.append(wall)
            if not report.ok:
                console.print(f"verify failed: {report.problem}")
                return 1
        rows.append(
            Row(
                f"verify, {size:,}-record log (re-hash, check checkpoints), best of 2",
                None,
                per_second(size, min(walls)),
                "/s",
                True,
                "> 200,000/s",
            )
        )
        rows.append(
            Row(
                "  the same, per second of this process's CPU time",
                None,
                per_second(size, min(cpus)),
                "/s",
                True,
                "(the machine is shared)",
            )
        )
        t_open, memory = once(partial(Memory, path, create=False, key=False))
        console.print(f"opened it (fold and tree) in {t_open:.1f} s")
        try:
            seqs = [rng.randrange(size) for _ in range(args.evidence_proofs)]
            times = []
            for seq in seqs:
                start = time.perf_counter()
                memory.prove(seq).to_json()
                times.append(time.perf_counter() - start)
            rows.append(
                Row(
                    f"inclusion proof as JSON, {size:,}-record log, median",
                    None,
                    ms(statistics.median(times)),
                    "ms",
                    goal="< 1 ms",
                )
            )
            rows.append(
                Row("  the same, 99th percentile", None, ms(_percentile(times, 0.99)), "ms")
            )
            times = []
            for seq in seqs:
                start = time.perf_counter()
                memory.consistency(seq).to_json()
                times.append(time.perf_counter() - start)
            rows.append(
                Row(
                    f"consistency proof as JSON, {size:,}-record log, median",
                    None,
                    ms(statistics.median(times)),
                    "ms",
                )
            )
        finally:
            memory.close()
        if args.evidence_kafka_records > 0:
            rows.extend(_kafka_rows(args, signer, console))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table("memstream bench evidence", "-", rows, console)
    return 0


def _kafka_log(bootstrap: str, redis_url: str, size: int) -> str:
    location = f"kafka://{bootstrap}/bench-evidence-{uuid.uuid4().hex[:8]}?redis={redis_url}"
    with Memory(location) as memory:
        for i in range(size):
            memory.publish_async(
                Message(speaker=f"agent{i % 8}", content=f"record {i} of the evidence bench")
            )
        memory.flush()
    return location


def _catch_up(location: str, key: NoteSigner | bool) -> tuple[float, int]:
    """Seconds for a fresh projector to fold the whole log (its checkpoints included)."""
    from projector.service import Projector

    projector = Projector(location, key=key)
    start = time.perf_counter()
    projector.run(until_caught_up=True)
    return time.perf_counter() - start, projector.stats.checkpoints


def _kafka_rows(args: argparse.Namespace, signer: NoteSigner, console: Console) -> list[Row]:
    """The projector's catch-up on a Kafka log with and without checkpointing (fresh logs
    of the same records, taking turns), and proofs on the signed one."""
    from memstream.bench.kafka import _servers

    bootstrap, redis_url = _servers(args)
    size = args.evidence_kafka_records
    plain: list[float] = []
    signed: list[float] = []
    location = ""
    for _ in range(2):
        seconds, _cuts = _catch_up(_kafka_log(bootstrap, redis_url, size), False)
        plain.append(size / seconds)
        location = _kafka_log(bootstrap, redis_url, size)
        seconds, cuts = _catch_up(location, signer)
        signed.append(size / seconds)
        console.print(
            f"kafka catch-up of {size:,} records: no key {plain[-1]:,.0f}/s, "
            f"signed {signed[-1]:,.0f}/s ({cuts} checkpoints)"
        )
    base, ours = max(plain), max(signed)
    rows = [
        Row(f"Kafka projector catch-up, {size:,} records, no key, best of 2", None, base, "/s"),
        Row(
            f"Kafka projector catch-up, {size:,} records, checkpoints signed (1/s), best of 2",
            None,
            ours,
            "/s",
            True,
            f"{ours / base - 1:+.1%} vs no key",
        ),
    ]
    rng = random.Random(14)
    with Memory(location, create=False) as memory:
        memory.prove(0)  # the tree from Redis's leaf hashes, checked against the checkpoint
        seqs = [rng.randrange(size) for _ in range(min(200, args.evidence_proofs))]
        times = []
        for seq in seqs:
            start = time.perf_counter()
            memory.prove(seq).to_json()
            times.append(time.perf_counter() - start)
        tree = memory._log._evidence.tree  # type: ignore[attr-defined]
        at_hand = []
        for seq in seqs:
            start = time.perf_counter()
            tree.inclusion_proof(seq, size)
            at_hand.append(time.perf_counter() - start)
    rows.append(
        Row(
            f"Kafka inclusion proof, {size:,} records, leaf hashes at hand, median",
            None,
            ms(statistics.median(at_hand)),
            "ms",
            goal="< 1 ms",
        )
    )
    rows.append(
        Row(
            "  Memory.prove as JSON (the record fetched from the broker), median",
            None,
            ms(statistics.median(times)),
            "ms",
        )
    )
    return rows


def _build(path: Path, signer: NoteSigner, size: int) -> None:
    with Memory(path, key=signer) as memory:
        for start in range(0, size, 1000):
            batch = [
                Message(speaker=f"agent{i % 8}", content=f"record {i} of the evidence bench")
                for i in range(start, min(size, start + 1000))
            ]
            memory.transact(partial(append_all, batch))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("evidence suite")
    group.add_argument(
        "--evidence-appends", type=int, default=2000, help="evidence: appends one by one, a run"
    )
    group.add_argument(
        "--evidence-runs", type=int, default=3, help="evidence: runs of each (median shows)"
    )
    group.add_argument(
        "--evidence-records",
        type=int,
        default=1_000_000,
        help="evidence: records in the log verify and the proofs run on",
    )
    group.add_argument("--evidence-proofs", type=int, default=1000, help="evidence: proofs timed")
    group.add_argument(
        "--evidence-kafka-records",
        type=int,
        default=0,
        help="evidence: also time the Kafka projector's catch-up with and without "
        "checkpoints on logs of this many records (0: not; needs Kafka and Redis)",
    )
