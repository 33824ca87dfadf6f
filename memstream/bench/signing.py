"""`memstream bench signing`: what provable authorship (signed records) costs.

Side by side, in one run, taking turns on fresh embedded logs: appends one by one (each
fsynced) and in batches of 100, unsigned and signed by an enrolled agent; then the fold of
a log of `--signing-records` messages (the pure `fold_record` every reader and the
projector run, from bytes already read): unsigned, signed with each signature checked in
turn, and signed with the signatures of each batch of 1,000 checked ahead of the fold by
`--signing-workers` threads (`projector.authorship.preverify`, as the projector does).
The seed systems sign nothing: there is no seed column.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from memstream.bench.report import Row, per_second, print_table
from producers.memory import Memory
from projector.authorship import preverify
from projector.record_fold import empty_state, fold_record
from schemas.audit import Message
from schemas.evidence.note import NoteSigner

__all__ = ["run", "add_arguments"]

_BATCH = 1000


def _signed_log(path: Path | str, admin: NoteSigner, agent: NoteSigner) -> None:
    with Memory(path, agent_key=admin, signed=True, key=False) as memory:
        memory.enrol(agent.verifier)


def _one_by_one(path: Path, agent: NoteSigner | None, n: int) -> float:
    with Memory(path, agent_key=agent, key=False) as memory:
        messages = [Message(speaker="ana", content=f"append number {i}") for i in range(n)]
        start = time.perf_counter()
        for m in messages:
            memory.add_message(m)
        return per_second(n, time.perf_counter() - start)


def _batches(path: Path, agent: NoteSigner | None, n: int, size: int = 100) -> float:
    with Memory(path, agent_key=agent, key=False) as memory:
        messages = [Message(speaker="ana", content=f"batched {i}") for i in range(n)]
        start = time.perf_counter()
        for i in range(0, n, size):
            memory.append_many(messages[i : i + size])
        return per_second(n, time.perf_counter() - start)


def _records(path: Path, agent: NoteSigner | None, n: int) -> list[tuple[int, bytes]]:
    with Memory(path, agent_key=agent, key=False) as memory:
        for i in range(0, n, _BATCH):
            memory.append_many(
                Message(speaker="ana", content=f"the fold reads record {j}", session_id="s")
                for j in range(i, min(n, i + _BATCH))
            )
        return list(memory.log.records(0, timeout=0.5))


def _fold(records: list[tuple[int, bytes]], pool: ThreadPoolExecutor | None) -> float:
    state = empty_state()
    start = time.perf_counter()
    for i in range(0, len(records), _BATCH):
        batch = records[i : i + _BATCH]
        if pool is not None:
            preverify(state.authorship, [data for _, data in batch], pool.map)
        for seq, data in batch:
            state = fold_record(state, seq, data).state
    wall = time.perf_counter() - start
    assert not state.rejections, state.rejections[0]
    return per_second(len(records), wall)


def run(args: argparse.Namespace) -> int:
    console = Console(width=160)
    admin = NoteSigner.generate("admin:bench")
    agent = NoteSigner.generate("agent:bench")
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-signing-"))
    rows: list[Row] = []
    try:
        n, runs = args.signing_appends, args.signing_runs
        rates: dict[str, list[float]] = {"plain": [], "signed": [], "bplain": [], "bsigned": []}
        for k in range(runs):
            rates["plain"].append(_one_by_one(work / f"p{k}", None, n))
            _signed_log(work / f"s{k}", admin, agent)
            rates["signed"].append(_one_by_one(work / f"s{k}", agent, n))
            rates["bplain"].append(_batches(work / f"bp{k}", None, n * 5))
            _signed_log(work / f"bs{k}", admin, agent)
            rates["bsigned"].append(_batches(work / f"bs{k}", agent, n * 5))
        for name, values in rates.items():
            console.print(f"{name}: {', '.join(f'{r:,.0f}' for r in values)} /s")
        med = {name: statistics.median(v) for name, v in rates.items()}
        rows.append(
            Row(f"appends one by one, unsigned (median of {runs})", None, med["plain"], "/s", True)
        )
        rows.append(
            Row(
                f"appends one by one, signed (median of {runs})",
                None,
                med["signed"],
                "/s",
                True,
                f"{med['signed'] / med['plain'] - 1:+.1%} vs unsigned",
            )
        )
        rows.append(Row("appends in batches of 100, unsigned", None, med["bplain"], "/s", True))
        rows.append(
            Row(
                "appends in batches of 100, signed",
                None,
                med["bsigned"],
                "/s",
                True,
                f"{med['bsigned'] / med['bplain'] - 1:+.1%} vs unsigned",
            )
        )

        size = args.signing_records
        plain = _records(work / "fold-plain", None, size)
        _signed_log(work / "fold-signed", admin, agent)
        signed = _records(work / "fold-signed", agent, size)
        console.print(f"fold logs: {len(plain):,} unsigned / {len(signed):,} signed records")
        folds: dict[str, list[float]] = {"plain": [], "serial": [], "parallel": []}
        with ThreadPoolExecutor(args.signing_workers) as pool:
            for _ in range(args.signing_runs):
                folds["plain"].append(_fold(plain, None))
                folds["serial"].append(_fold(signed, None))
                folds["parallel"].append(_fold(signed, pool))
        for name, values in folds.items():
            console.print(f"fold {name}: {', '.join(f'{r:,.0f}' for r in values)} /s")
        best = {name: max(v) for name, v in folds.items()}
        rows.append(
            Row(
                f"fold, {size:,} messages, unsigned (best of {runs})",
                None,
                best["plain"],
                "/s",
                True,
                "40,000/s",
            )
        )
        rows.append(
            Row(
                f"fold, signed, each signature checked in turn (best of {runs})",
                None,
                best["serial"],
                "/s",
                True,
                f"40,000/s; {best['serial'] / best['plain']:.2f}x unsigned",
            )
        )
        rows.append(
            Row(
                f"fold, signed, {args.signing_workers} threads check each batch ahead "
                f"(best of {runs})",
                None,
                best["parallel"],
                "/s",
                True,
                f"40,000/s; {best['parallel'] / best['plain']:.2f}x unsigned",
            )
        )
        if args.signing_kafka_records > 0:
            rows.extend(_kafka_rows(args, admin, agent, console))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(
        "memstream bench signing (embedded log; fold from bytes in memory)", "seed", rows, console
    )
    return 0


def _kafka_log(
    bootstrap: str, redis_url: str, size: int, admin: NoteSigner, agent: NoteSigner | None
) -> str:
    location = f"kafka://{bootstrap}/bench-signing-{uuid.uuid4().hex[:8]}?redis={redis_url}"
    if agent is not None:
        _signed_log(location, admin, agent)
    with Memory(location, agent_key=agent) as memory:
        for i in range(size):
            memory.publish_async(Message(speaker="ana", content=f"record {i} of the bench"))
        memory.flush()
    return location


def _catch_up(location: str) -> float:
    from projector.service import Projector

    projector = Projector(location, key=False)
    start = time.perf_counter()
    state = projector.run(until_caught_up=True)
    seconds = time.perf_counter() - start
    assert not state.rejections, state.rejections[0]
    return projector.stats.folded / seconds


def _kafka_rows(
    args: argparse.Namespace, admin: NoteSigner, agent: NoteSigner, console: Console
) -> list[Row]:
    """A fresh projector's catch-up on Kafka logs of the same messages, unsigned and signed
    (taking turns, best of 2); the projector checks a batch's signatures with its threads."""
    from memstream.bench.kafka import _servers

    bootstrap, redis_url = _servers(args)
    size = args.signing_kafka_records
    plain: list[float] = []
    signed: list[float] = []
    for _ in range(2):
        plain.append(_catch_up(_kafka_log(bootstrap, redis_url, size, admin, None)))
        signed.append(_catch_up(_kafka_log(bootstrap, redis_url, size, admin, agent)))
        console.print(
            f"kafka catch-up of {size:,} records: unsigned {plain[-1]:,.0f}/s, "
            f"signed {signed[-1]:,.0f}/s"
        )
    base, ours = max(plain), max(signed)
    return [
        Row(
            f"Kafka projector catch-up, {size:,} records, unsigned, best of 2",
            None,
            base,
            "/s",
            True,
            "40,000/s",
        ),
        Row(
            f"Kafka projector catch-up, {size:,} records, signed, best of 2",
            None,
            ours,
            "/s",
            True,
            f"40,000/s; {ours / base:.2f}x unsigned",
        ),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("signing suite")
    group.add_argument(
        "--signing-appends", type=int, default=1000, help="signing: appends one by one, a run"
    )
    group.add_argument("--signing-runs", type=int, default=3, help="signing: runs of each")
    group.add_argument(
        "--signing-records", type=int, default=20_000, help="signing: records the fold reads"
    )
    group.add_argument(
        "--signing-kafka-records",
        type=int,
        default=0,
        help="signing: also time the Kafka projector's catch-up on logs of this many records",
    )
    group.add_argument(
        "--signing-workers", type=int, default=2, help="signing: threads checking signatures"
    )
