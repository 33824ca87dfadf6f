"""`import_memex` / `export_memex`: snapshots and envelope logs written by memex-python (the
port of the TypeScript library) in and out of a memstream log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from producers.importers import (
    CorruptSourceError,
    LogNotEmptyError,
    SourceNotFoundError,
    UnsupportedSourceError,
    export_memex,
    import_memex,
)
from producers.memex_store import MemexStore
from producers.memory import Memory
from schemas.audit import Message
from schemas.errors import LogNotFoundError

memex = pytest.importorskip("memex")


def _dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _seed_store() -> Any:
    """A memex-python store with parents, edges, a contradiction, a retraction (whose
    child keeps naming it as a parent) and an update."""
    store = memex.MemexStore()
    items = [
        store.create(
            scope=f"user:{i % 3}",
            kind="observation" if i % 2 else "hypothesis",
            content={"v": i, "text": f"note {i}", "nested": {"k": [i, i + 1]}},
            author=f"agent:{i % 2}",
            source_kind="observed",
            authority=0.5 + i / 100,
            importance=0.3 if i % 4 else None,
            parents=[] if i == 0 else None,
        )
        for i in range(30)
    ]
    child = store.create(
        scope="user:0",
        kind="derivation",
        content={"from": items[0].id},
        author="agent:x",
        source_kind="derived_deterministic",
        authority=0.8,
        parents=[items[0].id, items[1].id],
    )
    store.add_edge(
        from_=child.id,
        to=items[2].id,
        kind="SUPPORTS",
        author="x",
        source_kind="observed",
        authority=0.7,
        weight=0.5,
    )
    store.mark_contradiction(items[3].id, items[4].id, "system:detector")
    store.update(items[5].id, {"authority": 0.99}, "agent:fix", "recalibrated")
    store.retract(items[0].id, "agent:cleanup")
    return store


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, str]:
    text = _seed_store().dumps()
    path = tmp_path / "snapshot.json"
    path.write_text(text)
    return path, text


def test_snapshot_import_stringifies_as_the_source(snapshot, memory_location):  # type: ignore[no-untyped-def]
    path, text = snapshot
    report = import_memex(path, memory_location)
    data = json.loads(text)
    assert report.read == report.appended == len(data["items"]) + len(data["edges"])
    assert report.verified is not None and "stringify output identical" in report.verified
    with MemexStore.open(memory_location) as store:
        assert store.dumps() == text
        # memex-python reads the log's graph back to the same text
        assert memex.MemexStore.loads(store.dumps(pretty=True)).dumps() == text


def test_a_signed_log_refuses_imports_and_reencryption(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    """An import keeps each source record's author, and a re-encryption changes the bytes
    writers signed: both refused on a signed log with the reason, nothing written."""
    from producers.importers import SignedLogError
    from producers.reencrypt import reencrypt
    from schemas.errors import EncryptionError
    from schemas.evidence.note import NoteSigner

    path, _ = snapshot
    location = str(tmp_path / "signed")
    with Memory(location, agent_key=NoteSigner.generate("admin:root"), signed=True, key=False):
        pass
    with Memory(location, create=False, key=False) as reader:
        before = reader.log.head()
    with pytest.raises(SignedLogError, match="requires signatures: an import keeps"):
        import_memex(path, location, append=True)
    with pytest.raises(EncryptionError, match="requires signatures: a re-encrypted copy"):
        reencrypt(location, str(tmp_path / "copy"))
    assert not (tmp_path / "copy").exists()
    with Memory(location, create=False, key=False) as reader:
        assert reader.log.head() == before == 0


def test_export_round_trips_through_memex_python(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    path, text = snapshot
    location = str(tmp_path / "log")
    import_memex(path, location)
    out = tmp_path / "out.json"
    assert export_memex(location, out) == (
        len(json.loads(text)["items"]),
        len(json.loads(text)["edges"]),
    )
    assert out.read_text() == text
    assert memex.MemexStore.loads(out.read_text()).dumps() == text
    with pytest.raises(FileExistsError, match="--force"):
        export_memex(location, out)
    export_memex(location, out, pretty=True, overwrite=True)
    assert memex.parse(out.read_text()) is not None and "\n  " in out.read_text()


def test_export_never_creates_a_log(tmp_path: Path) -> None:
    with pytest.raises(LogNotFoundError):
        export_memex(str(tmp_path / "nope"), tmp_path / "out.json")
    assert not (tmp_path / "nope").exists() and not (tmp_path / "out.json").exists()


def _envelope_log(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """JSON lines of envelopes as the library writes them: memory and edge commands, one
    that fails at replay (a second retract), a lifecycle envelope that is no command, and
    intent and task commands in their namespaces."""
    a = memex.create_memory_item(
        scope="s",
        kind="observation",
        content={"v": 1},
        author="x",
        source_kind="observed",
        authority=0.9,
    )
    b = memex.create_memory_item(
        scope="s",
        kind="hypothesis",
        content={"v": 2},
        author="y",
        source_kind="agent_inferred",
        authority=0.6,
        parents=[a.id],
    )
    edge = memex.create_edge(
        from_=b.id,
        to=a.id,
        kind="DERIVED_FROM",
        author="y",
        source_kind="derived_deterministic",
        authority=1.0,
    )
    intent = memex.create_intent(label="find the cat", priority=0.5, owner="agent:x")
    task = memex.create_task(intent_id=intent.id, action="search", priority=0.4)
    commands = [
        ("memory", {"type": "memory.create", "item": _dump(a)}),
        ("memory", {"type": "memory.create", "item": _dump(b)}),
        ("memory", {"type": "edge.create", "edge": _dump(edge)}),
        (
            "memory",
            {
                "type": "memory.update",
                "item_id": b.id,
                "partial": {"importance": 0.4},
                "author": "y",
            },
        ),
        ("intent", {"type": "intent.create", "intent": _dump(intent)}),
        ("task", {"type": "task.create", "task": _dump(task)}),
        ("memory", {"type": "memory.retract", "item_id": a.id, "author": "x"}),
        ("memory", {"type": "memory.retract", "item_id": a.id, "author": "x"}),  # fails
        ("memory", {"type": "memory.created", "item": _dump(b)}),  # a lifecycle event
    ]
    envelopes = [
        memex.create_event_envelope(c["type"], c, namespace=ns).model_dump(mode="json")
        for ns, c in commands
    ]
    path = tmp_path / "envelopes.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in envelopes))
    return path, envelopes


def test_envelope_log_import_replays_as_the_source(tmp_path, memory_location):  # type: ignore[no-untyped-def]
    path, envelopes = _envelope_log(tmp_path)
    expected = memex.replay_from_envelopes(envelopes)
    assert len(expected.skipped) >= 4  # the failing retract, the lifecycle event, intent, task
    report = import_memex(path, memory_location)
    assert report.read == len(envelopes)
    skipped = {s.where.split(" ")[1]: s.reason for s in report.skipped}
    assert set(skipped) == {"8", "9"}  # lines: the second retract, the lifecycle event
    assert all(r.startswith("skipped by the source's replay too") for r in skipped.values())
    with MemexStore.open(memory_location) as store:
        assert store.dumps() == memex.stringify(expected.state)
        assert [i.label for i in store.get_intents()] == ["find the cat"]
        assert [t.action for t in store.get_tasks()] == ["search"]
    # the envelopes are in the log verbatim: ids, ts, payloads
    with Memory(memory_location) as memory:
        ids = []
        from schemas.codec import decode_record

        for seq, data in memory.log.records(0, timeout=10):
            ids.append(decode_record(data).id)  # type: ignore[union-attr]
            if seq >= report.last_seq:  # type: ignore[operator]
                break
    assert ids == [e["id"] for i, e in enumerate(envelopes) if i not in (7, 8)]


def test_interrupted_snapshot_import_resumes(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    path, text = snapshot
    location = str(tmp_path / "log")

    def stop(done: int, total: int) -> None:
        if done >= 8:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_memex(path, location, batch_size=4, progress=stop)
    report = import_memex(path, location, batch_size=4)
    assert report.already == 8 and report.appended == report.read - 8
    with MemexStore.open(location) as store:
        assert store.dumps() == text
        assert len(store.state().rejections) == 0  # no create was appended twice


def test_refuses_a_non_empty_log_unless_append(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    path, text = snapshot
    location = str(tmp_path / "log")
    with Memory(location) as memory:
        memory.add_message(Message(speaker="ops", content="already here"))
    with pytest.raises(LogNotEmptyError, match="--append"):
        import_memex(path, location)
    report = import_memex(path, location, append=True)
    assert report.first_seq == 1
    with MemexStore.open(location) as store:
        assert store.dumps() == text


def test_dangling_edge_is_named_and_nothing_is_appended(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    path, text = snapshot
    data = json.loads(text)
    edge_id, edge = data["edges"][0]
    data["edges"][0][1] = {**edge, "to": "0190ffff-0000-7000-8000-000000000000"}
    path.write_text(json.dumps(data))
    location = tmp_path / "log"
    with pytest.raises(
        CorruptSourceError,
        match=f"edges\\[0\\] \\(edge_id {edge_id}\\): 'to' names item '0190ffff-.*"
        "not in the snapshot",
    ):
        import_memex(path, str(location))
    assert not location.exists()
    report = import_memex(path, str(location), skip_bad=True)
    assert [s.where for s in report.skipped] == [f"edges[0] (edge_id {edge_id})"]
    assert report.appended == report.read - 1


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        ('{"version": 2, "items": []}', UnsupportedSourceError, "key\\(s\\) 'version'"),
        ("[1, 2]", UnsupportedSourceError, "a JSON array"),
        (
            '{"items": [["a", {"id": "b"}]]}',
            CorruptSourceError,
            r"items\[0\] \(id a\): the pair's id",
        ),
        (
            '{"items": [["a", {"id": "a", "scope": "s"}]]}',
            CorruptSourceError,
            r"items\[0\] \(id a\): .*ValidationError",
        ),
        ("", CorruptSourceError, "empty"),
    ],
)
def test_bad_snapshots(tmp_path, content, error, message):  # type: ignore[no-untyped-def]
    path = tmp_path / "src.json"
    path.write_text(content)
    with pytest.raises(error, match=message):
        import_memex(path, str(tmp_path / "log"))
    assert not (tmp_path / "log").exists()


def test_bad_envelope_lines_are_named(tmp_path: Path) -> None:
    path, envelopes = _envelope_log(tmp_path)
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:-5]  # truncated
    lines[4] = json.dumps({**envelopes[4], "id": envelopes[0]["id"]})  # a repeated id
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptSourceError, match="line 3: not JSON"):
        import_memex(path, str(tmp_path / "log"))
    assert not (tmp_path / "log").exists()
    report = import_memex(path, str(tmp_path / "log"), skip_bad=True)
    reasons = {s.where: s.reason for s in report.skipped}
    assert reasons["line 3"].startswith("not JSON")
    assert "is also that of line 1" in reasons[f"line 5 (envelope {envelopes[0]['id']})"]


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="no such file"):
        import_memex(tmp_path / "nope.json", str(tmp_path / "log"))


def test_a_full_disk_interrupts_and_the_same_import_resumes(tmp_path: Path) -> None:
    """A real fault in the middle: the log's disk fills up (a small tmpfs). The batches
    appended before stay; after the disk grows, the same import appends the rest."""
    import subprocess

    from producers.importers import ImportInterruptedError

    source = memex.MemexStore()
    for i in range(3000):
        source.create(
            scope="s",
            kind="observation",
            content={"i": i, "pad": "x" * 200},
            author="a",
            source_kind="observed",
            authority=0.5,
        )
    path = tmp_path / "snap.json"
    path.write_text(source.dumps())
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"needs root and mount(8) for a small tmpfs: {exc}")
    try:
        location = str(disk / "log")
        with pytest.raises(ImportInterruptedError, match="run the same import again") as info:
            import_memex(path, location, batch_size=100)
        done = info.value.report.appended  # type: ignore[attr-defined]
        assert 0 < done < 3000 and done % 100 == 0
        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        report = import_memex(path, location, batch_size=100)
        assert report.already == done and report.appended == 3000 - done
        with MemexStore.open(location) as store:
            assert store.dumps() == source.dumps()
            assert len(store.state().rejections) == 0
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_skip_bad_also_skips_the_edges_of_a_skipped_item(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    path, text = snapshot
    data = json.loads(text)
    edge = data["edges"][0][1]
    bad_id = edge["from"]
    index = next(i for i, (ident, _) in enumerate(data["items"]) if ident == bad_id)
    data["items"][index][1]["authority"] = 7.5  # out of range: the item does not validate
    path.write_text(json.dumps(data))
    with pytest.raises(
        CorruptSourceError, match=f"items\\[{index}\\] \\(id {bad_id}\\): .*authority"
    ):
        import_memex(path, str(tmp_path / "log"))
    report = import_memex(path, str(tmp_path / "log"), skip_bad=True)
    reasons = {s.where: s.reason for s in report.skipped}
    assert f"items[{index}] (id {bad_id})" in reasons
    assert reasons[f"edges[0] (edge_id {data['edges'][0][0]})"] == (
        f"'from' names item '{bad_id}', which was skipped"
    )
    with MemexStore.open(str(tmp_path / "log")) as store:
        assert store.item(bad_id) is None
        assert all(bad_id not in (e.from_, e.to) for e in store.edges())


def test_an_envelope_of_another_namespace_is_unsupported(tmp_path: Path) -> None:
    path, envelopes = _envelope_log(tmp_path)
    lines = path.read_text().splitlines()
    op = {**envelopes[1], "namespace": "memstream", "type": "memstream.cascade_retract"}
    lines[1] = json.dumps(op)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UnsupportedSourceError, match="line 2: namespace 'memstream'"):
        import_memex(path, str(tmp_path / "log"))
    assert not (tmp_path / "log").exists()


def test_a_bad_batch_size_creates_no_log(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    path, _ = snapshot
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        import_memex(path, str(tmp_path / "log"), batch_size=0)
    assert not (tmp_path / "log").exists()


def test_append_onto_another_graph_checks_against_it(snapshot, tmp_path):  # type: ignore[no-untyped-def]
    from producers.importers import ImportConflictError

    path, text = snapshot
    data = json.loads(text)
    location = str(tmp_path / "log")
    with MemexStore.open(location) as store:
        mine = store.create(
            scope="mine",
            kind="observation",
            content={"v": 0},
            author="me",
            source_kind="observed",
            authority=0.5,
        )
    report = import_memex(path, location, append=True)
    assert report.verified is not None and report.verified.startswith("source's entities equal")
    with MemexStore.open(location) as store:
        assert store.item(mine.id) is not None
        assert len(store.items()) == len(data["items"]) + 1

    # a second log already holding one of the snapshot's ids, with other content
    other = str(tmp_path / "other")
    taken_id, taken = data["items"][3]
    with MemexStore.open(other) as store:
        store.apply({"type": "memory.create", "item": {**taken, "content": {"not": "it"}}})
    with pytest.raises(
        ImportConflictError, match=f"items\\[3\\] \\(id {taken_id}\\): the log refuses"
    ):
        import_memex(path, other, append=True)
    with MemexStore.open(other) as store:
        assert len(store.items()) == 1  # nothing appended
    report = import_memex(path, other, append=True, skip_bad=True)
    assert [s.where for s in report.skipped] == [f"items[3] (id {taken_id})"]
