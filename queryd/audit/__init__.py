"""The pure reads of the audit memory."""

from queryd.audit.search import search

__all__ = ["search"]
