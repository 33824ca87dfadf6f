"""Both seeds' APIs import from `memstream`, under their own names, without collisions."""

from __future__ import annotations

import memstream
from memstream.public import audit_memory, intents_tasks_store, memory_graph

AUDIT = (
    "Memory Message Document Recall Deletion Event MemoryState RecallStats replay search "
    "event_to_dict event_from_dict Assistant Reply MissingAPIKeyError"
).split()
GRAPH = (
    "GraphState create_graph_state clone_graph_state MemoryItem Edge create_memory_item "
    "create_edge MemoryCreate MemoryUpdate MemoryRetract EdgeCreate EdgeUpdate EdgeRetract "
    "MemoryCommand MemoryCommandAdapter apply_command CommandResult merge_item merge_edge "
    "MemoryLifecycleEvent get_items get_item_by_id matches_filter MemoryFilter Range "
    "ScoreRanges ParentsFilter DecayFilter CreatedFilter QueryOptions SortOption get_edges "
    "get_edge_by_id EdgeFilter get_parents get_children get_related_items ScoreWeights "
    "DecayConfig compute_decay_multiplier compute_score get_scored_items ScoredQueryOptions "
    "ScoredItem extract_timestamp get_support_tree get_support_set SupportNode "
    "filter_contradictions surface_contradictions DiversityOptions apply_diversity "
    "smart_retrieve get_items_by_budget get_contradictions mark_contradiction "
    "resolve_contradiction Contradiction get_stale_items StaleItem get_dependents "
    "cascade_retract CascadeResult mark_alias get_aliases get_alias_group apply_many "
    "ItemTransform bulk_adjust_scores ScoreAdjustment decay_importance Intent IntentStatus "
    "IntentState create_intent_state create_intent apply_intent_command IntentResult "
    "IntentCommand get_intents get_intent_by_id get_child_intents IntentFilter "
    "IntentLifecycleEvent Task TaskStatus TaskState create_task_state create_task "
    "apply_task_command TaskResult TaskCommand get_tasks get_task_by_id get_tasks_by_intent "
    "get_child_tasks TaskFilter TaskLifecycleEvent get_stats GraphStats ItemStats EdgeStats "
    "replay_commands replay_from_envelopes ReplayResult ReplayFailure to_json from_json "
    "stringify parse SerializedGraphState EventEnvelope create_event_envelope "
    "wrap_lifecycle_event wrap_state_event wrap_edge_state_event export_slice MemexExport "
    "ExportOptions import_slice ImportResult ImportReport ImportBucket ImportOptions "
    "validate_command validate_intent_command validate_task_command validate_memory_item "
    "validate_edge MemoryItemSchema EdgeSchema IntentSchema TaskSchema IntentCommandAdapter "
    "TaskCommandAdapter MemexStore uuid7 safe_extract_timestamp MemexError "
    "MemoryNotFoundError EdgeNotFoundError DuplicateMemoryError DuplicateEdgeError "
    "InvalidTimestampError IntentNotFoundError DuplicateIntentError "
    "InvalidIntentTransitionError TaskNotFoundError DuplicateTaskError "
    "InvalidTaskTransitionError KnownMemoryKind KnownSourceKind KnownEdgeKind KnownNamespace "
    "LifecycleEventType SortField DecayInterval DecayType"
).split()


def test_every_seed_name_imports_from_memstream() -> None:
    missing = [name for name in AUDIT + GRAPH if not hasattr(memstream, name)]
    assert missing == []
    assert set(AUDIT + GRAPH) <= set(memstream.__all__)


def test_the_halves_do_not_collide() -> None:
    names = [*audit_memory.__all__, *memory_graph.__all__, *intents_tasks_store.__all__]
    assert len(names) == len(set(names))


def test_validation_entry_points_import_from_schemas() -> None:
    import schemas

    for name in (
        "validate_command",
        "validate_intent_command",
        "validate_task_command",
        "validate_memory_item",
        "validate_edge",
        "MemoryItemSchema",
        "EdgeSchema",
        "IntentSchema",
        "TaskSchema",
        "MemoryCommandAdapter",
        "IntentCommandAdapter",
        "TaskCommandAdapter",
    ):
        assert hasattr(schemas, name), name
