"""The importer's reader process: whatever the child does (a segfault, a wrong answer, an
answer too long), the caller gets an importer error naming it, and nothing is appended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from producers.importers import CorruptSourceError, arcadedb_source, import_audit_ready_memory
from producers.importers.errors import ReaderFailedError
from producers.importers.reader_process import run_reader, stream_reader
from producers.memory import Memory

CHILD = "tests.producers.reader_children"


@pytest.mark.parametrize(
    ("mode", "error", "message"),
    [
        ("segv", ReaderFailedError, r"ended by signal SIGSEGV before it answered.*the fault"),
        ("exit", ReaderFailedError, r"ended with exit status 3 before it answered"),
        ("garbage", ReaderFailedError, r"answer is not JSON"),
        ("big", ReaderFailedError, r"answer is over 1,000 bytes"),
        ("foreign-error", ReaderFailedError, r"something that is not an answer"),
        ("corrupt", CorruptSourceError, r"^seq 9: bad$"),
    ],
)
def test_a_reader_that_misbehaves_is_an_importer_error(
    mode: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message) as caught:
        run_reader(CHILD, [mode], limit=1000, what="source S")
    if error is ReaderFailedError:
        assert str(caught.value).startswith("source S: ")


def test_a_reader_that_crashes_appends_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("arcadedb_embedded")
    source = tmp_path / "src"
    source.mkdir()
    (source / "schema.json").write_text(
        '{"dbmsVersion": "26.10.2", "types": {"MemoryEvent": {"properties": '
        '{"id": {}, "seq": {}, "kind": {}, "payload": {}}}}}'
    )
    location = str(tmp_path / "log")
    with Memory(location) as memory:
        memory.add_message(memory_message := _message())
    real = arcadedb_source.stream_reader

    for mode in ("segv", "part-then-segv"):  # before any batch, and after one was parsed

        def crashing(module: str, args: list[str], mode: str = mode, **kwargs: Any) -> Any:
            return real(CHILD, [mode], **kwargs)

        monkeypatch.setattr(arcadedb_source, "stream_reader", crashing)
        with pytest.raises(ReaderFailedError, match=f"database {source}: the reader process"):
            import_audit_ready_memory(source, location, append=True)
    with Memory(location) as memory:
        assert [e.id for e in memory.events()] == [memory_message.id]


def test_rows_that_are_not_rows_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("arcadedb_embedded")
    source = tmp_path / "src"
    source.mkdir()
    (source / "schema.json").write_text(
        '{"dbmsVersion": "26.10.2", "types": {"MemoryEvent": {"properties": '
        '{"id": {}, "seq": {}, "kind": {}, "payload": {}}}}}'
    )
    real = arcadedb_source.stream_reader
    for mode, said in [
        ("rows", "the rows read are not rows"),
        ("miscount", "the reader says it read 2 rows, but sent 1"),
    ]:
        monkeypatch.setattr(
            arcadedb_source,
            "stream_reader",
            lambda module, args, mode=mode, **kw: real(CHILD, [mode], **kw),
        )
        with pytest.raises(CorruptSourceError, match=said):
            arcadedb_source.read_memory_events(source)


def test_a_reader_that_streams_parts_then_more_after_its_answer() -> None:
    parts = stream_reader(CHILD, ["after"], limit=1000, what="source S")
    with pytest.raises(ReaderFailedError, match="^source S: the reader sent more after its"):
        list(parts)
    # a streaming child is not an answer to run_reader
    with pytest.raises(ReaderFailedError, match="something that is not an answer"):
        run_reader(CHILD, ["miscount"], limit=1000, what="source S")


def test_parts_sent_as_the_engines_json_text_arrive_as_that_json() -> None:
    """A `JsonText` part goes out as it is when it is one line of UTF-8, and written again
    when it is not (a lone surrogate, several lines); the parent parses each line, so text
    that is not JSON is refused there."""
    import json

    from tests.producers.reader_children import TEXTS

    parts = stream_reader(CHILD, ["text"], limit=10_000, what="source S")
    got = []
    try:
        while True:
            got.append(next(parts))
    except StopIteration as end:
        assert end.value == 4
    assert got == [json.loads(text) for text in TEXTS]
    assert got[2][0]["payload"] == "half \ud800 pair"
    with pytest.raises(ReaderFailedError, match="answer is not JSON"):
        list(stream_reader(CHILD, ["bad-text"], limit=1000, what="source S"))


def _message() -> Any:
    from schemas.audit import Message

    return Message(speaker="ops", content="already here")
