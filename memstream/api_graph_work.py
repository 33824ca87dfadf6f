"""The intent graph, task graph, transplant, validation and MemexStore of seed 003.

Re-exported from ``memstream``; the memory graph itself is in ``memstream.api_graph``.
"""

from __future__ import annotations

from producers.memex_store import MemexStore
from projector.graph.dispatch import GraphOperation, MutationOutcome, apply_mutation
from projector.graph.intents import (
    IntentResult,
    IntentState,
    apply_intent_command,
    create_intent,
    create_intent_state,
)
from projector.graph.tasks import (
    TaskResult,
    TaskState,
    apply_task_command,
    create_task,
    create_task_state,
)
from projector.graph.transplant import ImportResult, import_slice
from queryd.graph.intents import (
    get_child_intents,
    get_intent_by_id,
    get_intents,
    matches_intent_filter,
)
from queryd.graph.tasks import (
    get_child_tasks,
    get_task_by_id,
    get_tasks,
    get_tasks_by_intent,
    matches_task_filter,
)
from queryd.graph.transplant import export_slice
from schemas.graph.intents import (
    Intent,
    IntentCancel,
    IntentCommand,
    IntentCommandAdapter,
    IntentComplete,
    IntentCreate,
    IntentFilter,
    IntentLifecycleEvent,
    IntentLifecycleEventType,
    IntentPause,
    IntentResume,
    IntentStatus,
    IntentUpdate,
)
from schemas.graph.tasks import (
    Task,
    TaskCancel,
    TaskCommand,
    TaskCommandAdapter,
    TaskComplete,
    TaskCreate,
    TaskFail,
    TaskFilter,
    TaskLifecycleEvent,
    TaskLifecycleEventType,
    TaskStart,
    TaskStatus,
    TaskUpdate,
)
from schemas.graph.transplant import (
    ExportOptions,
    ImportBucket,
    ImportOptions,
    ImportReport,
    MemexExport,
)
from schemas.validation import (
    EdgeSchema,
    IntentSchema,
    MemoryItemSchema,
    TaskSchema,
    validate_command,
    validate_edge,
    validate_intent_command,
    validate_memory_item,
    validate_task_command,
)

__all__ = [
    # intent graph
    "Intent",
    "IntentStatus",
    "IntentLifecycleEventType",
    "IntentState",
    "IntentResult",
    "create_intent_state",
    "create_intent",
    "IntentCreate",
    "IntentUpdate",
    "IntentComplete",
    "IntentCancel",
    "IntentPause",
    "IntentResume",
    "IntentCommand",
    "IntentCommandAdapter",
    "apply_intent_command",
    "IntentFilter",
    "IntentLifecycleEvent",
    "get_intents",
    "get_intent_by_id",
    "get_child_intents",
    "matches_intent_filter",
    # task graph
    "Task",
    "TaskStatus",
    "TaskLifecycleEventType",
    "TaskState",
    "TaskResult",
    "create_task_state",
    "create_task",
    "TaskCreate",
    "TaskUpdate",
    "TaskStart",
    "TaskComplete",
    "TaskFail",
    "TaskCancel",
    "TaskCommand",
    "TaskCommandAdapter",
    "apply_task_command",
    "TaskFilter",
    "TaskLifecycleEvent",
    "get_tasks",
    "get_task_by_id",
    "get_tasks_by_intent",
    "get_child_tasks",
    "matches_task_filter",
    # transplant
    "MemexExport",
    "ExportOptions",
    "ImportOptions",
    "ImportBucket",
    "ImportReport",
    "ImportResult",
    "export_slice",
    "import_slice",
    # validation (the command adapters are exported with their graphs)
    "validate_command",
    "validate_intent_command",
    "validate_task_command",
    "validate_memory_item",
    "validate_edge",
    "MemoryItemSchema",
    "EdgeSchema",
    "IntentSchema",
    "TaskSchema",
    # facade
    "MemexStore",
    "GraphOperation",
    "MutationOutcome",
    "apply_mutation",
]
