"""The Spark side of cassieq: the ``cassieq`` data source (streaming sink and source)."""

from __future__ import annotations

from typing import Any

from ..extras import require

require("the Spark connector")

from .dead_letter import dead_letter
from .lag import CassieQLagListener, QueueLag, lag_listener
from .provider import CassieQDataSource

HIDE_TRACEBACK_CONF = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"


def register(spark: Any, short_errors: bool = False) -> None:
    """Make ``format("cassieq")`` available in ``spark`` (a SparkSession).

    ``short_errors``: set Spark's ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``,
    so that an error of the connector reaches the user as Spark's one-line prefix followed by
    our own one-line message (``cassieq_spark.errors.ConfigError: option 'port' ...``) instead
    of a Python traceback that ends with it. It applies to every Python UDF of the session,
    hence opt-in."""
    spark.dataSource.register(CassieQDataSource)
    if short_errors:
        spark.conf.set(HIDE_TRACEBACK_CONF, "true")


__all__ = [
    "HIDE_TRACEBACK_CONF",
    "CassieQDataSource",
    "CassieQLagListener",
    "QueueLag",
    "dead_letter",
    "lag_listener",
    "register",
]
