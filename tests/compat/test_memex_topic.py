"""The derived topic's envelopes: memex-python's ``replay_from_envelopes`` (the port of the
TypeScript replay, reading the same JSON envelopes) over them reaches memstream's fold,
``stringify`` for ``stringify``; the intent and task envelopes, folded with memex's
reducers, reach memstream's intents and tasks. Random scripts of commands and of the
operations the fold decides (cascade, contradictions, aliases, scores, batches, imports).
"""

from __future__ import annotations

import json
import os
from typing import Any

import memex
import time_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from producers.memex_log_store import _batch_commands, mutation_envelope
from projector.graph.dispatch import GraphOperation, GraphStates
from projector.graph.serialization import stringify
from projector.memex_topic import memex_envelopes
from projector.record_fold import BATCH, LogState, empty_state, fold_decoded
from schemas.records import OPERATION_NAMESPACE, GraphEnvelope
from tests.compat import graph_scripts as g

EXAMPLES = int(os.environ.get("MEMSTREAM_COMPAT_EXAMPLES", "1200")) // 3
LOG_OPS = {
    "command",
    "intent",
    "task",
    "mark_contradiction",
    "mark_alias",
    "resolve_contradiction",
    "cascade_retract",
    "bulk_adjust_scores",
    "apply_many",
    "decay_importance",
    "import_slice",
}
log_scripts = st.lists(g.operations().filter(lambda op: op[0] in LOG_OPS), min_size=1, max_size=25)


def _envelope(n: int, namespace: str, type_: str, payload: Any) -> GraphEnvelope:
    return GraphEnvelope(
        id=f"rec-{n}",
        namespace=namespace,
        type=type_,
        ts="2025-06-15T00:00:00.000Z",
        payload=payload,
    )


def record_of(n: int, state: LogState, name: str, a: dict[str, Any]) -> GraphEnvelope:
    """The log record a producer would append for one script operation."""
    if name in ("command", "intent", "task"):
        cmd = a["cmd"]
        ns = "memory" if name == "command" else name
        return _envelope(n, ns, cmd["type"], cmd)
    args: dict[str, Any]
    if name in ("mark_contradiction", "mark_alias"):
        args = {"item_id_a": a["a"], "item_id_b": a["b"], "author": "judge", "meta": a.get("meta")}
    elif name == "resolve_contradiction":
        args = {"winner_id": a["w"], "loser_id": a["l"], "author": "judge", "reason": a["reason"]}
    elif name == "cascade_retract":
        args = {"item_id": a["id"], "author": "x"}
    elif name == "bulk_adjust_scores":
        args = {"criteria": a["criteria"], "delta": a["delta"], "author": "x"}
    elif name == "import_slice":
        args = {"slice": a["slice"], **a["kw"]}
    else:  # apply_many, decay_importance: a batch computed on the state, as the store does
        if name == "apply_many":
            args = {
                "filter": a["filter"],
                "transform": g.transform(a["transform"]),
                "author": "x",
                "options": a["options"],
            }
        else:
            args = {"older_than_ms": a["older"], "factor": a["factor"], "author": "x"}
        try:
            states = GraphStates(state.graph, state.intents, state.tasks)
            commands = _batch_commands(states, name, args)
        except Exception:
            commands = [{"type": "memory.retract", "item_id": "never-there", "author": "x"}]
        payload = {"commands": commands, "graph_seq": state.graph_seq, "operation": name}
        return _envelope(n, OPERATION_NAMESPACE, BATCH, payload)
    env = mutation_envelope(GraphOperation(name, args))  # type: ignore[arg-type]
    return env.model_copy(update={"id": f"rec-{n}", "ts": "2025-06-15T00:00:00.000Z"})


def fold_with_topic(script: list[Any]) -> tuple[LogState, list[dict[str, Any]]]:
    state = empty_state()
    topic: list[dict[str, Any]] = []
    for seq, (name, args) in enumerate(script):
        record = record_of(seq, state, name, args)
        result = fold_decoded(state, seq, record)
        topic.extend(memex_envelopes(state, result.state, seq, record, result.lifecycle))
        state = result.state
    # What a reader gets: the JSON text of each envelope.
    return state, [json.loads(json.dumps(e)) for e in topic]


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 400,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(script=log_scripts)
def test_replay_of_the_derived_topic_reaches_memstreams_fold(script: list[Any]) -> None:
    with time_machine.travel(g.NOW_MS / 1000, tick=False):
        state, topic = fold_with_topic(script)
        memory = [e for e in topic if e["namespace"] == "memory"]
        replayed = memex.replay_from_envelopes(memory)
        assert replayed.skipped == []  # every published command applies
        assert memex.stringify(replayed.state) == stringify(state.graph)
        intents = memex.create_intent_state()
        tasks = memex.create_task_state()
        for e in topic:
            if e["namespace"] == "intent":
                intents = memex.apply_intent_command(intents, e["payload"]).state
            elif e["namespace"] == "task":
                tasks = memex.apply_task_command(tasks, e["payload"]).state
        dump = lambda m: [(k, v.model_dump(mode="json")) for k, v in m.items()]  # noqa: E731
        assert dump(intents.intents) == dump(state.intents.intents)
        assert dump(tasks.tasks) == dump(state.tasks.tasks)


def test_envelopes_are_a_function_of_the_log() -> None:
    script = [
        (
            "command",
            {
                "cmd": {
                    "type": "memory.create",
                    "item": {
                        "id": "a",
                        "scope": "s",
                        "kind": "k",
                        "content": {},
                        "author": "x",
                        "source_kind": "o",
                        "authority": 0.5,
                    },
                }
            },
        ),
        ("mark_alias", {"a": "a", "b": "b", "meta": None}),
        ("cascade_retract", {"id": "a"}),
    ]
    first = fold_with_topic(script)[1]
    assert first == fold_with_topic(script)[1]
    assert [e["type"] for e in first] == [
        "memory.create",
        "edge.create",
        "edge.create",
        "memory.retract",
    ]
    assert [e["ts"] for e in first] == [
        "1970-01-01T00:00:00.000Z",
        "1970-01-01T00:00:00.001Z",
        "1970-01-01T00:00:00.001Z",
        "1970-01-01T00:00:00.002Z",
    ]
