"""The memory graph of seed 003, re-exported from ``memstream``.

Models and wire contract live in ``schemas.graph``, the reducer and mutations in
``projector.graph``, the pure queries in ``queryd.graph``.
"""

from __future__ import annotations

from projector.graph.bulk import ItemTransform, apply_many, bulk_adjust_scores, decay_importance
from projector.graph.decay import compute_decay_multiplier
from projector.graph.integrity import (
    CascadeResult,
    cascade_retract,
    mark_alias,
    mark_contradiction,
    resolve_contradiction,
)
from projector.graph.pmap import OrderedPMap
from projector.graph.reducer import apply_command, merge_edge, merge_item
from projector.graph.replay import (
    ReplayFailure,
    ReplayResult,
    replay_commands,
    replay_from_envelopes,
)
from projector.graph.selection import get_item_by_id, get_items, matches_filter
from projector.graph.serialization import (
    SerializedGraphState,
    from_json,
    parse,
    stringify,
    to_json,
)
from projector.graph.state import (
    CommandResult,
    GraphState,
    clone_graph_state,
    create_graph_state,
)
from queryd.graph.edges import get_edge_by_id, get_edges
from queryd.graph.integrity import (
    get_alias_group,
    get_aliases,
    get_contradictions,
    get_dependents,
    get_stale_items,
)
from queryd.graph.navigation import get_children, get_parents, get_related_items
from queryd.graph.retrieval import (
    SupportNode,
    apply_diversity,
    filter_contradictions,
    get_items_by_budget,
    get_support_set,
    get_support_tree,
    smart_retrieve,
    surface_contradictions,
)
from queryd.graph.scoring import compute_score, get_scored_items
from queryd.graph.stats import get_stats
from schemas.graph.commands import (
    EdgeCreate,
    EdgeRetract,
    EdgeUpdate,
    MemoryCommand,
    MemoryCommandAdapter,
    MemoryCreate,
    MemoryLifecycleEvent,
    MemoryRetract,
    MemoryUpdate,
)
from schemas.graph.envelopes import (
    EventEnvelope,
    create_event_envelope,
    wrap_edge_state_event,
    wrap_lifecycle_event,
    wrap_state_event,
)
from schemas.graph.errors import (
    DuplicateEdgeError,
    DuplicateIntentError,
    DuplicateMemoryError,
    DuplicateTaskError,
    EdgeNotFoundError,
    IntentNotFoundError,
    InvalidIntentTransitionError,
    InvalidTaskTransitionError,
    InvalidTimestampError,
    MemexError,
    MemoryNotFoundError,
    TaskNotFoundError,
)
from schemas.graph.filters import (
    CreatedFilter,
    DecayFilter,
    DiversityOptions,
    EdgeFilter,
    MemoryFilter,
    ParentsFilter,
    QueryOptions,
    Range,
    ScoreAdjustment,
    ScoredQueryOptions,
    ScoreRanges,
    SortOption,
)
from schemas.graph.ids import extract_timestamp, safe_extract_timestamp, uuid7
from schemas.graph.items import Edge, MemoryItem, create_edge, create_memory_item
from schemas.graph.results import (
    Contradiction,
    EdgeStats,
    GraphStats,
    ItemStats,
    ScoredItem,
    StaleItem,
)
from schemas.graph.scoring import DecayConfig, ScoreWeights
from schemas.graph.vocabulary import (
    DecayInterval,
    DecayType,
    KnownEdgeKind,
    KnownMemoryKind,
    KnownNamespace,
    KnownSourceKind,
    LifecycleEventType,
    SortField,
)

__all__ = [
    # state
    "GraphState",
    "create_graph_state",
    "clone_graph_state",
    "OrderedPMap",
    # entities
    "MemoryItem",
    "Edge",
    "create_memory_item",
    "create_edge",
    # commands and reducer
    "MemoryCreate",
    "MemoryUpdate",
    "MemoryRetract",
    "EdgeCreate",
    "EdgeUpdate",
    "EdgeRetract",
    "MemoryCommand",
    "MemoryCommandAdapter",
    "apply_command",
    "CommandResult",
    "merge_item",
    "merge_edge",
    "MemoryLifecycleEvent",
    # queries
    "get_items",
    "get_item_by_id",
    "matches_filter",
    "MemoryFilter",
    "Range",
    "ScoreRanges",
    "ParentsFilter",
    "DecayFilter",
    "CreatedFilter",
    "QueryOptions",
    "SortOption",
    # edges and navigation
    "get_edges",
    "get_edge_by_id",
    "EdgeFilter",
    "get_parents",
    "get_children",
    "get_related_items",
    # scoring
    "ScoreWeights",
    "DecayConfig",
    "compute_decay_multiplier",
    "compute_score",
    "get_scored_items",
    "ScoredQueryOptions",
    "ScoredItem",
    "extract_timestamp",
    # retrieval
    "get_support_tree",
    "get_support_set",
    "SupportNode",
    "filter_contradictions",
    "surface_contradictions",
    "DiversityOptions",
    "apply_diversity",
    "smart_retrieve",
    "get_items_by_budget",
    # integrity
    "get_contradictions",
    "Contradiction",
    "mark_contradiction",
    "resolve_contradiction",
    "get_stale_items",
    "StaleItem",
    "get_dependents",
    "cascade_retract",
    "CascadeResult",
    "mark_alias",
    "get_aliases",
    "get_alias_group",
    # bulk
    "apply_many",
    "ItemTransform",
    "bulk_adjust_scores",
    "ScoreAdjustment",
    "decay_importance",
    # stats
    "get_stats",
    "GraphStats",
    "ItemStats",
    "EdgeStats",
    # replay
    "replay_commands",
    "replay_from_envelopes",
    "ReplayResult",
    "ReplayFailure",
    # serialization
    "to_json",
    "from_json",
    "stringify",
    "parse",
    "SerializedGraphState",
    # envelopes
    "EventEnvelope",
    "create_event_envelope",
    "wrap_lifecycle_event",
    "wrap_state_event",
    "wrap_edge_state_event",
    # ids
    "uuid7",
    "safe_extract_timestamp",
    # errors
    "MemexError",
    "MemoryNotFoundError",
    "EdgeNotFoundError",
    "DuplicateMemoryError",
    "DuplicateEdgeError",
    "InvalidTimestampError",
    "IntentNotFoundError",
    "DuplicateIntentError",
    "InvalidIntentTransitionError",
    "TaskNotFoundError",
    "DuplicateTaskError",
    "InvalidTaskTransitionError",
    # type aliases
    "KnownMemoryKind",
    "KnownSourceKind",
    "KnownEdgeKind",
    "KnownNamespace",
    "LifecycleEventType",
    "SortField",
    "DecayInterval",
    "DecayType",
]
