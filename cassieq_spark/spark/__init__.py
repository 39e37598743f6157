"""The Spark side of cassieq: the ``cassieq`` data source (streaming sink and source)."""

from __future__ import annotations

from typing import Any

from ..extras import require

require("the Spark connector")

from .dead_letter import dead_letter
from .lag import CassieQLagListener, QueueLag, lag_listener
from .provider import CassieQDataSource

HIDE_TRACEBACK_CONF = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"
# Over Spark Connect the server appends its JVM stack trace to every error's message unless
# this session setting is off.
SERVER_STACKTRACE_CONF = "spark.sql.connect.serverStacktrace.enabled"


def is_connect(spark: Any) -> bool:
    """True for a Spark Connect session (``sc://``): no ``SparkContext`` and no RDDs there, and
    the connector runs in the server's Python workers."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def register(spark: Any, short_errors: bool = False) -> None:
    """Make ``format("cassieq")`` available in ``spark`` (a SparkSession, classic or Spark
    Connect; over Connect the server's Python must have cassieq-spark installed).

    ``short_errors``: set Spark's ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``,
    so that an error of the connector reaches the user as Spark's one-line prefix followed by
    our own one-line message (``cassieq_spark.errors.ConfigError: option 'port' ...``) instead
    of a Python traceback that ends with it; over Spark Connect also
    ``spark.sql.connect.serverStacktrace.enabled=false`` (no JVM stack trace after it). It
    applies to every Python UDF of the session, hence opt-in."""
    spark.dataSource.register(CassieQDataSource)
    if short_errors:
        spark.conf.set(HIDE_TRACEBACK_CONF, "true")
        if is_connect(spark):
            spark.conf.set(SERVER_STACKTRACE_CONF, "false")


__all__ = [
    "HIDE_TRACEBACK_CONF",
    "SERVER_STACKTRACE_CONF",
    "CassieQDataSource",
    "CassieQLagListener",
    "QueueLag",
    "dead_letter",
    "is_connect",
    "lag_listener",
    "register",
]
