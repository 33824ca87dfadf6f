"""memstream: audit-ready, event-sourced memory for AI agents.

Both seeds' APIs in one namespace: the audit memory (seeds 000/001) and the epistemic
graph (seed 003). Their names do not collide.
"""

from memstream.api_audit import *  # noqa: F403
from memstream.api_audit import __all__ as _audit_all
from memstream.api_graph import *  # noqa: F403
from memstream.api_graph import __all__ as _graph_all
from memstream.api_graph_work import *  # noqa: F403
from memstream.api_graph_work import __all__ as _work_all

__all__ = [*_audit_all, *_graph_all, *_work_all]
