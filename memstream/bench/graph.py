"""`memstream bench graph`: the memory graph beside memex-python 0.14.0, in one run.

Both systems get the same inputs (plain command dicts, as read from a log) and answer the
same queries; each figure is the best of a few runs, except memex's large replays, which
are timed once (tens of seconds each).
"""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from memstream.bench.report import Row, best_of, ms, once, print_table
from projector.graph.integrity import cascade_retract
from projector.graph.replay import replay_commands
from projector.graph.selection import get_items
from projector.graph.serialization import to_json
from queryd.graph.scoring import get_scored_items
from schemas.graph.ids import uuid7

__all__ = ["add_arguments", "run"]

SEED = "memex-python 0.14.0"
_T0 = 1_700_000_000_000  # fixed epoch ms, so both systems see the same ages


def _item(i: int, parents: list[str] | None = None, id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": id or uuid7(_T0 + i),
        "scope": f"user:{i % 100}/topic{i % 7}",
        "kind": "observation",
        "content": {"key": f"k{i}", "value": i},
        "author": f"agent:{i % 13}",
        "source_kind": "observed",
        "authority": (i * 7919 % 1000) / 1000,
        "conviction": (i * 104729 % 1000) / 1000,
        "importance": (i * 1299709 % 1000) / 1000,
        "created_at": _T0 + i,
    }
    if parents:
        item["parents"] = parents
    return item


def creates(n: int) -> list[dict[str, Any]]:
    return [{"type": "memory.create", "item": _item(i)} for i in range(n)]


def chain(n: int) -> list[dict[str, Any]]:
    ids = [uuid7(_T0 + i) for i in range(n)]
    return [
        {"type": "memory.create", "item": _item(i, [ids[i - 1]] if i else None, ids[i])}
        for i in range(n)
    ]


ITEMS_FILTER = {"scope_prefix": "user:4"}  # user:4 and user:40..49: 11% of the items
NARROW_FILTER = {"scope_prefix": "user:42/"}  # one user's scopes: 1% of the items
ITEMS_OPTIONS = {
    "sort": [{"field": "importance", "order": "desc"}, {"field": "recency", "order": "desc"}]
}
WEIGHTS = {
    "authority": 0.5,
    "conviction": 0.2,
    "importance": 0.3,
    "decay": {"rate": 0.1, "interval": "day", "type": "exponential"},
}


def run(args: argparse.Namespace) -> int:
    import memex  # the seed system, imported only to time it

    quick = bool(getattr(args, "quick", False))
    rows: list[Row] = []

    # replay_commands: 20k and 100k memory.create commands
    seed_states: dict[int, Any] = {}
    ours_states: dict[int, Any] = {}
    for n in (20_000, 100_000):
        cmds = creates(n)
        seed_s: float | None = None
        if n <= 20_000 or not quick:
            seed_s, res = once(partial(memex.replay_commands, cmds))
            assert not res.skipped and len(res.state.items) == n
            seed_states[n] = res.state
        ours = best_of(partial(replay_commands, cmds), 3)
        res = replay_commands(cmds)
        assert not res.skipped and len(res.state.items) == n
        ours_states[n] = res.state
        rows.append(
            Row(
                f"replay_commands, {n:,} memory.create",
                seed_s,
                ours,
                "s",
                goal="linear; 100k < 1 s" if n == 100_000 else "linear",
            )
        )
    if quick:
        rows.append(Row("  (--quick: memex not replayed at 100k)", None, None, "s"))

    ours_big = ours_states[100_000]
    # The seed's query state: its own replay when measured, else its from_json (linear).
    seed_big = seed_states.get(100_000) or memex.from_json(to_json(ours_big))

    # The reducer keeps the scope index: a replayed state's first scope query needs no build.
    fresh = replay_commands(creates(100_000)).state
    cold, _ = once(lambda: get_items(fresh, NARROW_FILTER, ITEMS_OPTIONS))
    for f in (NARROW_FILTER, ITEMS_FILTER):
        ref = [it.id for it in get_items(ours_big, f, ITEMS_OPTIONS)]
        seed_ref = [it.id for it in memex.get_items(seed_big, f, ITEMS_OPTIONS)]
        assert ref == seed_ref, "get_items disagrees with the seed system"
        seed_q = ms(best_of(partial(memex.get_items, seed_big, f, ITEMS_OPTIONS), 3))
        rows.append(
            Row(
                f"get_items scope_prefix {f['scope_prefix']!r} + 2-key sort, 100k items "
                f"({len(ref):,} hits)",
                seed_q,
                ms(best_of(partial(get_items, ours_big, f, ITEMS_OPTIONS), 5)),
                "ms",
                goal=">= 10x",
            )
        )
        if f is NARROW_FILTER:
            rows.append(
                Row("  same, first scope query on a freshly replayed state", seed_q, ms(cold), "ms")
            )

    for label, opts in (("top 100", {"limit": 100}), ("all", None)):
        ours_sc = get_scored_items(ours_big, WEIGHTS, opts)
        seed_sc = memex.get_scored_items(seed_big, WEIGHTS, opts)
        # Decay reads the clock, so two calls differ in the last bits of a score and may
        # swap near-ties: compare the score sequences with a tolerance.
        assert len(ours_sc) == len(seed_sc) and all(
            abs(a.score - b.score) <= 1e-9 for a, b in zip(ours_sc, seed_sc, strict=True)
        ), "get_scored_items disagrees with the seed system"
        rows.append(
            Row(
                f"get_scored_items with decay, 100k items, {label}",
                ms(best_of(partial(memex.get_scored_items, seed_big, WEIGHTS, opts), 3)),
                ms(best_of(partial(get_scored_items, ours_big, WEIGHTS, opts), 5)),
                "ms",
                goal=">= 10x",
            )
        )

    links = chain(10_000)
    root = links[0]["item"]["id"]
    seed_chain = memex.replay_commands(links).state
    ours_chain = replay_commands(links).state
    seed_t, seed_res = once(lambda: memex.cascade_retract(seed_chain, root, "bench"))
    ours_res = cascade_retract(ours_chain, root, "bench")
    assert len(seed_res.retracted) == len(ours_res.retracted) == 10_000
    assert list(seed_res.retracted) == ours_res.retracted
    rows.append(
        Row(
            "cascade_retract of a 10k-item chain (the whole graph)",
            ms(seed_t),
            ms(best_of(lambda: cascade_retract(ours_chain, root, "bench"), 3)),
            "ms",
        )
    )

    # The same chain inside the 100k-item graph: the survivors stay shared, not rebuilt.
    big_links = creates(100_000) + links
    ours_mixed = replay_commands(big_links).state
    seed_mixed = memex.from_json(to_json(ours_mixed))
    seed_t, seed_res = once(lambda: memex.cascade_retract(seed_mixed, root, "bench"))
    ours_res = cascade_retract(ours_mixed, root, "bench")
    assert list(seed_res.retracted) == ours_res.retracted
    rows.append(
        Row(
            "cascade_retract of a 10k-item chain in a 110k-item graph",
            ms(seed_t),
            ms(best_of(lambda: cascade_retract(ours_mixed, root, "bench"), 3)),
            "ms",
        )
    )

    print_table("memory graph (seed 003)", SEED, rows)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="graph: skip memex-python's ~50 s replay of 100k commands",
    )
