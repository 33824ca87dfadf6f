"""Replay: rebuild a GraphState from a command log, integrity-tolerant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from projector.graph.reducer import Tx, coerce_command
from projector.graph.state import GraphState, create_graph_state
from schemas.fields import share_fields_set_by_keys
from schemas.gc_guard import no_cyclic_gc
from schemas.graph.commands import MemoryCommandAdapter, MemoryLifecycleEvent
from schemas.graph.envelopes import EventEnvelope, parse_iso_ms
from schemas.graph.items import MemoryItem


@dataclass
class ReplayFailure:
    index: int  # position in the input list
    error: Exception
    command: Any = None
    envelope: Any = None


@dataclass(frozen=True)
class ReplayResult:
    state: GraphState
    events: list[MemoryLifecycleEvent] = field(default_factory=list)
    skipped: list[ReplayFailure] = field(default_factory=list)


_validate_item = MemoryItem.__pydantic_validator__.validate_python
_CREATE_KEYS = frozenset({"type", "item"})


def _fold(
    entries: Iterable[tuple[int, Any, Any]], state: GraphState | None
) -> ReplayResult:
    tx = Tx(state if state is not None else create_graph_state())
    skipped: list[ReplayFailure] = []
    apply = tx.apply
    snapshot = tx.snapshot
    validate = MemoryCommandAdapter.validate_python
    # A run of plain creates, validated and waiting to be added in one batch; flushed
    # before any other command, so every command still sees all that came before it.
    run: list[MemoryItem] = []
    run_entries: list[tuple[int, Any, Any]] = []

    def flush() -> None:
        for pos, exc in tx.create_many(run, "memory.create"):
            index, cmd, envelope = run_entries[pos]
            skipped.append(ReplayFailure(index, exc, command=cmd, envelope=envelope))
        run.clear()
        run_entries.clear()

    with no_cyclic_gc():
        for entry in entries:
            cmd = entry[1]
            if (type(cmd) is dict and cmd.get("type") == "memory.create"
                    and cmd.keys() == _CREATE_KEYS):  # fmt: skip
                # The log's common entry: validate just the item (what MemoryCreate would do,
                # without building the command), and no snapshot: create_many checks before
                # it writes. Anything invalid takes the general path for its exact error.
                raw = cmd["item"]
                try:
                    item = _validate_item(raw)
                except Exception:
                    pass
                else:
                    if type(raw) is dict:
                        share_fields_set_by_keys(item, tuple(raw))
                    run.append(item)
                    run_entries.append(entry)
                    continue
            if run:
                flush()
            snap = snapshot()
            try:
                apply(validate(cmd) if type(cmd) is dict else coerce_command(cmd))
            except Exception as exc:  # the fold is total: a bad command is recorded, skipped
                tx.restore(snap)  # O(1): the persistent maps before the command
                skipped.append(ReplayFailure(entry[0], exc, command=cmd, envelope=entry[2]))
        flush()
        return ReplayResult(tx.freeze(), tx.events, skipped)


def replay_commands(
    commands: Iterable[Any], *, state: GraphState | None = None
) -> ReplayResult:
    """Fold commands (models or dicts) in order onto ``state`` (default: empty).

    A command that fails validation or application changes nothing and is reported in
    ``skipped``; the rest of the log is still folded.
    """
    return _fold(((i, c, None) for i, c in enumerate(commands)), state)


def replay_from_envelopes(
    envelopes: Iterable[EventEnvelope[Any] | Mapping[str, Any]],
    *,
    state: GraphState | None = None,
) -> ReplayResult:
    """Sort envelopes by ``ts`` (strict ISO-8601, stable on ties) and fold their payloads.

    An envelope that is malformed or has a bad ``ts`` is skipped (InvalidTimestampError /
    ValidationError in ``skipped``); failures are listed by input index.
    """
    ordered: list[tuple[int, int, Any, Any]] = []
    bad: list[ReplayFailure] = []
    for i, env in enumerate(envelopes):
        try:
            e = env if isinstance(env, EventEnvelope) else EventEnvelope[Any].model_validate(env)
            ordered.append((parse_iso_ms(e.ts), i, e.payload, env))
        except Exception as exc:
            bad.append(ReplayFailure(i, exc, envelope=env))
    ordered.sort(key=lambda t: (t[0], t[1]))
    result = _fold(((i, payload, env) for _, i, payload, env in ordered), state)
    skipped = sorted(bad + result.skipped, key=lambda f: f.index)
    return ReplayResult(result.state, result.events, skipped)


__all__ = ["ReplayFailure", "ReplayResult", "replay_commands", "replay_from_envelopes"]
