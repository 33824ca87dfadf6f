"""The audit-memory fold of seeds 000/001: events in, `MemoryState` out."""

from projector.audit.checks import check_append
from projector.audit.state import MemoryState, RecallStats, fold, replay

__all__ = ["MemoryState", "RecallStats", "check_append", "fold", "replay"]
