"""The Spark side of cassieq: the ``cassieq`` data source (streaming sink and source)."""

from __future__ import annotations

from typing import Any

from .provider import CassieQDataSource


def register(spark: Any) -> None:
    """Make ``format("cassieq")`` available in ``spark`` (a SparkSession)."""
    spark.dataSource.register(CassieQDataSource)


__all__ = ["CassieQDataSource", "register"]
