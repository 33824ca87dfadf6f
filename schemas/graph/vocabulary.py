"""The graph's vocabulary: the known values of its open string fields, as Literal types.

Fields that carry these values (kinds, source kinds, edge kinds, namespaces, lifecycle
event types, sort fields...) accept any ``str``: the sets are open, as in the TypeScript
library. These types name the known values and type-check callers that stick to them.
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
