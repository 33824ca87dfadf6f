"""The derived topic LOG.memex on a real Kafka log: what the projector publishes, read back
as JSON and replayed by memex-python (the port of the TypeScript replay), reaches the
projector's own fold, stringify for stringify; across restarts each envelope is published
once."""

from __future__ import annotations

import json
from typing import Any

import memex
import pytest

from producers.memex_store import MemexStore
from projector.graph.serialization import stringify
from projector.memex_topic import memex_topic
from projector.service import Projector
from tests.projector.test_projector_kafka import read_topic

OBS = {"scope": "s", "kind": "observation", "author": "agent", "source_kind": "observed"}


def _envelopes(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    return [json.loads(value) for _, value, _ in read_topic(bootstrap, memex_topic(topic))]


def _write(store: Any, round_: int) -> None:
    p = f"r{round_}-"
    for i in range(6):
        store.create(
            id=f"{p}{i}",
            content={"i": i},
            authority=0.5 + i / 20,
            importance=0.4,
            parents=[f"{p}{i - 1}"] if i else None,
            **OBS,
        )
    store.update(f"{p}1", {"content": {"w": 1}, "meta": {"m": 1}}, "agent")
    store.mark_contradiction(f"{p}2", f"{p}3", "judge")
    store.resolve_contradiction(f"{p}3", f"{p}2", "judge", reason="newer")
    store.mark_alias(f"{p}4", f"{p}5", "agent")
    store.bulk_adjust_scores({"ids": [f"{p}0", f"{p}5"]}, {"importance": 0.3}, "agent")
    store.apply_many({"ids": [f"{p}4"]}, lambda item: {"importance": 0.1}, "agent")
    store.cascade_retract(f"{p}3", "agent")
    store.apply(
        {
            "type": "edge.create",
            "edge": {
                "edge_id": f"{p}e",
                "from": f"{p}0",
                "to": f"{p}1",
                "kind": "SUPPORTS",
                "author": "a",
                "source_kind": "observed",
                "authority": 1,
                "active": True,
            },
        }
    )
    store.apply({"type": "edge.retract", "edge_id": f"{p}e", "author": "a"})
    store.apply_intent(
        {
            "type": "intent.create",
            "intent": {
                "id": f"{p}i",
                "label": "g",
                "priority": 0.5,
                "owner": "o",
                "status": "active",
            },
        }
    )
    store.apply_intent({"type": "intent.pause", "intent_id": f"{p}i", "author": "o"})
    store.apply_task(
        {
            "type": "task.create",
            "task": {
                "id": f"{p}t",
                "intent_id": f"{p}i",
                "action": "a",
                "priority": 0.5,
                "status": "pending",
            },
        }
    )
    store.apply_task({"type": "task.start", "task_id": f"{p}t", "agent_id": "ag"})
    store.import_slice(
        {"memories": [{"id": f"{p}0", "authority": 0.1, "content": {"x": 1}, **OBS}]},
        skip_existing_ids=False,
    )
    with pytest.raises(Exception):  # noqa: B017  a rejected command publishes nothing
        store.retract("never-there", "agent")


@pytest.mark.kafka
def test_replaying_the_memex_topic_reaches_the_projectors_fold(
    kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    location = f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}"
    with MemexStore.open(location) as store:
        _write(store, 0)
        first = Projector(location, every_records=5)
        first.run(until_caught_up=True)
        _write(store, 1)  # more records; a new projector resumes from the snapshot
        final = Projector(location, every_records=5).run(until_caught_up=True)
        published = _envelopes(kafka_bootstrap, unique_name)

    # Each (seq, n) once, in log order: the resumed projector repeated nothing.
    ids = [e["id"] for e in published]
    assert len(ids) == len(set(ids)) and [e["ts"] for e in published] == sorted(
        e["ts"] for e in published
    )
    memory = [e for e in published if e["namespace"] == "memory"]
    replayed = memex.replay_from_envelopes(memory)
    assert replayed.skipped == []
    assert memex.stringify(replayed.state) == stringify(final.graph)
    intents = memex.create_intent_state()
    tasks = memex.create_task_state()
    for e in published:
        if e["namespace"] == "intent":
            intents = memex.apply_intent_command(intents, e["payload"]).state
        elif e["namespace"] == "task":
            tasks = memex.apply_task_command(tasks, e["payload"]).state
    assert [i.model_dump() for i in intents.intents.values()] == [
        i.model_dump() for i in final.intents.intents.values()
    ]
    assert [t.model_dump() for t in tasks.tasks.values()] == [
        t.model_dump() for t in final.tasks.tasks.values()
    ]
    assert intents.intents["r0-i"].status == "paused" and tasks.tasks["r1-t"].attempt == 1
