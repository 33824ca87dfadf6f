"""Random command scripts for the epistemic graph, run through memex-python 0.14.0 and
memstream by their public APIs, with every outcome normalized for comparison.

A script is plain data: a list of operations ``(name, args)``. ``Runner`` applies them to
one library's three graphs; ``normalize`` turns whatever an operation returned (results,
events, states, errors) into comparable data. Ids the libraries mint themselves (UUIDv7s
from the clock and randomness: edges of ``mark_*``, re-ids, envelope ids) are renamed in
order of appearance, keeping their millisecond timestamp, so the comparison sees where they
appear and when they were minted, not their random bits.

Both libraries read the clock (decay, ``decay_importance``, minted ids, envelope times); the
tests run each example under one frozen clock (time-machine).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

NOW_MS = 1_750_000_000_000  # the frozen clock of every example
DAY = 86_400_000


def v7(ms: int, n: int) -> str:
    """A fixed UUIDv7 with timestamp ``ms``."""
    h = f"{ms:012x}"
    return f"{h[:8]}-{h[8:]}-7000-8000-{n:012x}"


V1, V2, V3 = v7(NOW_MS - 3 * DAY, 1), v7(NOW_MS - 40 * DAY, 2), v7(NOW_MS + DAY, 3)
ITEM_IDS = ["a", "b", "c", "d", V1, V2, V3]
REF_IDS = [*ITEM_IDS, "gone"]
EDGE_IDS = ["e1", "e2", "e3", v7(NOW_MS - DAY, 9)]
INTENT_IDS = ["i1", "i2", v7(NOW_MS - 2 * DAY, 7)]
TASK_IDS = ["t1", "t2", v7(NOW_MS - 2 * DAY, 8)]
KNOWN = {*REF_IDS, *EDGE_IDS, *INTENT_IDS, *TASK_IDS}
SCOPES = ["s", "s/x", "team"]
AUTHORS = ["x", "y"]
KINDS = ["observation", "hypothesis"]
SOURCES = ["observed", "agent_inferred"]
EDGE_KINDS = ["CONTRADICTS", "SUPERSEDES", "ALIAS", "SUPPORTS", "DERIVED_FROM"]
SCORES = [0.0, 0.25, 0.5, 0.75, 1.0]

ids = st.sampled_from(ITEM_IDS)
refs = st.sampled_from(REF_IDS)
score = st.sampled_from(SCORES)
opt_score = st.none() | score
small_dict = st.dictionaries(
    st.sampled_from(["k", "m", "n", "é"]), st.sampled_from([1, "v", None, "é", 1.5]), max_size=2
)
created = st.sampled_from([None, NOW_MS - 10 * DAY, NOW_MS - DAY, NOW_MS - 1000, NOW_MS + DAY])


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


@st.composite
def items(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "id": draw(ids),
        "scope": draw(st.sampled_from(SCOPES)),
        "kind": draw(st.sampled_from(KINDS)),
        "content": draw(small_dict),
        "author": draw(st.sampled_from(AUTHORS)),
        "source_kind": draw(st.sampled_from(SOURCES)),
        "authority": draw(score),
        **_drop_none(
            {
                "parents": draw(st.none() | st.lists(refs, max_size=3)),
                "conviction": draw(opt_score),
                "importance": draw(opt_score),
                "created_at": draw(created),
                "meta": draw(st.none() | small_dict),
                "intent_id": draw(st.none() | st.sampled_from(INTENT_IDS)),
                "task_id": draw(st.none() | st.sampled_from(TASK_IDS)),
            }
        ),
    }


@st.composite
def edges(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "edge_id": draw(st.sampled_from(EDGE_IDS)),
        "from": draw(refs),
        "to": draw(refs),
        "kind": draw(st.sampled_from(EDGE_KINDS)),
        "author": draw(st.sampled_from(AUTHORS)),
        "source_kind": "observed",
        "authority": draw(score),
        "active": draw(st.booleans()),
        **_drop_none({"weight": draw(opt_score), "meta": draw(st.none() | small_dict)}),
    }


item_partial = st.dictionaries(
    st.sampled_from(
        [
            "content",
            "meta",
            "importance",
            "authority",
            "conviction",
            "parents",
            "scope",
            "id",
            "created_at",
            "bogus",
            "author",
        ]
    ),
    st.sampled_from([None, 0.5, 1.0, "s", ["a"], {"k": 2}, {}]),
    max_size=3,
)
edge_partial = st.dictionaries(
    st.sampled_from(["meta", "weight", "active", "kind", "from", "to", "edge_id", "bogus"]),
    st.sampled_from([None, 0.5, True, False, "ALIAS", "a", {"k": 2}, {}]),
    max_size=3,
)


def memory_commands() -> st.SearchStrategy[dict[str, Any]]:
    author = st.sampled_from(AUTHORS)
    return st.one_of(
        st.builds(lambda i: {"type": "memory.create", "item": i}, items()),
        st.builds(lambda i: {"type": "memory.create", "item": i}, items()),
        st.builds(
            lambda i, p, a: {"type": "memory.update", "item_id": i, "partial": p, "author": a},
            refs,
            item_partial,
            author,
        ),
        st.builds(lambda i, a: {"type": "memory.retract", "item_id": i, "author": a}, refs, author),
        st.builds(lambda e: {"type": "edge.create", "edge": e}, edges()),
        st.builds(
            lambda e, p, a: {"type": "edge.update", "edge_id": e, "partial": p, "author": a},
            st.sampled_from(EDGE_IDS),
            edge_partial,
            author,
        ),
        st.builds(
            lambda e, a: {"type": "edge.retract", "edge_id": e, "author": a},
            st.sampled_from(EDGE_IDS),
            author,
        ),
    )


decay_config = st.fixed_dictionaries(
    {
        "rate": st.sampled_from([0.0, 0.1, 0.5, 1.0]),
        "interval": st.sampled_from(["hour", "day", "week", "day", "month"]),
        "type": st.sampled_from(["exponential", "linear", "step", "exponential", "cubic"]),
    }
)
rng = st.fixed_dictionaries({}, optional={"min": score, "max": score})


def filters(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    optional: dict[str, st.SearchStrategy[Any]] = {
        "ids": st.lists(refs, max_size=3),
        "scope": st.sampled_from(SCOPES),
        "scope_prefix": st.sampled_from(["s", "s/", "t", ""]),
        "author": st.sampled_from(AUTHORS),
        "kind": st.sampled_from(KINDS),
        "source_kind": st.sampled_from(SOURCES),
        "range": st.fixed_dictionaries(
            {}, optional={"authority": rng, "conviction": rng, "importance": rng}
        ),
        "intent_id": st.sampled_from(INTENT_IDS),
        "intent_ids": st.lists(st.sampled_from(INTENT_IDS), max_size=2),
        "task_id": st.sampled_from(TASK_IDS),
        "task_ids": st.lists(st.sampled_from(TASK_IDS), max_size=2),
        "has_parent": refs,
        "is_root": st.booleans(),
        "parents": st.fixed_dictionaries(
            {},
            optional={
                "includes": refs,
                "includes_any": st.lists(refs, max_size=2),
                "includes_all": st.lists(refs, max_size=2),
                "count": st.fixed_dictionaries(
                    {},
                    optional={"min": st.sampled_from([0, 1, 2]), "max": st.sampled_from([0, 1, 2])},
                ),
            },
        ),
        "decay": st.fixed_dictionaries({"config": decay_config, "min": score}),
        "created": st.fixed_dictionaries(
            {},
            optional={
                "before": st.sampled_from([NOW_MS - 2 * DAY, NOW_MS, NOW_MS + 2 * DAY]),
                "after": st.sampled_from([NOW_MS - 20 * DAY, NOW_MS - DAY]),
            },
        ),
        "meta": st.dictionaries(
            st.sampled_from(["k", "m", "k.x"]), st.sampled_from([1, "v"]), max_size=1
        ),
        "meta_has": st.lists(st.sampled_from(["k", "m", "k.x"]), max_size=2),
    }
    if depth > 0:
        optional["not"] = st.deferred(lambda: filters(depth - 1))
        optional["or"] = st.lists(st.deferred(lambda: filters(depth - 1)), max_size=2)
    return st.fixed_dictionaries({}, optional=optional).filter(lambda f: len(f) <= 3)


sort_opt = st.fixed_dictionaries(
    {
        "field": st.sampled_from(
            ["authority", "conviction", "importance", "recency", "recency", "bogus"]
        ),
        "order": st.sampled_from(["asc", "desc"]),
    }
)
query_options = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "sort": sort_opt | st.lists(sort_opt, max_size=2),
        "limit": st.integers(0, 4),
        "offset": st.integers(0, 3),
    },
)
weights = st.fixed_dictionaries(
    {},
    optional={
        "authority": st.sampled_from([1.0, 0.5, -1.0]),
        "conviction": st.sampled_from([1.0, 0.3]),
        "importance": st.sampled_from([1.0, 0.7]),
        "decay": decay_config,
    },
)
scored_options = st.none() | st.fixed_dictionaries(
    {},
    optional={
        "pre": filters(1),
        "post": filters(1),
        "min_score": st.sampled_from([0.0, 0.3, 0.6]),
        "limit": st.integers(0, 4),
        "offset": st.integers(0, 3),
    },
)
diversity = st.fixed_dictionaries(
    {},
    optional={
        "author_penalty": st.sampled_from([0.0, 0.1, 0.3]),
        "parent_penalty": st.sampled_from([0.1, 0.25]),
        "source_penalty": st.sampled_from([0.05, 0.2]),
    },
)
TRANSFORMS = ["retract_low", "bump", "skip", "content", "mixed"]

intent = st.fixed_dictionaries(
    {
        "id": st.sampled_from(INTENT_IDS),
        "label": st.sampled_from(["g", "h"]),
        "priority": score,
        "owner": st.sampled_from(AUTHORS),
        "status": st.sampled_from(["active", "active", "paused", "completed"]),
    },
    optional={
        "parent_id": st.sampled_from(INTENT_IDS),
        "description": st.just("d"),
        "context": small_dict,
        "root_memory_ids": st.lists(refs, max_size=2),
        "meta": small_dict,
    },
)
task = st.fixed_dictionaries(
    {
        "id": st.sampled_from(TASK_IDS),
        "intent_id": st.sampled_from(INTENT_IDS),
        "action": st.sampled_from(["fetch", "parse"]),
        "priority": score,
        "status": st.sampled_from(["pending", "pending", "running", "failed"]),
    },
    optional={
        "parent_id": st.sampled_from(TASK_IDS),
        "label": st.just("L"),
        "context": small_dict,
        "input_memory_ids": st.lists(refs, max_size=2),
        "output_memory_ids": st.lists(refs, max_size=2),
        "agent_id": st.just("ag"),
        "attempt": st.integers(0, 2),
        "meta": small_dict,
    },
)
intent_partial = st.dictionaries(
    st.sampled_from(
        [
            "label",
            "context",
            "meta",
            "status",
            "id",
            "priority",
            "parent_id",
            "root_memory_ids",
            "bogus",
        ]
    ),
    st.sampled_from([None, "z", {"q": 1}, 0.5, ["a"], "i1"]),
    max_size=3,
)
task_partial = st.dictionaries(
    st.sampled_from(
        ["label", "context", "meta", "status", "id", "priority", "intent_id", "attempt", "bogus"]
    ),
    st.sampled_from([None, "z", {"q": 1}, 0.5, 3, "i2"]),
    max_size=3,
)


def intent_commands() -> st.SearchStrategy[dict[str, Any]]:
    iid = st.sampled_from(INTENT_IDS)
    author = st.sampled_from(AUTHORS)
    moves = st.sampled_from(["intent.complete", "intent.cancel", "intent.pause", "intent.resume"])
    return st.one_of(
        st.builds(lambda i: {"type": "intent.create", "intent": i}, intent),
        st.builds(
            lambda i, p, a: {"type": "intent.update", "intent_id": i, "partial": p, "author": a},
            iid,
            intent_partial,
            author,
        ),
        st.builds(lambda t, i, a: {"type": t, "intent_id": i, "author": a}, moves, iid, author),
    )


def task_commands() -> st.SearchStrategy[dict[str, Any]]:
    tid = st.sampled_from(TASK_IDS)
    return st.one_of(
        st.builds(lambda t: {"type": "task.create", "task": t}, task),
        st.builds(
            lambda i, p: {"type": "task.update", "task_id": i, "partial": p, "author": "x"},
            tid,
            task_partial,
        ),
        st.builds(
            lambda i, a: {"type": "task.start", "task_id": i, **_drop_none({"agent_id": a})},
            tid,
            st.none() | st.just("ag2"),
        ),
        st.builds(
            lambda i, r, o: {
                "type": "task.complete",
                "task_id": i,
                **_drop_none({"result": r, "output_memory_ids": o}),
            },
            tid,
            st.none() | small_dict,
            st.none() | st.lists(refs, max_size=2),
        ),
        st.builds(lambda i: {"type": "task.fail", "task_id": i, "error": "boom"}, tid),
        st.builds(lambda i: {"type": "task.cancel", "task_id": i}, tid),
    )


export_kw = st.fixed_dictionaries(
    {},
    optional={
        "memory_ids": st.lists(refs, max_size=3),
        "intent_ids": st.lists(st.sampled_from(INTENT_IDS), max_size=2),
        "task_ids": st.lists(st.sampled_from(TASK_IDS), max_size=2),
        "include_parents": st.booleans(),
        "include_children": st.booleans(),
        "include_aliases": st.booleans(),
        "include_related_tasks": st.booleans(),
        "include_related_intents": st.booleans(),
    },
)
import_kw = st.fixed_dictionaries(
    {},
    optional={
        "skip_existing_ids": st.booleans(),
        "shallow_compare_existing": st.booleans(),
        "re_id_on_difference": st.booleans(),
    },
)
slices = st.fixed_dictionaries(
    {},
    optional={
        "memories": st.lists(items(), max_size=3),
        "edges": st.lists(edges(), max_size=2),
        "intents": st.lists(intent, max_size=2),
        "tasks": st.lists(task, max_size=2),
    },
)
ENVELOPE_TS = [
    "2025-06-15T00:00:00.000Z",
    "2025-06-15T00:00:00Z",
    "2025-06-14T23:00:00+01:00",
    "2025-06-15T00:00:00.5Z",
    "2025-02-30T00:00:00Z",
    "bad",
    None,
]


def operations() -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    op = lambda name, **kw: st.fixed_dictionaries(kw).map(lambda a: (name, a))  # noqa: E731
    return st.one_of(
        op("command", cmd=memory_commands()),
        op("command", cmd=memory_commands()),
        op("command", cmd=memory_commands()),
        op("mark_contradiction", a=refs, b=refs, meta=st.none() | small_dict),
        op("mark_alias", a=refs, b=refs),
        op("resolve_contradiction", w=refs, l=refs, reason=st.none() | st.just("r")),
        op("cascade_retract", id=refs),
        op(
            "apply_many",
            filter=st.none() | filters(1),
            transform=st.sampled_from(TRANSFORMS),
            options=query_options,
        ),
        op(
            "bulk_adjust_scores",
            criteria=st.none() | filters(1),
            delta=st.fixed_dictionaries(
                {},
                optional={
                    "authority": st.sampled_from([0.3, -0.6]),
                    "importance": st.sampled_from([0.2, 1.5]),
                },
            ),
        ),
        op(
            "decay_importance",
            older=st.sampled_from([0, DAY, 30 * DAY]),
            factor=st.sampled_from([0.5, 1.0, 2.0, -1.0]),
        ),
        op("get_items", filter=st.none() | filters(), options=query_options),
        op("get_items", filter=st.none() | filters(), options=query_options),
        op("get_items", filter=filters(), options=query_options),
        op("get_scored_items", weights=weights, options=scored_options),
        op("get_scored_items", weights=weights, options=scored_options),
        op(
            "get_edges",
            filter=st.none()
            | st.fixed_dictionaries(
                {},
                optional={
                    "from": refs,
                    "to": refs,
                    "kind": st.sampled_from(EDGE_KINDS),
                    "min_weight": score,
                    "active_only": st.none() | st.booleans(),
                },
            ),
        ),
        op(
            "navigate",
            fn=st.sampled_from(
                [
                    "get_parents",
                    "get_children",
                    "get_related_items",
                    "get_support_tree",
                    "get_support_set",
                    "get_aliases",
                    "get_alias_group",
                    "get_dependents",
                    "get_dependents_transitive",
                    "get_item_by_id",
                ]
            ),
            id=refs,
            direction=st.sampled_from(["both", "from", "to"]),
        ),
        op(
            "integrity",
            fn=st.sampled_from(
                [
                    "get_contradictions",
                    "get_stale_items",
                    "get_stats",
                    "stringify",
                    "to_json",
                    "parse",
                ]
            ),
        ),
        op(
            "retrieve",
            weights=weights,
            policy=st.sampled_from([None, "filter", "surface"]),
            diversity=st.none() | diversity,
            budget=st.sampled_from([0, 2, 5, 100]),
            filter=st.none() | filters(1),
        ),
        op("replay", bad_ts=st.lists(st.sampled_from(ENVELOPE_TS), max_size=3)),
        op("intent", cmd=intent_commands()),
        op("task", cmd=task_commands()),
        op(
            "intent_task_query",
            which=st.sampled_from(
                ["intents", "tasks", "child_intents", "tasks_by_intent", "child_tasks"]
            ),
            key=st.sampled_from([*INTENT_IDS, *TASK_IDS]),
            filter=st.none()
            | st.fixed_dictionaries(
                {},
                optional={
                    "status": st.sampled_from(["active", "pending"]),
                    "min_priority": score,
                    "is_root": st.booleans(),
                    "has_memory_id": refs,
                    "owner": st.just("x"),
                    "intent_id": st.sampled_from(INTENT_IDS),
                    "has_input_memory_id": refs,
                },
            ),
        ),
        op("export_slice", kw=export_kw),
        op("import_slice", slice=slices, kw=import_kw, from_export=st.none() | export_kw),
    )


scripts = st.lists(operations(), min_size=1, max_size=30)


# -- running ------------------------------------------------------------------------------------


def transform(kind: str) -> Callable[[Any], dict[str, Any] | None]:
    def fn(item: Any) -> dict[str, Any] | None:
        if kind == "retract_low":
            return None if item.authority < 0.5 else {}
        if kind == "bump":
            return {"importance": 0.9}
        if kind == "skip":
            return {}
        if kind == "content":
            return {"content": {"z": 1}}
        return None if item.id in ("a", V1) else {"authority": 0.3}

    return fn


def cost(item: Any) -> float:
    return float(len(str(sorted(item.content.items()))) % 4)


class Runner:
    """One library's three graphs and the commands applied so far."""

    def __init__(self, lib: ModuleType) -> None:
        self.L = lib
        self.mem = lib.create_graph_state()
        self.intents = lib.create_intent_state()
        self.tasks = lib.create_task_state()
        self.commands: list[dict[str, Any]] = []

    def state(self) -> Any:
        L = self.L
        return (L.stringify(self.mem), self.mem, self.intents, self.tasks)

    def run(self, name: str, a: dict[str, Any]) -> Any:
        L = self.L
        s = self.mem
        if name == "command":
            r = L.apply_command(s, a["cmd"])
            self.commands.append(a["cmd"])
            self.mem = r.state
            return r
        if name in ("mark_contradiction", "mark_alias"):
            extra = {"meta": a["meta"]} if a.get("meta") is not None else {}
            r = getattr(L, name)(s, a["a"], a["b"], "judge", **extra)
            self.mem = r.state
            return r
        if name == "resolve_contradiction":
            r = L.resolve_contradiction(s, a["w"], a["l"], "judge", reason=a["reason"])
            self.mem = r.state
            return r
        if name == "cascade_retract":
            r = L.cascade_retract(s, a["id"], "x")
            self.mem = r.state
            return r
        if name == "apply_many":
            r = L.apply_many(s, a["filter"], transform(a["transform"]), "x", options=a["options"])
            self.mem = r.state
            return r
        if name == "bulk_adjust_scores":
            r = L.bulk_adjust_scores(s, a["criteria"], a["delta"], "x")
            self.mem = r.state
            return r
        if name == "decay_importance":
            r = L.decay_importance(s, a["older"], a["factor"], "x")
            self.mem = r.state
            return r
        if name == "get_items":
            return L.get_items(s, a["filter"], a["options"])
        if name == "get_scored_items":
            return L.get_scored_items(s, a["weights"], a["options"])
        if name == "get_edges":
            return L.get_edges(s, a["filter"])
        if name == "navigate":
            fn, i = a["fn"], a["id"]
            if fn == "get_related_items":
                return L.get_related_items(s, i, a["direction"])
            if fn == "get_dependents_transitive":
                return L.get_dependents(s, i, transitive=True)
            return getattr(L, fn)(s, i)
        if name == "integrity":
            fn = a["fn"]
            if fn == "parse":
                return L.stringify(L.parse(L.stringify(s, pretty=True)))
            if fn == "stringify":
                return L.stringify(s, pretty=True)
            return getattr(L, fn)(s)
        if name == "retrieve":
            scored = L.get_scored_items(s, a["weights"])
            out = [scored]
            if a["policy"] == "filter":
                out.append(L.filter_contradictions(s, scored))
            elif a["policy"] == "surface":
                out.append(L.surface_contradictions(s, scored))
                out.append(scored)  # the input, after
            if a["diversity"] is not None:
                out.append(L.apply_diversity(scored, a["diversity"]))
            out.append(
                L.smart_retrieve(
                    s,
                    budget=a["budget"],
                    cost_fn=cost,
                    weights=a["weights"],
                    filter=a["filter"],
                    contradictions=a["policy"],
                    diversity=a["diversity"],
                )
            )
            out.append(
                L.get_items_by_budget(
                    s, budget=a["budget"], cost_fn=cost, weights=a["weights"], filter=a["filter"]
                )
            )
            return out
        if name == "replay":
            envs = []
            for n, c in enumerate(self.commands):
                ts = f"2025-06-15T00:00:{n % 60:02d}.{n:03d}Z" if n % 7 else ENVELOPE_TS[0]
                envs.append(
                    {
                        "id": f"env{n}",
                        "namespace": "memory",
                        "type": c["type"],
                        "ts": ts,
                        "payload": c,
                    }
                )
            for n, ts in enumerate(a["bad_ts"]):
                envs.insert(
                    n * 2 % (len(envs) + 1),
                    {
                        "id": "x",
                        "namespace": "memory",
                        "type": "t",
                        "ts": ts,
                        "payload": {
                            "type": "memory.create",
                            "item": {
                                "id": f"late{n}",
                                "scope": "s",
                                "kind": "k",
                                "content": {},
                                "author": "a",
                                "source_kind": "o",
                                "authority": 0.5,
                            },
                        },
                    },
                )
            return L.replay_commands(self.commands), L.replay_from_envelopes(envs)
        if name == "intent":
            r = L.apply_intent_command(self.intents, a["cmd"])
            self.intents = r.state
            return r
        if name == "task":
            r = L.apply_task_command(self.tasks, a["cmd"])
            self.tasks = r.state
            return r
        if name == "intent_task_query":
            w, k, f = a["which"], a["key"], a["filter"]
            if w == "intents":
                f = {k: v for k, v in (f or {}).items() if k in INTENT_FILTER_KEYS} or None
                return L.get_intents(self.intents, f)
            if w == "tasks":
                f = {k: v for k, v in (f or {}).items() if k in TASK_FILTER_KEYS} or None
                return L.get_tasks(self.tasks, f)
            if w == "child_intents":
                return L.get_child_intents(self.intents, k)
            if w == "tasks_by_intent":
                return L.get_tasks_by_intent(self.tasks, k)
            return L.get_child_tasks(self.tasks, k)
        if name == "export_slice":
            return ("unordered", L.export_slice(self.mem, self.intents, self.tasks, **a["kw"]))
        if name == "import_slice":
            sl: Any = a["slice"]
            if a["from_export"] is not None:
                sl = L.export_slice(self.mem, self.intents, self.tasks, **a["from_export"])
                sl = sl.model_dump(by_alias=True)
                # memex lists an export in its sets' order (it varies with the hash seed):
                # the same order for both, so that the import meets the same sequence.
                for key, idk in (
                    ("memories", "id"),
                    ("edges", "edge_id"),
                    ("intents", "id"),
                    ("tasks", "id"),
                ):
                    sl[key].sort(key=lambda e, idk=idk: e[idk])
                for m in sl["memories"]:  # import them changed, so that ids collide
                    m["authority"] = 1.0 - m["authority"]
            r = L.import_slice(self.mem, self.intents, self.tasks, sl, **a["kw"])
            self.mem, self.intents, self.tasks = r.mem_state, r.intent_state, r.task_state
            return r
        raise AssertionError(name)


INTENT_FILTER_KEYS = {
    "owner",
    "status",
    "statuses",
    "min_priority",
    "has_memory_id",
    "parent_id",
    "is_root",
}
TASK_FILTER_KEYS = {
    "intent_id",
    "action",
    "status",
    "statuses",
    "agent_id",
    "min_priority",
    "has_input_memory_id",
    "has_output_memory_id",
    "parent_id",
    "is_root",
}


# -- normalizing --------------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


class Normalizer:
    """Comparable data from any outcome; minted ids renamed in order of appearance."""

    def __init__(self, with_ms: bool = True) -> None:
        self.minted: dict[str, str] = {}
        self.with_ms = with_ms  # False: the clock was not frozen (stored logs)

    def _id(self, s: str) -> str:
        def rename(m: re.Match[str]) -> str:
            u = m.group(0)
            if u in KNOWN:
                return u
            if u not in self.minted:
                ms = int(u[:8] + u[9:13], 16) if self.with_ms else "?"
                self.minted[u] = f"<minted{len(self.minted)}@{ms}>"
            return self.minted[u]

        return _UUID.sub(rename, s)

    def __call__(self, x: Any) -> Any:
        n = self
        if isinstance(x, BaseException):
            return ("raised", type(x).__name__, n._id(str(x)))
        if isinstance(x, bool) or x is None or isinstance(x, int):
            return x
        if isinstance(x, float):
            return "nan" if math.isnan(x) else x
        if isinstance(x, str):
            return n._id(x)
        if isinstance(x, tuple) and len(x) == 2 and x[0] == "unordered":
            exp = x[1]
            return (
                "export",
                [
                    sorted(map(repr, n(getattr(exp, k))))
                    for k in ("memories", "edges", "intents", "tasks")
                ],
            )
        if isinstance(x, BaseModel):
            return (_cls(x), {k: n(v) for k, v in x.__dict__.items()})
        if hasattr(x, "_asdict"):  # a NamedTuple
            return ("tuple", _cls(x), [n(v) for v in x])
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            if type(x).__name__ == "GraphState":
                return (
                    "GraphState",
                    [(n(k), n(v)) for k, v in x.items.items()],
                    [(n(k), n(v)) for k, v in x.edges.items()],
                )
            if type(x).__name__ == "IntentState":
                return ("IntentState", [(n(k), n(v)) for k, v in x.intents.items()])
            if type(x).__name__ == "TaskState":
                return ("TaskState", [(n(k), n(v)) for k, v in x.tasks.items()])
            return (_cls(x), {f.name: n(getattr(x, f.name)) for f in dataclasses.fields(x)})
        if isinstance(x, Mapping):
            return {n(k): n(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [n(v) for v in x]
        raise TypeError(f"cannot normalize {type(x)!r}")


def _cls(x: Any) -> str:
    return type(x).__name__.split("[", 1)[0]


def outcome(run: Callable[[], Any], norm: Normalizer) -> Any:
    try:
        return norm(run())
    except Exception as exc:  # an error is an outcome, compared like any other
        return norm(exc)


def compare(script: list[tuple[str, dict[str, Any]]], seed: ModuleType, ours: ModuleType) -> None:
    """Run ``script`` through both libraries; AssertionError at the first difference."""
    a, b = Runner(seed), Runner(ours)
    na, nb = Normalizer(), Normalizer()
    for step, (name, args) in enumerate(script):
        got_a = outcome(lambda n=name, g=args: a.run(n, g), na)
        got_b = outcome(lambda n=name, g=args: b.run(n, g), nb)
        assert got_b == got_a, _diff(f"step {step}: {name} {args!r}", got_a, got_b)
        sa, sb = na(a.state()), nb(b.state())
        assert sb == sa, _diff(f"state after step {step}: {name} {args!r}", sa, sb)


def _diff(where: str, seed: Any, ours: Any) -> str:
    return f"{where}\n  memex:     {str(seed)[:1500]}\n  memstream: {str(ours)[:1500]}"
