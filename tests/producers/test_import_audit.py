"""`import_audit_ready_memory`: a database written by audit-ready-memory itself, appended to
a memstream log (embedded and Kafka), checked against the seed's own replay and search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from producers.importers import (
    CorruptSourceError,
    ImportConflictError,
    LogNotEmptyError,
    SourceNotFoundError,
    UnsupportedSourceError,
    import_audit_ready_memory,
)
from producers.memory import Memory
from queryd.audit import search
from schemas.audit import Message, event_to_dict
from tests.producers.seed_sources import (
    copy_db,
    recall_stats,
    sql,
    write_audit_ready_memory,
)
from tests.producers.seed_sources import seed_view as read_seed_view

pytest.importorskip("audit_ready_memory")
pytest.importorskip("arcadedb_embedded")


@pytest.fixture(scope="module")
def seed_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("seed") / "audit-db"
    write_audit_ready_memory(path)
    return path


QUERIES = ["invoice cat", "budget report", "the document", "garden note 7", "vaccine"]


@pytest.fixture(scope="module")
def seed_view(seed_db: Path) -> dict[str, Any]:
    """The seed's own reading of its database (JSON): events, replay, search answers."""
    return read_seed_view(seed_db, QUERIES)


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


def test_import_keeps_everything_the_seed_has(seed_db, seed_view, memory_location):  # type: ignore[no-untyped-def]
    seed_events = seed_view["events"]
    report = import_audit_ready_memory(seed_db, memory_location)
    assert report.read == report.appended == len(seed_events)
    assert report.skipped == [] and report.already == 0
    assert report.verified is not None and "search answers equal" in report.verified
    with Memory(memory_location) as memory:
        events = memory.events()
        # ids, order, timestamps, sessions, actors, sources, retain_until, recall and
        # deletion targets: the seed's JSON of each event, seq included (a fresh log).
        assert [_json(event_to_dict(e)) for e in events] == seed_events
        state = memory.replay()
    assert [str(m.id) for m in state.visible_messages] == seed_view["messages"]
    assert [str(d.id) for d in state.visible_documents] == seed_view["documents"]
    assert sorted(str(k) for k in state.deleted) == seed_view["deleted"]
    assert recall_stats(state) == seed_view["recall_stats"]
    assert state.last_seq == seed_view["last_seq"]
    for query, ids in seed_view["answers"].items():
        assert [str(x.id) for x in search(state, query, limit=5)] == ids, query


def test_interrupted_import_resumes_without_duplicates(seed_db, tmp_path):  # type: ignore[no-untyped-def]
    location = str(tmp_path / "log")
    calls = []

    def stop_after_two_batches(done: int, total: int) -> None:
        calls.append(done)
        if done >= 10:
            raise KeyboardInterrupt  # the user's Ctrl-C between two batches

    with pytest.raises(KeyboardInterrupt):
        import_audit_ready_memory(seed_db, location, batch_size=5, progress=stop_after_two_batches)
    with Memory(location) as memory:
        assert len(memory) == 10
    # The same command again, without --append: the log holds only this source's events.
    report = import_audit_ready_memory(seed_db, location, batch_size=5)
    assert report.already == 10
    assert report.appended == report.read - 10
    with Memory(location) as memory:
        ids = [e.id for e in memory.events()]
    assert len(ids) == len(set(ids)) == report.read
    assert report.verified is not None
    # And once more: nothing left to do.
    again = import_audit_ready_memory(seed_db, location)
    assert again.appended == 0 and again.already == report.read


def test_refuses_a_log_holding_other_records_unless_append(seed_db, tmp_path):  # type: ignore[no-untyped-def]
    location = str(tmp_path / "log")
    with Memory(location) as memory:
        memory.add_message(Message(speaker="ops", content="already here"))
    with pytest.raises(LogNotEmptyError, match=r"1 record\(s\) that are not from .*--append"):
        import_audit_ready_memory(seed_db, location)
    with Memory(location) as memory:
        assert len(memory) == 1
    report = import_audit_ready_memory(seed_db, location, append=True)
    assert report.first_seq == 1 and report.appended == report.read
    assert report.verified is not None
    with Memory(location) as memory:
        assert memory.events()[0].content == "already here"  # type: ignore[union-attr]


def test_an_id_already_in_the_log_with_other_content_is_a_conflict(seed_db, seed_view, tmp_path):  # type: ignore[no-untyped-def]
    seed_events = seed_view["events"]
    location = str(tmp_path / "log")
    with Memory(location) as memory:
        memory.add_message(Message(id=seed_events[3]["id"], speaker="x", content="forged"))
    with pytest.raises(ImportConflictError, match=f"seq 3 \\(id {seed_events[3]['id']}\\)"):
        import_audit_ready_memory(seed_db, location, append=True)
    with Memory(location) as memory:
        assert len(memory) == 1


def _nothing_appended(location: Path) -> None:
    if location.exists():
        with Memory(str(location)) as memory:
            assert len(memory) == 0


def test_missing_source(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="no such directory"):
        import_audit_ready_memory(tmp_path / "nope", str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


def test_not_an_arcadedb_directory(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "schema.json").write_text("{not json")
    with pytest.raises(CorruptSourceError, match="schema.json is not JSON"):
        import_audit_ready_memory(tmp_path / "src", str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


def test_unsupported_layout(seed_db: Path, tmp_path: Path) -> None:
    src = copy_db(seed_db, tmp_path / "src")
    sql(src, "ALTER TYPE MemoryEvent NAME Event")
    with pytest.raises(UnsupportedSourceError, match="no type 'MemoryEvent'"):
        import_audit_ready_memory(src, str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


def test_unsupported_arcadedb_version(seed_db: Path, tmp_path: Path) -> None:
    import json

    src = copy_db(seed_db, tmp_path / "src")
    schema = json.loads((src / "schema.json").read_text())
    schema["dbmsVersion"] = "99.1.0"
    (src / "schema.json").write_text(json.dumps(schema))
    with pytest.raises(UnsupportedSourceError, match="written by ArcadeDB '99.1.0'"):
        import_audit_ready_memory(src, str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            "UPDATE MemoryEvent SET payload = '{broken' WHERE seq = 7",
            r"seq 7 .*payload is not JSON",
        ),
        ("DELETE FROM MemoryEvent WHERE seq = 4", r"seq 4: missing: the source jumps from seq 3"),
        (
            "UPDATE MemoryEvent SET kind = 'document' WHERE seq = 2",
            r"seq 2 .*column kind is 'document' but the payload says 'message'",
        ),
    ],
)
def test_a_damaged_record_is_named_and_nothing_is_appended(  # type: ignore[no-untyped-def]
    seed_db, tmp_path, damage, message
):
    src = copy_db(seed_db, tmp_path / "src")
    sql(src, damage)
    with pytest.raises(CorruptSourceError, match=message):
        import_audit_ready_memory(src, str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


def test_skip_bad_reports_each_skip_and_what_depended_on_it(seed_db, seed_view, tmp_path):  # type: ignore[no-untyped-def]
    seed_events = seed_view["events"]
    deletion = next(e for e in seed_events if e["kind"] == "deletion" and len(e["targets"]) == 2)
    target = deletion["targets"][0]
    target_seq = next(e["seq"] for e in seed_events if e["id"] == target)
    src = copy_db(seed_db, tmp_path / "src")
    sql(src, f"UPDATE MemoryEvent SET payload = 'garbage' WHERE seq = {target_seq}")
    with pytest.raises(CorruptSourceError):
        import_audit_ready_memory(src, str(tmp_path / "log"))
    report = import_audit_ready_memory(src, str(tmp_path / "log"), skip_bad=True)
    wheres = [s.where for s in report.skipped]
    assert wheres[0].startswith(f"seq {target_seq} ")
    assert f"seq {deletion['seq']} (id {deletion['id']})" in wheres  # its tombstone names it
    assert report.appended == report.read - len(report.skipped)
    assert report.verified is not None


def _payload(src: Path, seq: int) -> dict:  # type: ignore[type-arg]
    import json

    from tests.producers.seed_sources import audit_rows

    row = next(r for r in audit_rows(src) if r["seq"] == seq)
    return json.loads(row["payload"])


def _set_payload(src: Path, seq: int, payload: dict) -> None:  # type: ignore[type-arg]
    import json

    text = json.dumps(payload).replace("\\", "\\\\").replace("'", "\\'")
    sql(src, f"UPDATE MemoryEvent SET payload = '{text}' WHERE seq = {seq}")


def test_a_recall_naming_an_unknown_id_is_named(seed_db, seed_view, tmp_path):  # type: ignore[no-untyped-def]
    recall = next(e for e in seed_view["events"] if e["kind"] == "recall")
    src = copy_db(seed_db, tmp_path / "src")
    payload = _payload(src, recall["seq"])
    payload["recalled"] = ["00000000-0000-4000-8000-000000000001"]
    _set_payload(src, recall["seq"], payload)
    with pytest.raises(
        CorruptSourceError,
        match=f"seq {recall['seq']} \\(id {recall['id']}\\): recalled: unknown id 00000000-",
    ):
        import_audit_ready_memory(src, str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


def test_an_event_over_the_record_size_limit_is_named(seed_db, tmp_path):  # type: ignore[no-untyped-def]
    src = copy_db(seed_db, tmp_path / "src")
    payload = _payload(src, 9)
    payload["content"] = "x" * (1024 * 1024)
    _set_payload(src, 9, payload)
    with pytest.raises(CorruptSourceError, match=r"seq 9 \(id .*over the limit of 983,040 bytes"):
        import_audit_ready_memory(src, str(tmp_path / "log"))
    _nothing_appended(tmp_path / "log")


def test_without_the_import_extra_the_error_says_what_to_install(seed_db, tmp_path):  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['arcadedb_embedded'] = None\n"  # as if not installed
        "from producers.importers import import_audit_ready_memory, MissingExtraError\n"
        f"try: import_audit_ready_memory({str(seed_db)!r}, {str(tmp_path / 'log')!r})\n"
        "except MissingExtraError as exc: print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'memstream[import]'" in done.stdout, done.stderr[-1000:]
    _nothing_appended(tmp_path / "log")


def _checked_while_read(
    rows: list[dict[str, Any]], batch: int, *, skip_bad: bool
) -> tuple[Any, ...] | None:
    """What the importer's checks say of `rows` fed in batches as the reader sends them
    (None: they stopped, the rows being out of seq order)."""
    from producers.importers.audit import _InOrder, _try_parse

    in_order = _InOrder(skip_bad, "src")
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        in_order.batch(start, [(r, _try_parse(r, start + i)) for i, r in enumerate(part)])
    return None if in_order.broken else in_order.result()


def _checked_after(rows: list[dict[str, Any]], *, skip_bad: bool) -> tuple[Any, ...]:
    from producers.importers.audit import check_source, parse_rows

    events, skips = parse_rows(rows, skip_bad=skip_bad, source="src")
    kept, more = check_source(events, skip_bad=skip_bad, source="src")
    return events, skips, kept, more


def test_checks_made_while_reading_equal_the_checks_after_it(seed_db, seed_view):  # type: ignore[no-untyped-def]
    """Rows checked batch by batch as they arrive in seq order give the same events and
    skips as the two passes over all rows. Rows out of order, or an error, stop the checks
    while reading (None): the importer then sorts and checks all rows after the read, and
    raises what the two passes raise."""
    from tests.producers.seed_sources import audit_rows

    rows = audit_rows(seed_db)
    recall = next(e for e in seed_view["events"] if e["kind"] == "recall")
    unknown = {
        **json.loads(rows[recall["seq"]]["payload"]),
        "recalled": ["00000000-0000-4000-8000-000000000001"],
    }
    damaged = {
        "clean": rows,
        "garbage payload": [{**r, "payload": "garbage"} if r["seq"] == 5 else r for r in rows],
        "recall of an unknown id": [
            {**r, "payload": json.dumps(unknown)} if r["seq"] == recall["seq"] else r for r in rows
        ],
    }
    for name, case in damaged.items():
        for skip_bad in (False, True):
            for batch in (1, 3, len(rows)):
                got = _checked_while_read(case, batch, skip_bad=skip_bad)
                if name != "clean" and not skip_bad:
                    assert got is None, (name, batch)
                    with pytest.raises(CorruptSourceError):
                        _checked_after(case, skip_bad=False)
                    continue
                want = _checked_after(case, skip_bad=skip_bad)
                assert got == want, (name, skip_bad, batch)
                assert bool(want[1] or want[3]) == (name != "clean"), name  # damage seen
    swapped = [rows[1], rows[0], *rows[2:]]
    assert _checked_while_read(swapped, 3, skip_bad=False) is None
    gap = rows[:3] + rows[4:]
    assert _checked_while_read(gap, 2, skip_bad=True) is None


def test_the_engines_public_reading_gives_the_same_batches(seed_db):  # type: ignore[no-untyped-def]
    """The reader takes the engine's JSON batches from arcadedb-embedded's bridge; a build
    without it is read through the public `iter_json_batches`: the same rows, in the same
    batches, the last one short."""
    from tests.producers.seed_sources import audit_rows, read_batches

    bridge = read_batches(seed_db, 7, public=False)
    assert bridge == read_batches(seed_db, 7, public=True)
    assert all(len(b) == 7 for b in bridge[:-1]) and 0 < len(bridge[-1]) <= 7
    rows = sorted((r for b in bridge for r in b), key=lambda r: r["seq"])
    assert rows == audit_rows(seed_db)
    # a last batch that is full: the next one is empty, and ends the reading
    whole = read_batches(seed_db, len(rows), public=False)
    assert [len(b) for b in whole] == [len(rows)]
