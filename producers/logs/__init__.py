"""Adapters of the audit log: one interface, an embedded SQLite log and (later) Kafka."""

from producers.logs.base import AuditLog, Transaction
from producers.logs.location import open_log

__all__ = ["AuditLog", "Transaction", "open_log"]
