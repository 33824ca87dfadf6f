"""Canonical string values of seed 003's open unions, as Literal aliases.

Fields that carry these values accept any ``str`` (the unions are open); the aliases
document the known values and type-check callers that stick to them.
"""

from __future__ import annotations

from typing import Literal

KnownMemoryKind = Literal[
    "observation",
    "assertion",
    "assumption",
    "hypothesis",
    "derivation",
    "simulation",
    "policy",
    "trait",
]
KnownSourceKind = Literal[
    "user_explicit",
    "observed",
    "derived_deterministic",
    "agent_inferred",
    "simulated",
    "imported",
]
KnownEdgeKind = Literal["DERIVED_FROM", "CONTRADICTS", "SUPPORTS", "ABOUT", "SUPERSEDES", "ALIAS"]
KnownNamespace = Literal["memory", "task", "agent", "tool", "net", "app", "chat", "system", "debug"]
LifecycleEventType = Literal[
    "memory.created",
    "memory.updated",
    "memory.retracted",
    "edge.created",
    "edge.updated",
    "edge.retracted",
]
SortField = Literal["authority", "conviction", "importance", "recency"]
SortOrder = Literal["asc", "desc"]
DecayInterval = Literal["hour", "day", "week"]
DecayType = Literal["exponential", "linear", "step"]

__all__ = [
    "DecayInterval",
    "DecayType",
    "KnownEdgeKind",
    "KnownMemoryKind",
    "KnownNamespace",
    "KnownSourceKind",
    "LifecycleEventType",
    "SortField",
    "SortOrder",
]
