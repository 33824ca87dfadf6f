"""Adapters of the log: one interface, an embedded SQLite log and Kafka."""

from producers.logs.adapters import open_log
from producers.logs.base import Appended, AuditLog, LifecycleRecord, Log, Transaction

__all__ = ["Appended", "AuditLog", "LifecycleRecord", "Log", "Transaction", "open_log"]
