"""cassieq-spark: a durable message queue stored in Apache Cassandra, with a PySpark 4
structured-streaming source and sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .client import PutEntry, QueueClient
from .config import ConnectionConfig
from .engine.consume.batch_ack import ReceiptResult
from .engine.core.messages import Message
from .engine.core.queues import QueueInfo
from .errors import (
    CassandraUnavailableError,
    CassieQError,
    ClientClosedError,
    ConfigError,
    ConnectionFailedError,
    ContentionError,
    MissingExtraError,
    PayloadTooLargeError,
    PermissionDeniedError,
    QueueBusyError,
    QueueExistsError,
    QueueNotFoundError,
    QueueSettingsMismatchError,
    SchemaNotBootstrappedError,
    StaleReceiptError,
)

if TYPE_CHECKING:
    from .async_client import AsyncQueueClient

__version__ = "0.1.0"

__all__ = [
    "QueueClient",
    "PutEntry",
    "AsyncQueueClient",
    "ConnectionConfig",
    "Message",
    "ReceiptResult",
    "QueueInfo",
    "CassandraUnavailableError",
    "CassieQError",
    "ClientClosedError",
    "ConfigError",
    "ConnectionFailedError",
    "ContentionError",
    "MissingExtraError",
    "PermissionDeniedError",
    "PayloadTooLargeError",
    "QueueBusyError",
    "QueueExistsError",
    "QueueNotFoundError",
    "QueueSettingsMismatchError",
    "SchemaNotBootstrappedError",
    "StaleReceiptError",
]


def __getattr__(name: str):
    # The asyncio client runs on greenlet; load it only when asked for, so a Spark executor's
    # environment needs only the packages docs/spark-cluster.md lists.
    if name == "AsyncQueueClient":
        from .async_client import AsyncQueueClient

        return AsyncQueueClient
    # The Spark data source needs pyspark; load it only when asked for, so the client and the
    # CLI work without pyspark.
    if name in ("CassieQDataSource", "dead_letter", "register"):
        from .extras import require

        require("the Spark connector")
        from . import spark as _spark

        return getattr(_spark, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
