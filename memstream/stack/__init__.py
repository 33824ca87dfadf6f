"""The real stack: Apache Kafka (KRaft) and Redis, fetched, started and stopped by memstream.

from memstream.stack import StackConfig, StackPaths, up, down, status
result = up()            # idempotent; health-checked
result.bootstrap, result.redis_url
"""

from __future__ import annotations

from memstream.stack.config import DEFAULT_KAFKA_VERSION, StackConfig
from memstream.stack.errors import StackError
from memstream.stack.manager import (
    ServerStatus,
    StackStatus,
    UpResult,
    down,
    read_env,
    status,
    up,
)
from memstream.stack.paths import StackPaths, default_stack_dir

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "ServerStatus",
    "StackConfig",
    "StackError",
    "StackPaths",
    "StackStatus",
    "UpResult",
    "default_stack_dir",
    "down",
    "read_env",
    "status",
    "up",
]
