"""memstream: audit-ready, event-sourced memory for AI agents.

Both seeds' APIs in one namespace: the audit memory (seeds 000/001) and the epistemic
graph (seed 003). Their names do not collide.
"""

from memstream.public.audit_memory import *  # noqa: F403
from memstream.public.audit_memory import __all__ as _audit_all
from memstream.public.intents_tasks_store import *  # noqa: F403
from memstream.public.intents_tasks_store import __all__ as _work_all
from memstream.public.memory_graph import *  # noqa: F403
from memstream.public.memory_graph import __all__ as _graph_all

__all__ = [*_audit_all, *_graph_all, *_work_all]
