"""Adapters of the log: one interface, an embedded SQLite log and Kafka."""

from producers.logs.base import Appended, AuditLog, LifecycleRecord, Log, Transaction
from producers.logs.location import open_log

__all__ = ["Appended", "AuditLog", "LifecycleRecord", "Log", "Transaction", "open_log"]
