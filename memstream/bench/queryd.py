"""`memstream bench queryd`: search and get_items over HTTP, from a second process.

Prepares an embedded log (messages and graph items), starts `memstream queryd serve` on a
free 127.0.0.1 port as a subprocess, then drives it from another process (this module
run with ``--driver``) with one keep-alive httpx client for a bounded number of requests,
and reports requests a second and p50/p99 latency. No seed system has a daemon, so the
seed column is empty.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from memstream.bench.report import Row, append_all, print_table
from memstream.stack.probes import free_port, wait_http_ready

__all__ = ["run", "add_arguments"]

SEED = "seed system (none has a daemon)"
_VOCAB = [f"w{i}" for i in range(5000)]
_WEIGHTS = [1.0 / (rank + 1) for rank in range(len(_VOCAB))]
_SCOPES = 50


def _prepare(directory: Path, messages: int, items: int, rng: random.Random) -> None:
    from producers.memory import Memory
    from schemas.audit import Message
    from schemas.graph.envelopes import now_iso
    from schemas.graph.ids import uuid7
    from schemas.graph.items import create_memory_item
    from schemas.records import GraphEnvelope

    with Memory(directory) as memory:
        batch: list[Any] = []
        for i in range(messages):
            text = " ".join(rng.choices(_VOCAB, _WEIGHTS, k=rng.randint(6, 18)))
            batch.append(Message(speaker=f"agent{i % 8}", content=text))
            if len(batch) == 2000:
                memory.append_many(batch)
                batch = []
        if batch:
            memory.append_many(batch)
        envelopes: list[GraphEnvelope] = []
        for i in range(items):
            item = create_memory_item(
                scope=f"scope-{i % _SCOPES}",
                kind="observation",
                content={"n": i},
                author=f"agent{i % 8}",
                source_kind="observed",
                authority=round(rng.random(), 3),
                importance=round(rng.random(), 3),
            )
            payload = {
                "type": "memory.create",
                "item": item.model_dump(mode="json", exclude_none=True),
            }
            envelopes.append(
                GraphEnvelope(
                    id=uuid7(),
                    namespace="memory",
                    type="memory.create",
                    ts=now_iso(),
                    payload=payload,
                )
            )
            if len(envelopes) == 2000:
                chunk = envelopes
                memory.log.transact(partial(append_all, chunk))
                envelopes = []
        if envelopes:
            memory.log.transact(partial(append_all, envelopes))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _drive(base: str, kind: str, requests: int, warmup: int, seed: int) -> dict[str, float]:
    """One keep-alive client, sequential requests: throughput and latency (the driver)."""
    import httpx

    rng = random.Random(seed)
    log = "bench"

    def request(client: httpx.Client) -> httpx.Response:
        if kind == "search":
            q = " ".join(rng.choices(_VOCAB, _WEIGHTS, k=rng.randint(2, 5)))
            return client.get(f"/logs/{log}/search", params={"q": q, "limit": 5})
        body = {
            "filter": {
                "scope": f"scope-{rng.randrange(_SCOPES)}",
                "range": {"authority": {"min": 0.2}},
            },
            "options": {"sort": [{"field": "authority", "order": "desc"}], "limit": 20},
        }
        return client.post(f"/logs/{log}/graph/items/query", json=body)

    latencies: list[float] = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(warmup):
            request(client).raise_for_status()
        started = time.perf_counter()
        for _ in range(requests):
            t0 = time.perf_counter()
            response = request(client)
            latencies.append(time.perf_counter() - t0)
            response.raise_for_status()
        elapsed = time.perf_counter() - started
    return {
        "rps": requests / elapsed,
        "p50_ms": _percentile(latencies, 0.50) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
    }


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(width=160)
    rng = random.Random(11)
    messages, items = args.queryd_messages, args.queryd_items
    requests, warmup = args.queryd_requests, args.queryd_warmup
    work = Path(tempfile.mkdtemp(prefix="memstream-bench-queryd-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        directory = work / "bench"
        console.print(f"bench queryd: preparing {messages:,} messages and {items:,} graph items")
        _prepare(directory, messages, items, rng)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        memstream = Path(sys.executable).with_name("memstream")
        command = [str(memstream)] if memstream.exists() else [sys.executable, "-m", "memstream"]
        with open(work / "queryd.log", "wb") as out:
            proc = subprocess.Popen(
                [
                    *command,
                    "queryd",
                    "serve",
                    "--log",
                    str(directory),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_http_ready(f"{base}/readyz", proc)
        results: dict[str, dict[str, float]] = {}
        for kind in ("search", "get_items"):
            console.print(f"bench queryd: {requests:,} {kind} requests from a second process")
            driver = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "memstream.bench.queryd",
                    "--driver",
                    base,
                    kind,
                    str(requests),
                    str(warmup),
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            results[kind] = json.loads(driver.stdout.strip().splitlines()[-1])
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)

    size = {"search": f"{messages // 1000}k messages", "get_items": f"{items // 1000}k items"}
    what = {"search": "search", "get_items": "get_items (scope + range, sort, limit 20)"}
    rows: list[Row] = []
    for kind in ("search", "get_items"):
        r = results[kind]
        label = f"{what[kind]}, {size[kind]}, loopback"
        rows += [
            Row(f"{label}: requests/s", None, r["rps"], "req/s", higher_is_better=True),
            Row(f"{label}: p50 latency", None, r["p50_ms"], "ms"),
            Row(f"{label}: p99 latency", None, r["p99_ms"], "ms"),
        ]
    print_table(
        f"queryd over HTTP: {requests:,} sequential requests each, one keep-alive client in "
        "a second process",
        SEED,
        rows,
        console,
    )
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queryd-messages", type=int, default=10_000, help="queryd: messages in the served log"
    )
    parser.add_argument(
        "--queryd-items", type=int, default=10_000, help="queryd: graph items in the served log"
    )
    parser.add_argument(
        "--queryd-requests", type=int, default=2000, help="queryd: timed requests per kind"
    )
    parser.add_argument(
        "--queryd-warmup", type=int, default=100, help="queryd: untimed requests first"
    )


if __name__ == "__main__":  # the driver process: python -m memstream.bench.queryd --driver ...
    if len(sys.argv) == 6 and sys.argv[1] == "--driver":
        _, _, url, kind_, count, warm = sys.argv
        print(json.dumps(_drive(url, kind_, int(count), int(warm), seed=5)))
        sys.exit(0)
    sys.exit("usage: python -m memstream.bench.queryd --driver URL search|get_items N WARMUP")
