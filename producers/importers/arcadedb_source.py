"""Reading an audit-ready-memory database: its ArcadeDB directory, through
``arcadedb-embedded`` (the optional extra ``memstream[import]``), opened read-only.

audit-ready-memory 0.0.x keeps its log as documents of one type, ``MemoryEvent``, with the
properties ``id``, ``seq``, ``kind``, ``timestamp``, ``session_id`` and ``payload`` (the
event as ``event_to_dict`` JSON). That layout is what this reader supports; any other is
refused as unsupported before the engine is started.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

from producers.importers.errors import (
    CorruptSourceError,
    MissingExtraError,
    SourceNotFoundError,
    UnsupportedSourceError,
)
from producers.importers.reader_process import (
    JsonText,
    answer_limit,
    serve_stream,
    stream_reader,
)

__all__ = [
    "iter_memory_event_batches",
    "read_memory_events",
    "check_layout",
    "EVENT_TYPE",
    "REQUIRED_PROPERTIES",
]

log = logging.getLogger("memstream.import.arcadedb")

EVENT_TYPE = "MemoryEvent"
REQUIRED_PROPERTIES = ("id", "seq", "kind", "payload")
_COLUMNS = ("seq", "id", "kind", "payload")
MAX_SCHEMA_BYTES = 1024 * 1024  # schema.json of a one-type database is about 1 KB
# The ArcadeDB releases whose databases this reader opens: those of the engine it runs
# (audit-ready-memory 0.0.2 requires arcadedb-embedded 26.8.1 or later). schema.json's
# "schemaVersion" is a change counter, not a format version; "dbmsVersion" names the
# release that wrote the database.
SUPPORTED_DBMS_MAJOR = 26
_MISSING_EXTRA = (
    "reading an audit-ready-memory database needs arcadedb-embedded: "
    "pip install 'memstream[import]'"
)


def check_layout(path: Path) -> dict[str, Any]:
    """Check, from ``schema.json`` alone, that `path` is an audit-ready-memory database of
    a layout this reader supports; returns the parsed schema."""
    if not path.exists():
        raise SourceNotFoundError(f"audit-ready-memory database {path}: no such directory")
    if not path.is_dir():
        raise SourceNotFoundError(
            f"audit-ready-memory database {path}: not a directory (an ArcadeDB database is one)"
        )
    schema_file = path / "schema.json"
    if not schema_file.is_file():
        raise CorruptSourceError(
            f"audit-ready-memory database {path}: no schema.json; not an ArcadeDB database"
        )
    try:
        raw = schema_file.read_bytes()[: MAX_SCHEMA_BYTES + 1]
    except OSError as exc:
        raise CorruptSourceError(f"audit-ready-memory database {path}: {exc}") from None
    if len(raw) > MAX_SCHEMA_BYTES:
        raise CorruptSourceError(
            f"audit-ready-memory database {path}: schema.json is over {MAX_SCHEMA_BYTES} bytes"
        )
    try:
        schema = json.loads(raw)
    except ValueError as exc:
        raise CorruptSourceError(
            f"audit-ready-memory database {path}: schema.json is not JSON ({exc})"
        ) from None
    if not isinstance(schema, dict):
        raise CorruptSourceError(
            f"audit-ready-memory database {path}: schema.json is not an object"
        )
    dbms = schema.get("dbmsVersion")
    major = dbms.split(".", 1)[0] if isinstance(dbms, str) else None
    if major != str(SUPPORTED_DBMS_MAJOR):
        raise UnsupportedSourceError(
            f"audit-ready-memory database {path}: written by ArcadeDB {dbms!r}; this "
            f"importer reads databases of ArcadeDB {SUPPORTED_DBMS_MAJOR}.x (as "
            "audit-ready-memory 0.0.x writes them)"
        )
    types = schema.get("types")
    event_type = types.get(EVENT_TYPE) if isinstance(types, dict) else None
    if not isinstance(event_type, dict):
        raise UnsupportedSourceError(
            f"audit-ready-memory database {path}: no type {EVENT_TYPE!r}; not the layout of "
            "audit-ready-memory 0.0.x (one MemoryEvent document per event)"
        )
    properties = event_type.get("properties")
    missing = [
        p for p in REQUIRED_PROPERTIES if not isinstance(properties, dict) or p not in properties
    ]
    if missing:
        raise UnsupportedSourceError(
            f"audit-ready-memory database {path}: type {EVENT_TYPE} has no propert"
            f"{'y' if len(missing) == 1 else 'ies'} {', '.join(map(repr, missing))}; not the "
            "layout of audit-ready-memory 0.0.x"
        )
    return schema


# How the reader process starts the engine's JVM: the C1 compiler only. A read is one
# short scan, which C2's warm-up slows rather than speeds (measured on a 100k-event
# database: 2.0-3.5 s from start to rows against 4.4-4.7 s).
JVM_ARGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
READ_BATCH = 5000  # rows a part: the importer checks one while the engine reads the next


def open_read_only(path: Path) -> Any:
    """The database at `path`, opened read-only by ArcadeDB in this process (which starts
    the JVM). Only the reader process calls it: see `read_memory_events`."""
    try:
        import arcadedb_embedded
        import jpype
        from arcadedb_embedded import jvm
    except ImportError as exc:
        raise MissingExtraError(_MISSING_EXTRA) from exc
    try:
        if not jpype.isJVMStarted():
            jvm.start_jvm(jvm_args=JVM_ARGS)
        factory = arcadedb_embedded.DatabaseFactory(str(path))
        mode = jpype.JClass("com.arcadedb.engine.ComponentFile$MODE").READ_ONLY
        # Read-only: an import never changes its source (arcadedb_embedded's own open()
        # opens for writing).
        return arcadedb_embedded.core.Database(factory._java_factory.open(mode))
    except Exception as exc:  # the engine raises Java exceptions through JPype
        cause = _first_line(exc)
        hint = ""
        if "needs recovery" in cause:
            # What a database open in a running audit-ready-memory looks like, too.
            hint = (
                " (it is open in another process, or was not closed cleanly: close it, or "
                "open and close it once with audit-ready-memory to recover it, then import)"
            )
        raise CorruptSourceError(
            f"audit-ready-memory database {path}: ArcadeDB cannot open it read-only: {cause}{hint}"
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:500] if text else type(exc).__name__


def _json_batches(result: Any, size: int) -> Iterator[tuple[int, JsonText]]:
    """(rows, their JSON text) of `result`, `size` rows at a time, as the engine serializes
    them (one JVM crossing a batch): the reader process sends the text on as it is. The
    rows are parsed here only to count them (a short batch is the last)."""
    batcher = _row_batcher()
    java_result = getattr(result, "_java_result_set", None)
    if batcher is None or java_result is None:  # another build: the public reading
        for rows in result.iter_json_batches(batch_size=size):
            yield len(rows), JsonText(json.dumps(rows, ensure_ascii=True))
        return
    try:
        while True:
            text = JsonText(str(batcher.nextJsonBatch(java_result, size)))
            rows = json.loads(text)
            if not isinstance(rows, list):
                raise CorruptSourceError(f"the engine's batch is {type(rows).__name__}, not rows")
            if rows:
                yield len(rows), text
            if len(rows) < size:  # a short batch is the last
                return
    finally:
        result.close()  # idempotent: the bridge closed it after a short batch


def _row_batcher() -> Any:
    """arcadedb_embedded's own batch serializer (`RowBatcher`, the Java half of its
    `ResultSet.iter_json_batches`), or None when this engine has none."""
    try:
        import jpype

        return jpype.JClass("com.arcadedb.python.RowBatcher")
    except Exception:  # no such class in this build: the public path instead
        return None


def read_rows_here(path: Path, batch: int = READ_BATCH) -> Generator[JsonText, None, int]:
    """The ``MemoryEvent`` rows of the database at `path`, read by ArcadeDB in this process
    (the reader process's half of `iter_memory_event_batches`), unsorted, `batch` rows at a
    time as JSON text; returns how many rows it read."""
    db = open_read_only(path)
    read = 0
    try:
        columns = ", ".join(_COLUMNS)
        # No ORDER BY: sorting in Python is twice as fast as the engine's sort through JPype.
        query = f"SELECT {columns} FROM {EVENT_TYPE}"
        try:
            for rows, text in _json_batches(db.query("sql", query), batch):
                read += rows
                yield text
        except Exception as exc:
            raise CorruptSourceError(
                f"audit-ready-memory database {path}: reading {EVENT_TYPE} failed: "
                f"{_first_line(exc)}"
            ) from None
    finally:
        try:
            db.close()
        except Exception:  # closing a read-only database has nothing to lose
            log.debug("closing %s failed", path, exc_info=True)
    return read


def iter_memory_event_batches(path: str | Path) -> Iterator[list[dict[str, Any]]]:
    """The ``MemoryEvent`` rows of the database at `path`, unsorted, in batches as the
    engine reads them: the caller checks one batch while the engine reads the next.

    Each row is a dict of ``seq``, ``id``, ``kind`` and ``payload`` as stored (unchecked:
    the caller checks every value). The engine runs in a reader process of its own (this
    module, run by `reader_process.stream_reader`), never in the caller's: a JVM that
    faults takes only the reader down, and the caller gets `ReaderFailedError` (after
    the batches before it: a caller appends nothing before the last). Raises
    `SourceNotFoundError`, `CorruptSourceError`, `UnsupportedSourceError`,
    `MissingExtraError` or `ReaderFailedError`.
    """
    path = Path(path)
    check_layout(path)
    if any(importlib.util.find_spec(name) is None for name in ("arcadedb_embedded", "jpype")):
        raise MissingExtraError(_MISSING_EXTRA)
    what = f"audit-ready-memory database {path}"
    parts = stream_reader(
        __spec__.name if __spec__ else __name__, [str(path)], limit=answer_limit(path), what=what
    )
    sent = 0
    try:
        while True:
            try:
                rows = next(parts)
            except StopIteration as end:
                if end.value != sent:
                    raise CorruptSourceError(
                        f"{what}: the reader says it read {end.value!r} rows, but sent {sent:,}"
                    ) from None
                return
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                raise CorruptSourceError(f"{what}: the rows read are not rows")
            sent += len(rows)
            yield rows
    finally:
        parts.close()


def read_memory_events(path: str | Path) -> list[dict[str, Any]]:
    """Every ``MemoryEvent`` row of the database at `path` (`iter_memory_event_batches`),
    sorted by ``seq``."""
    rows = [row for batch in iter_memory_event_batches(path) for row in batch]
    # The rows are dicts of the selected columns (a column a record lacks reads as None).
    rows.sort(key=seq_order)
    return rows


def seq_order(row: dict[str, Any]) -> int:
    """A row's place in seq order (a row without an integer seq first: it is reported)."""
    seq = row.get("seq")
    return seq if isinstance(seq, int) else -1


def _serve(args: list[str]) -> Generator[JsonText, None, int]:
    (path,) = args
    return read_rows_here(Path(path))


if __name__ == "__main__":  # the reader process of `iter_memory_event_batches`
    raise SystemExit(serve_stream(sys.argv[1:], _serve))
