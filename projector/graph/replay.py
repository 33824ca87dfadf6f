"""Replay: rebuild a GraphState from a command log, integrity-tolerant."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

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


class ReplayResult(NamedTuple):
    """Unpacks as ``state, events, skipped = replay_commands(...)``, as the seed's does."""

    state: GraphState
    events: list[MemoryLifecycleEvent]
    skipped: list[ReplayFailure]


_validate_item = MemoryItem.__pydantic_validator__.validate_python
_CREATE_KEYS = frozenset({"type", "item"})


def _fold(entries: Iterable[tuple[int, Any, Any]], state: GraphState | None) -> ReplayResult:
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
            if type(cmd) is _Payload:
                try:
                    cmd = _field(cmd.env, "payload")
                except Exception as exc:
                    if run:
                        flush()
                    skipped.append(ReplayFailure(entry[0], exc, envelope=entry[2]))
                    continue
                entry = (entry[0], cmd, entry[2])
            if (
                type(cmd) is dict
                and cmd.get("type") == "memory.create"
                and cmd.keys() == _CREATE_KEYS
            ):
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


def replay_commands(commands: Iterable[Any], *, state: GraphState | None = None) -> ReplayResult:
    """Fold commands (models or dicts) in order onto ``state`` (default: empty).

    A command that fails validation or application changes nothing and is reported in
    ``skipped``; the rest of the log is still folded.
    """
    return _fold(((i, c, None) for i, c in enumerate(commands)), state)


def _field(envelope: Any, name: str) -> Any:
    # As the seed reads an envelope: a dict by key (KeyError if absent), else an attribute.
    return envelope[name] if isinstance(envelope, dict) else getattr(envelope, name)


def replay_from_envelopes(
    envelopes: Iterable[EventEnvelope[Any] | Mapping[str, Any]],
    *,
    state: GraphState | None = None,
) -> ReplayResult:
    """Sort envelopes by ``ts`` (strict ISO-8601, stable on ties) and fold their payloads.

    An envelope without a readable ``ts`` (KeyError / AttributeError / TypeError /
    InvalidTimestampError) is skipped first, in input order; then the payloads that fail
    to fold, in fold order. Each failure names its envelope and input index (its
    ``command`` is None), as the seed reports them.
    """
    ordered: list[tuple[int, int, Any]] = []
    bad: list[ReplayFailure] = []
    for i, env in enumerate(envelopes):
        try:
            ordered.append((parse_iso_ms(_field(env, "ts")), i, env))
        except Exception as exc:
            bad.append(ReplayFailure(i, exc, envelope=env))
    ordered.sort(key=lambda t: (t[0], t[1]))
    entries = ((i, _Payload(env), env) for _, i, env in ordered)
    result = _fold(entries, state)
    for failure in result.skipped:
        failure.command = None
    return ReplayResult(result.state, result.events, bad + result.skipped)


class _Payload:
    """An envelope's payload, read when the fold reaches it (a missing one is that
    envelope's failure, not the whole replay's)."""

    __slots__ = ("env",)

    def __init__(self, env: Any) -> None:
        self.env = env


__all__ = ["ReplayFailure", "ReplayResult", "replay_commands", "replay_from_envelopes"]
