"""`import_audit_ready_memory`: an audit-ready-memory database appended to a memstream log.

The source's events are appended in their seq order, each keeping its id, timestamp,
session, source, actor, ``retain_until``, recall and tombstone targets; only ``seq`` is the
target log's. Afterwards the imported events are replayed and compared with the source's
replay (the summary, every event, and the answers of `search` on a sample of queries).

Resuming. An event's id is unique in a memstream log (the log refuses a second event with
the same id), and the importer appends the source in seq order in all-or-none batches. So
the log itself records how far an import got: the source events whose ids are in the log,
always a prefix of the source. A run finds them, checks that each equals its source event,
and appends the rest; nothing is appended twice. A log holding only events of this source
counts as this import's own (resumed without ``append``); any other record makes the log
"not empty" (``append=True`` needed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from pydantic import TypeAdapter, ValidationError

from producers.importers.arcadedb_source import iter_memory_event_batches, seq_order
from producers.importers.errors import (
    CorruptSourceError,
    ImportConflictError,
    LogNotEmptyError,
    VerificationError,
)
from producers.importers.report import ImportReport, Progress, Skip
from producers.importers.run import append_batches, refuse_signed
from producers.memory import Memory
from projector.audit import MemoryState, check_append, fold, replay
from queryd.audit import search
from schemas.audit import BaseEvent, Deletion, Document, Event, Message, Recall
from schemas.codec import MAX_DECODE_BYTES, MAX_JSON_DEPTH, encode_record, json_depth
from schemas.gc_guard import no_cyclic_gc
from schemas.limits import MAX_RECORD_BYTES, check_record_size

__all__ = [
    "import_audit_ready_memory",
    "parse_rows",
    "read_source",
    "check_source",
    "source_state",
    "summarize",
    "sample_queries",
    "DEFAULT_BATCH",
]

log = logging.getLogger("memstream.import.audit")

AnyEvent = Message | Document | Recall | Deletion
DEFAULT_BATCH = 2000
DEFAULT_SAMPLES = 25


@dataclass(frozen=True)
class SourceEvent:
    """An event read from the source, at its source seq, with its seq cleared."""

    seq: int
    event: AnyEvent
    size: int = 0  # characters of the source's JSON, a bound of the record's size


def _where(row: dict[str, Any], index: int) -> str:
    seq = row.get("seq")
    ident = row.get("id")
    place = f"seq {seq}" if isinstance(seq, int) else f"record {index} (no seq)"
    return f"{place} (id {ident})" if isinstance(ident, str) else place


_EVENTS: TypeAdapter[AnyEvent] = TypeAdapter(Event)


def _without_seq(event: AnyEvent) -> AnyEvent:
    """The event with its seq cleared, built as `BaseEvent.with_seq` builds a copy (what
    `model_copy(update={"seq": None})` gives, without its generic path)."""
    copy = object.__new__(type(event))
    values = event.__dict__.copy()
    values["seq"] = None
    object.__setattr__(copy, "__dict__", values)
    object.__setattr__(copy, "__pydantic_fields_set__", event.__pydantic_fields_set__)
    object.__setattr__(copy, "__pydantic_extra__", None)
    object.__setattr__(copy, "__pydantic_private__", None)
    return copy


def _parse_row(row: dict[str, Any], index: int) -> AnyEvent:
    """The event of one row, its seq cleared; every column checked against the payload."""
    where = _where(row, index)
    payload = row.get("payload")
    if not isinstance(payload, str):
        raise CorruptSourceError(f"{where}: payload is {type(payload).__name__}, not JSON text")
    if len(payload) * 4 > MAX_DECODE_BYTES and len(payload.encode()) > MAX_DECODE_BYTES:
        raise CorruptSourceError(
            f"{where}: payload of {len(payload):,} characters is over the limit"
        )
    # Depth is at most the number of brackets: count them (in C) before measuring it.
    if payload.count("[") + payload.count("{") > MAX_JSON_DEPTH:
        if json_depth(payload.encode()) > MAX_JSON_DEPTH:
            raise CorruptSourceError(f"{where}: payload nests deeper than {MAX_JSON_DEPTH}")
    try:
        # Parsed and validated in one pass (pydantic's JSON parser).
        event = _EVENTS.validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"].startswith("json_"):
            raise CorruptSourceError(f"{where}: payload is not JSON ({first['msg']})") from None
        field = ".".join(str(p) for p in first["loc"]) or "event"
        raise CorruptSourceError(
            f"{where}: payload does not validate: {field}: {first['msg']}"
        ) from None
    for column, stored in (("id", str(event.id)), ("seq", event.seq), ("kind", event.kind)):
        if row.get(column) != stored:
            raise CorruptSourceError(
                f"{where}: column {column} is {row.get(column)!r} but the payload says {stored!r}"
            )
    return _without_seq(event)


class _RowChecks:
    """`parse_rows`'s checks, one row at a time in the rows' order: the seqs must run 0, 1,
    2, ... as audit-ready-memory assigns them (a gap means records were lost), and every
    row must parse. `bad(where, reason)` raises or records a skip."""

    def __init__(self, bad: Callable[[str, str], None]) -> None:
        self.bad = bad
        self.events: list[SourceEvent] = []
        self.seen: set[int] = set()
        self.expected = 0

    def row(
        self, index: int, row: dict[str, Any], found: AnyEvent | CorruptSourceError | None
    ) -> None:
        """Check the row at `index`; `found` is its parsed event (None: parse it here)."""
        seq = row.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            self.bad(_where(row, index), f"seq is {seq!r}, not a non-negative integer")
            return
        if seq in self.seen:
            self.bad(_where(row, index), f"seq {seq} appears twice")
            return
        self.seen.add(seq)
        expected = self.expected
        if seq != expected:
            gap = f"seq {expected}" if seq == expected + 1 else f"seqs {expected} to {seq - 1}"
            self.bad(gap, f"missing: the source jumps from seq {expected - 1} to seq {seq}")
        self.expected = seq + 1
        try:
            if found is None:
                event = _parse_row(row, index)
            elif isinstance(found, CorruptSourceError):
                raise found
            else:
                event = found
        except CorruptSourceError as exc:
            text = str(exc)
            where = _where(row, index)
            self.bad(where, text[len(where) + 2 :] if text.startswith(where) else text)
            return
        self.events.append(SourceEvent(seq, event, len(row["payload"])))


def _skipper(skip_bad: bool, source: str, skips: list[Skip]) -> Callable[[str, str], None]:
    def bad(where: str, reason: str) -> None:
        if not skip_bad:
            raise CorruptSourceError(f"{source}: {where}: {reason}")
        skips.append(Skip(where, reason))

    return bad


def parse_rows(
    rows: Sequence[dict[str, Any]],
    *,
    skip_bad: bool = False,
    source: str = "source",
    parsed: Sequence[AnyEvent | CorruptSourceError] | None = None,
) -> tuple[list[SourceEvent], list[Skip]]:
    """The source's events in seq order, checked record by record.

    The seqs must run 0, 1, 2, ... as audit-ready-memory assigns them: a gap means records
    were lost. Raises `CorruptSourceError` naming the first bad record, unless `skip_bad`:
    then each is left out and reported.
    """
    skips: list[Skip] = []
    checks = _RowChecks(_skipper(skip_bad, source, skips))
    with no_cyclic_gc():  # 100k events are 100k acyclic models: no cycle hunting
        for index, row in enumerate(rows):
            checks.row(index, row, None if parsed is None else parsed[index])
    return checks.events, skips


def _try_parse(row: dict[str, Any], index: int) -> AnyEvent | CorruptSourceError:
    try:
        return _parse_row(row, index)
    except CorruptSourceError as exc:
        return exc


@dataclass
class _Checked:
    """The source read and checked: its rows in seq order, each row's parsed event (or why
    it does not parse), and, when the rows came in seq order, what `parse_rows` and
    `check_source` say of them (checked while the reader read on)."""

    rows: list[dict[str, Any]]
    parsed: list[AnyEvent | CorruptSourceError]
    checked: tuple[list[SourceEvent], list[Skip], list[SourceEvent], list[Skip]] | None = None


class _InOrder:
    """`parse_rows` then `check_source` on rows as they arrive, while they arrive in seq
    order (as the engine reads a database written in order): the importer checks a batch
    while the reader reads the next. A row out of order, or an error, ends it (`broken`):
    the rows are then sorted and checked whole after the read, as before, so the read's
    own failures and the checks' errors come as they always did."""

    def __init__(self, skip_bad: bool, source: str) -> None:
        self.row_skips: list[Skip] = []
        self.rows = _RowChecks(_skipper(skip_bad, source, self.row_skips))
        self.events = _EventChecks(skip_bad, source)
        self.broken = False

    def batch(
        self, start: int, pairs: Sequence[tuple[dict[str, Any], AnyEvent | CorruptSourceError]]
    ) -> None:
        if self.broken:
            return
        expected = self.rows.expected
        for offset, (row, _) in enumerate(pairs):
            seq = row.get("seq")
            if seq != expected + offset or isinstance(seq, bool):
                self.broken = True
                return
        done = len(self.rows.events)
        try:
            for offset, (row, found) in enumerate(pairs):
                self.rows.row(start + offset, row, found)
            for item in self.rows.events[done:]:
                self.events.event(item)
        except CorruptSourceError:
            self.broken = True

    def result(self) -> tuple[list[SourceEvent], list[Skip], list[SourceEvent], list[Skip]]:
        return self.rows.events, self.row_skips, self.events.kept, self.events.skips


def read_source(
    path: str | Path,
) -> tuple[list[dict[str, Any]], list[AnyEvent | CorruptSourceError]]:
    """The source's rows in seq order, each with its parsed event (or why it does not
    parse), parsed batch by batch while the reader process reads the next batch: the
    `rows` and `parsed` that `parse_rows` takes."""
    checked = _read_checked(path, None)
    return checked.rows, checked.parsed


def _read_checked(path: str | Path, in_order: _InOrder | None) -> _Checked:
    pairs: list[tuple[dict[str, Any], AnyEvent | CorruptSourceError]] = []
    with no_cyclic_gc():
        for batch in iter_memory_event_batches(path):
            start = len(pairs)
            pairs += [(row, _try_parse(row, start + i)) for i, row in enumerate(batch)]
            if in_order is not None:
                in_order.batch(start, pairs[start:])
        if in_order is None or in_order.broken:
            pairs.sort(key=lambda pair: seq_order(pair[0]))
    checked = _Checked([row for row, _ in pairs], [event for _, event in pairs])
    if in_order is not None and not in_order.broken:
        checked.checked = in_order.result()
    return checked


def _check_size(item: SourceEvent) -> None:
    """`RecordTooLargeError` for an event over the log's record size limit. The record
    (Avro: raw UTF-8 strings, no keys) is smaller than the event's JSON (ASCII-escaped,
    keyed) but for a few bytes; only events whose JSON comes near the limit are encoded."""
    if item.size * 4 + 4096 > MAX_RECORD_BYTES:
        check_record_size(item.event, encode_record(item.event))


class _EventChecks:
    """`check_source`'s checks, one event at a time in seq order."""

    def __init__(self, skip_bad: bool, source: str) -> None:
        self.skip_bad, self.source = skip_bad, source
        self.kept: list[SourceEvent] = []
        self.skips: list[Skip] = []
        # Checked as one batch on an empty log (what `check_records` does), then folded
        # at once: a state per event would cost more than the check.
        self.empty = MemoryState()
        self.before: dict[UUID, AnyEvent] = {}

    def event(self, item: SourceEvent) -> None:
        event = item.event
        try:
            check_append(self.empty, event, self.before)
            _check_size(item)
        except (ValueError, TypeError) as exc:
            where = f"seq {item.seq} (id {event.id})"
            if not self.skip_bad:
                raise CorruptSourceError(f"{self.source}: {where}: {exc}") from None
            self.skips.append(Skip(where, str(exc)))
            return
        self.before[event.id] = event
        self.kept.append(item)


def check_source(
    events: Sequence[SourceEvent], *, skip_bad: bool = False, source: str = "source"
) -> tuple[list[SourceEvent], list[Skip]]:
    """Check the events as a memstream log would take them, in order.

    Returns the events kept and the skips. A recall or deletion naming an event that is not in
    the source, an event over the record size limit: `CorruptSourceError` unless
    `skip_bad` (then the events that depend on a skipped one are skipped in turn).
    """
    checks = _EventChecks(skip_bad, source)
    with no_cyclic_gc():
        for item in events:
            checks.event(item)
    return checks.kept, checks.skips


def source_state(kept: Sequence[SourceEvent]) -> MemoryState:
    """The source's replay: the kept events folded at their source seqs."""
    with no_cyclic_gc():
        return replay(cast(AnyEvent, item.event.with_seq(item.seq)) for item in kept)


def summarize(state: MemoryState) -> dict[str, Any]:
    """What two replays must agree on: every content id in order, what is visible, what
    was deleted (by which tombstone), and the recall statistics."""
    return {
        "messages": [m.id for m in state.messages],
        "documents": [d.id for d in state.documents],
        "visible_messages": [m.id for m in state.visible_messages],
        "visible_documents": [d.id for d in state.visible_documents],
        "deleted": {k: v.id for k, v in state.deleted.items()},
        "recall_stats": {
            k: (v.num_recalled, v.last_recalled_at) for k, v in state.recall_stats.items()
        },
        "events": len(state.events),
    }


def sample_queries(state: MemoryState, count: int = DEFAULT_SAMPLES) -> list[str]:
    """Up to `count` queries drawn evenly from the visible content: a few words of each."""
    content: list[str] = [m.content for m in state.visible_messages]
    content += [d.text for d in state.visible_documents]
    if not content:
        return []
    step = max(1, len(content) // count)
    queries = []
    for text in content[::step][:count]:
        words = text.split()
        queries.append(" ".join(words[:3]) if words else text)
    return queries


def _same(a: BaseEvent, b: BaseEvent) -> bool:
    """The same event but for its seq (what `model_copy` and `==` say, without copies)."""
    return a.__class__ is b.__class__ and {**a.__dict__, "seq": None} == {
        **b.__dict__,
        "seq": None,
    }


def _verify(memory: Memory, kept: Sequence[SourceEvent], *, whole: bool) -> str:
    """Compare the log with the source: every imported event, in order, then the replay.

    `whole`: the log holds nothing but this source's events, so its own state is the
    replay of the import; otherwise the imported events are picked out and replayed.
    """
    ids = {item.event.id for item in kept}
    source = source_state(kept)
    with no_cyclic_gc():
        imported = [e for e in memory.events() if e.id in ids]
        if len(imported) != len(kept):
            raise VerificationError(
                f"the log holds {len(imported):,} of the {len(kept):,} source events after "
                "the import"
            )
        for item, event in zip(kept, imported, strict=True):
            if not _same(event, item.event):
                raise VerificationError(
                    f"seq {event.seq} (id {event.id}) differs from source seq {item.seq} "
                    f"(id {item.event.id}): the log's order or content is not the source's"
                )
        log_state = memory.replay() if whole else replay(imported)
        want, got = summarize(source), summarize(log_state)
    for key in want:
        if want[key] != got[key]:
            raise VerificationError(f"replay summary differs from the source's in {key!r}")
    queries = sample_queries(source)
    for query in queries:
        a = [x.id for x in search(source, query, limit=5)]
        b = [x.id for x in search(log_state, query, limit=5)]
        if a != b:
            raise VerificationError(f"search {query!r}: the source answers {a}, the log {b}")
    return (
        f"replay equal to the source's ({len(want['messages']):,} messages, "
        f"{len(want['documents']):,} documents, {len(want['deleted']):,} deleted, "
        f"{len(want['recall_stats']):,} recalled items; {len(kept):,} events equal in order), "
        f"search answers equal on {len(queries)} sampled queries"
    )


def _existing(
    memory: Memory, kept: Sequence[SourceEvent], *, append: bool, skip_bad: bool, source: str
) -> tuple[set[UUID], int, list[Skip]]:
    """Which source events the log already holds (an earlier run), how many of its
    records are foreign, and source events skipped because the log holds their id with
    other content."""
    head = memory.log.state().last_seq  # the last record of any kind
    if head is None:
        return set(), 0, []
    by_id = {item.event.id: item for item in kept}
    present: set[UUID] = set()
    skips: list[Skip] = []
    in_log = memory.events()
    foreign = head + 1 - len(in_log)  # graph envelopes and refused records
    for event in in_log:
        item = by_id.get(event.id)
        if item is None:
            foreign += 1
        elif not _same(event, item.event):
            where = f"seq {item.seq} (id {event.id})"
            reason = f"the log holds event {event.id} at seq {event.seq} with other content"
            if not skip_bad:
                raise ImportConflictError(f"{source}: {where}: {reason}")
            skips.append(Skip(where, reason))
            foreign += 1
        else:
            present.add(event.id)
    if foreign and not append:
        raise LogNotEmptyError(
            f"log {memory.location} holds {foreign:,} record(s) that are not from {source} "
            f"(and {len(present):,} that are); pass --append (append=True) to import after them"
        )
    return present, foreign, skips


def import_audit_ready_memory(
    path: str | Path,
    location: str,
    *,
    append: bool = False,
    skip_bad: bool = False,
    verify: bool = True,
    batch_size: int = DEFAULT_BATCH,
    progress: Progress | None = None,
    rows: Sequence[dict[str, Any]] | None = None,
) -> ImportReport:
    """Import the audit-ready-memory database at `path` into the log at `location`.

    Everything is read and checked before anything is appended: a bad source raises an
    `ImportSourceError` naming the record and appends nothing (with `skip_bad`, bad records
    and those depending on them are left out and reported). `rows` replaces reading `path`
    (tests: the rows as `read_memory_events` gives them).
    """
    if batch_size < 1:  # before the log is opened (a writer creates it)
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    source = str(path)
    report = ImportReport(source=source, location=str(location), kind="audit-ready-memory")
    clock = time.perf_counter()
    # Read and parsed together: the reader process reads a batch while this one parses
    # the one before (given `rows`, they are parsed here).
    parsed = checked = None
    if rows is None:
        read = _read_checked(path, _InOrder(skip_bad, source))
        rows, parsed, checked = read.rows, read.parsed, read.checked
    report.read = len(rows)
    report.timings["read"] = -clock + (clock := time.perf_counter())
    if checked is None:
        events, skips = parse_rows(rows, skip_bad=skip_bad, source=source, parsed=parsed)
        kept, check_skips = check_source(events, skip_bad=skip_bad, source=source)
    else:  # checked as it was read
        events, skips, kept, check_skips = checked
    report.skipped = skips + check_skips
    with Memory(location) as memory:
        refuse_signed(memory.log, location)
        present, foreign, conflicts = _existing(
            memory, kept, append=append, skip_bad=skip_bad, source=source
        )
        if conflicts:
            report.skipped += conflicts
            dropped = {s.where for s in conflicts}
            kept = [k for k in kept if f"seq {k.seq} (id {k.event.id})" not in dropped]
            kept, more = check_source(kept, skip_bad=True, source=source)
            report.skipped += more
        report.already = len(present)
        pending = [item.event for item in kept if item.event.id not in present]
        if foreign and pending:
            _check_against(memory, pending, source)
        report.timings["check"] = -clock + (clock := time.perf_counter())
        append_batches(
            pending,
            lambda batch: [cast(int, e.seq) for e in memory.append_many(batch)],
            batch_size=batch_size,
            progress=progress,
            report=report,
        )
        report.timings["append"] = -clock + (clock := time.perf_counter())
        if verify:
            report.verified = _verify(memory, kept, whole=not foreign)
        report.timings["verify"] = time.perf_counter() - clock
    log.info("imported %s into %s: %d appended", source, location, report.appended)
    return report


def _check_against(memory: Memory, pending: Sequence[AnyEvent], source: str) -> None:
    """Check the events against the log's own state (it holds foreign records), so that a
    refusal comes before the first batch is appended."""
    state = memory.replay()
    last = memory.log.state().last_seq
    seq = 0 if last is None else last + 1
    for event in pending:
        try:
            check_append(state, event)
        except ValueError as exc:
            raise ImportConflictError(f"{source}: id {event.id}: {exc}") from None
        state = fold(state, cast(AnyEvent, event.with_seq(seq)))
        seq += 1
