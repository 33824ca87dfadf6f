"""The benchmarks' worker processes: a worker that dies ends the run at once, naming it,
instead of leaving the benchmark waiting for a result that never comes."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from typing import Any

import pytest

from memstream.bench.kafka import gather


def _put(out: Any, value: int) -> None:
    out.put(value)


def test_gather_ends_at_once_naming_a_process_that_died_before_its_result() -> None:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_put, args=(out, 1)), ctx.Process(target=os._exit, args=(3,))]
    for p in procs:
        p.start()
    started = time.monotonic()
    with pytest.raises(SystemExit, match=rf"a worker \(pid {procs[1].pid}\) exited with code 3"):
        gather(procs, out, "a worker", patience=600)
    assert time.monotonic() - started < 30
    for p in procs:
        p.join()


def test_gather_returns_each_process_result() -> None:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_put, args=(out, k)) for k in range(3)]
    for p in procs:
        p.start()
    assert sorted(gather(procs, out, "a worker")) == [0, 1, 2]
    for p in procs:
        p.join()
