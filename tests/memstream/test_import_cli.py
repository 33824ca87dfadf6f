"""`memstream import ...` and `memstream export memex`: the report, the refusals, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memstream.cli import main
from producers.memory import Memory
from schemas.audit import Message

memex = pytest.importorskip("memex")


@pytest.fixture
def snapshot(tmp_path: Path) -> tuple[Path, str]:
    store = memex.MemexStore()
    a = store.create(
        scope="s",
        kind="observation",
        content={"v": 1},
        author="x",
        source_kind="observed",
        authority=0.9,
    )
    b = store.create(
        scope="s",
        kind="hypothesis",
        content={"v": 2},
        author="y",
        source_kind="agent_inferred",
        authority=0.5,
        parents=[a.id],
    )
    store.mark_contradiction(a.id, b.id, "sys")
    path = tmp_path / "snap.json"
    path.write_text(store.dumps(pretty=True))
    return path, store.dumps()


def test_import_memex_prints_the_report(snapshot, tmp_path, capsys):  # type: ignore[no-untyped-def]
    path, text = snapshot
    log = str(tmp_path / "log")
    assert main(["import", "memex", str(path), log]) == 0
    out = capsys.readouterr()
    assert "records read:     3" in out.out
    assert "appended:         3 (seq 0 to 2)" in out.out
    assert "stringify output identical" in out.out
    assert "3/3 records appended" in out.err  # plain progress lines off a terminal
    # again: everything is already there
    assert main(["import", "memex", str(path), log]) == 0
    assert "already in log:   3 (resumed" in capsys.readouterr().out
    out_file = tmp_path / "back.json"
    assert main(["export", "memex", log, str(out_file)]) == 0
    assert out_file.read_text() == text
    assert main(["export", "memex", log, str(out_file)]) == 1
    assert "--force" in capsys.readouterr().err


def test_import_refuses_a_non_empty_log_without_append(snapshot, tmp_path, capsys):  # type: ignore[no-untyped-def]
    path, _ = snapshot
    log = str(tmp_path / "log")
    with Memory(log) as memory:
        memory.add_message(Message(speaker="ops", content="mine"))
    assert main(["import", "memex", str(path), log]) == 1
    err = capsys.readouterr().err
    assert "memstream import: log" in err and "pass --append" in err
    assert main(["import", "memex", str(path), log, "--append"]) == 0
    assert "appended:         3 (seq 1 to 3)" in capsys.readouterr().out


def test_bad_source_exit_code_and_message(tmp_path, capsys):  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_text('{"items": [["x", {"id": "y"}]]}')
    assert main(["import", "memex", str(bad), str(tmp_path / "log")]) == 1
    assert (
        "items[0] (id x): the pair's id 'x' is not the object's id 'y'" in capsys.readouterr().err
    )
    assert not (tmp_path / "log").exists()


def test_import_audit_ready_memory_command(tmp_path: Path) -> None:
    pytest.importorskip("audit_ready_memory")
    pytest.importorskip("arcadedb_embedded")
    from tests.producers.seed_sources import write_audit_ready_memory

    src = tmp_path / "src"
    write_audit_ready_memory(src, messages=12)
    # a process of its own, as a user runs it: the JVM starts there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "memstream",
            "import",
            "audit-ready-memory",
            str(src),
            str(tmp_path / "log"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verified:         replay equal to the source's" in done.stdout
    with Memory(str(tmp_path / "log")) as memory:
        assert len(memory) == int(done.stdout.split("records read:")[1].split()[0])
    help_text = subprocess.run(
        [sys.executable, "-m", "memstream", "import", "--help"], capture_output=True, text=True
    ).stdout
    assert "audit-ready-memory" in help_text and "memex" in help_text


def test_a_source_open_in_audit_ready_memory_is_refused_and_left_intact(tmp_path: Path) -> None:
    pytest.importorskip("audit_ready_memory")
    pytest.importorskip("arcadedb_embedded")
    from tests.producers.seed_sources import hold_open, write_audit_ready_memory

    src = tmp_path / "src"
    write_audit_ready_memory(src, messages=8)
    seed = hold_open(src)  # the seed's Memory, open in a process of its own
    try:
        assert seed.stdout is not None and seed.stdin is not None
        before = json.loads(seed.stdout.readline())
        assert len(before) > 8
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "memstream",
                "import",
                "audit-ready-memory",
                str(src),
                str(tmp_path / "log"),
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 1
        assert "cannot open it read-only" in done.stderr
        assert "open in another process" in done.stderr
        seed.stdin.close()
        assert json.loads(seed.stdout.readline()) == before
    finally:
        if seed.poll() is None:
            seed.kill()
        seed.wait(timeout=60)
    assert not (tmp_path / "log").exists()
    seed = hold_open(src)  # closed cleanly: it opens again, unchanged
    assert seed.stdout is not None and seed.stdin is not None
    assert json.loads(seed.stdout.readline()) == before
    seed.stdin.close()
    assert seed.wait(timeout=120) == 0
