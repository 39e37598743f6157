"""cassieq-spark: a durable message queue stored in Apache Cassandra, with a PySpark 4
structured-streaming source and sink."""

from __future__ import annotations

from .client import QueueClient
from .config import ConnectionConfig
from .engine.messages import Message
from .engine.queues import QueueInfo
from .errors import (
    CassieQError,
    ConfigError,
    ConnectionFailedError,
    ContentionError,
    PayloadTooLargeError,
    QueueBusyError,
    QueueExistsError,
    QueueNotFoundError,
    SchemaNotBootstrappedError,
    StaleReceiptError,
)

__version__ = "0.1.0"

__all__ = [
    "QueueClient",
    "ConnectionConfig",
    "Message",
    "QueueInfo",
    "CassieQError",
    "ConfigError",
    "ConnectionFailedError",
    "ContentionError",
    "PayloadTooLargeError",
    "QueueBusyError",
    "QueueExistsError",
    "QueueNotFoundError",
    "SchemaNotBootstrappedError",
    "StaleReceiptError",
]
