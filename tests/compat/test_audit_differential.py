"""Differential property tests of the audit memory: random event logs through
audit-ready-memory 0.0.2 and memstream's public APIs (event validation, ``replay``,
``search``, the state) give the same outcomes; a few scripts also run through both stored
``Memory`` classes (the seed's embedded database, memstream's embedded log and Kafka).

The one deliberate difference (README, Compatibility): ``MemoryState.deleted`` maps an id to
the FIRST Deletion that removed it in memstream, to the last in audit-ready-memory.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import audit_ready_memory as seed
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memstream
from producers.importers.reader_process import run_reader, serve_answer

EXAMPLES = int(os.environ.get("MEMSTREAM_COMPAT_EXAMPLES", "1200"))
IDS = [uuid.UUID(int=n, version=4) for n in range(1, 7)]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = ["tom", "cat", "vaccine", "may", "invoice", "Cat", "the", "émile", "a-b"]

text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=5).map(" ".join)
base = {
    "id": st.sampled_from(IDS),
    "timestamp": st.integers(0, 5).map(lambda n: (T0 + timedelta(minutes=n)).isoformat()),
}
optional = {"session_id": st.sampled_from(["s1", "s2"]), "actor": st.just("agent")}
message = st.fixed_dictionaries(
    {**base, "kind": st.just("message"), "speaker": st.sampled_from(["ana", ""]), "content": text},
    optional=optional,
)
document = st.fixed_dictionaries(
    {**base, "kind": st.just("document"), "name": st.just("n.txt"), "text": text}, optional=optional
)
recall = st.fixed_dictionaries(
    {
        **base,
        "kind": st.just("recall"),
        "query": st.sampled_from(["cat", ""]),
        "recalled": st.lists(st.sampled_from(IDS).map(str), max_size=3),
    },
    optional=optional,
)
deletion = st.fixed_dictionaries(
    {
        **base,
        "kind": st.just("deletion"),
        "targets": st.lists(st.sampled_from(IDS).map(str), max_size=3),
        "reason": st.sampled_from(["asked", ""]),
    },
    optional=optional,
)
events = st.lists(st.one_of(message, message, document, recall, deletion), max_size=12)
seq_modes = st.sampled_from(["dense", "dense", "dense", "none", "shuffled", "gaps"])


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception as exc:  # an error is an outcome
        return ("raised", type(exc).__name__, _first_line(exc))


def _first_line(exc: Exception) -> str:
    # pydantic's messages name the library's own model classes: compare the first line
    # only for them (the error count and model name), everything for the others.
    return str(exc).splitlines()[0] if str(exc) else ""


def _build(lib: Any, raws: list[dict[str, Any]], mode: str) -> list[Any]:
    out = []
    for n, raw in enumerate(raws):
        seq = {"dense": n, "none": None, "shuffled": (n * 7) % max(len(raws), 1), "gaps": 3 * n}[
            mode
        ]
        ev = lib.event_from_dict({**raw, "seq": seq})
        out.append(ev)
    return out


def _state(lib: Any, state: Any, raws: list[dict[str, Any]]) -> Any:
    def dump(evs: Any) -> list[Any]:
        return [lib.event_to_dict(e) for e in evs]

    stats = {str(k): (v.num_recalled, v.last_recalled_at) for k, v in state.recall_stats.items()}
    return {
        "messages": dump(state.messages),
        "documents": dump(state.documents),
        "visible_messages": dump(state.visible_messages),
        "visible_documents": dump(state.visible_documents),
        "deleted": sorted(map(str, state.deleted)),
        "recall_stats": stats,
        "last_seq": state.last_seq,
        "is_deleted": [state.is_deleted(i) for i in IDS],
        "search": [
            [str(e.id) for e in lib.search(state, q, limit=lim)]
            for q in ("cat", "tom vaccine", "CAT", "émile", "a-b", "nothing")
            for lim in (1, 5)
        ],
    }


def _deletion_rule(lib: Any, state: Any, built: list[Any], first: bool) -> None:
    """Each deleted id maps to the first (memstream) or last (the seed) Deletion naming it."""
    for target, deletion in state.deleted.items():
        naming = [e for e in built if e.kind == "deletion" and target in e.targets]
        want = naming[0] if first else naming[-1]
        assert deletion.id == want.id


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 1200,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(raws=events, mode=seq_modes)
def test_random_audit_logs_replay_as_audit_ready_memory(
    raws: list[dict[str, Any]], mode: str
) -> None:
    built_seed = _outcome(lambda: _build(seed, raws, mode))
    built_ours = _outcome(lambda: _build(memstream, raws, mode))
    assert built_ours[0] == built_seed[0]
    if built_seed[0] != "ok":
        assert built_ours == built_seed
        return
    assert [memstream.event_to_dict(e) for e in built_ours[1]] == [
        seed.event_to_dict(e) for e in built_seed[1]
    ]
    got_seed = _outcome(lambda: seed.replay(built_seed[1]))
    got_ours = _outcome(lambda: memstream.replay(built_ours[1]))
    assert got_ours[0] == got_seed[0]
    if got_seed[0] != "ok":
        assert got_ours == got_seed
        return
    assert _state(memstream, got_ours[1], raws) == _state(seed, got_seed[1], raws)
    _deletion_rule(memstream, got_ours[1], built_ours[1], first=True)
    _deletion_rule(seed, got_seed[1], built_seed[1], first=False)


# -- stored: the seed's Memory beside memstream's, embedded and on Kafka ----------------------

STORED = [
    ("message", "ana", "my cat is called Tom"),
    ("document", "vet.txt", "Tom is due for a vaccine in May"),
    ("recall", "cat", None),
    ("message", "bob", "the invoice is paid"),
    ("delete", 0, None),
    ("recall", "tom vaccine", None),
    ("delete_bad", None, None),
    ("recall_bad", None, None),
    ("message", "", "empty speaker"),
    ("recall", "invoice", None),
]


def _run_stored(lib: Any, memory: Any) -> list[Any]:
    out: list[Any] = []
    added: list[Any] = []
    for op, a, b in STORED:
        if op == "message":
            got = _outcome(lambda a=a, b=b: memory.add_message(lib.Message(speaker=a, content=b)))
        elif op == "document":
            got = _outcome(lambda a=a, b=b: memory.add_document(lib.Document(name=a, text=b)))
        elif op == "recall":
            got = _outcome(lambda a=a: memory.recall(a, limit=2))
            if got[0] == "ok":
                rec, found = got[1]
                seqs = {e.id: e.seq for e in memory.events()}
                got = ("ok", (rec.seq, [seqs[i] for i in rec.recalled], [e.seq for e in found]))
        elif op == "delete":
            got = _outcome(lambda a=a: memory.delete([added[a].id], "asked", requested_by="ana"))
        elif op == "delete_bad":
            got = _outcome(lambda: memory.delete([uuid.uuid4()], "asked"))
        else:
            got = _outcome(
                lambda: memory.record_recall(lib.Recall(query="q", recalled=(uuid.uuid4(),)))
            )
        if got[0] == "ok" and hasattr(got[1], "seq") and hasattr(got[1], "kind"):
            if got[1].kind in ("message", "document"):
                added.append(got[1])
            got = ("ok", got[1].kind, got[1].seq)
        out.append(got[:2] if got[0] == "raised" else got)
    state = memory.replay()
    past = memory.replay(up_to_seq=2)
    out.append(
        (
            state.last_seq,
            [e.seq for e in state.visible_messages],
            [e.seq for e in state.visible_documents],
            len(state.deleted),
            past.last_seq,
            [e.seq for e in past.visible_messages],
        )
    )
    out.append([(e.kind, e.seq) for e in memory.events()])
    out.append([(e.kind, e.seq) for e in memory.events(kind="recall", after_seq=2)])
    return out


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def _seed_stored_here(args: list[str]) -> list[Any]:
    (path,) = args
    memory = seed.Memory(path)
    try:
        return _run_stored(seed, memory)
    finally:
        memory.close()


@pytest.fixture(scope="module")
def seed_stored(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The script's outcomes in the seed's stored Memory (as JSON), run in a child process:
    its database runs ArcadeDB's JVM, which the test process never hosts (see
    `tests/producers/seed_sources.py`)."""
    path = str(tmp_path_factory.mktemp("seed") / "db")
    module = "tests.compat.test_audit_differential"
    return run_reader(module, [path], limit=1 << 20, what="the seed's stored Memory")  # type: ignore[no-any-return]


def test_stored_embedded_behaves_as_the_seed(seed_stored: list[Any], tmp_path: Path) -> None:
    with memstream.Memory(tmp_path / "db") as memory:
        assert _json(_run_stored(memstream, memory)) == seed_stored


@pytest.mark.kafka
def test_stored_kafka_behaves_as_the_seed(
    seed_stored: list[Any], kafka_bootstrap: str, redis_url: str, unique_name: str
) -> None:
    with memstream.Memory(f"kafka://{kafka_bootstrap}/{unique_name}?redis={redis_url}") as m:
        assert _json(_run_stored(memstream, m)) == seed_stored


if __name__ == "__main__":  # the child of `seed_stored`
    raise SystemExit(serve_answer(sys.argv[1:], _seed_stored_here))
