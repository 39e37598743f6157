"""Makes ``format("cassieq")`` work in any SparkSession without a ``register`` call.

PySpark 4 looks, on the first use of a Python data source, for top-level modules named
``pyspark_*`` that expose a ``DefaultSource`` and registers each under its ``name()``. This
package exists only for that lookup; the connector lives in ``cassieq_spark.spark``.
"""

from cassieq_spark.spark import CassieQDataSource as DefaultSource

__all__ = ["DefaultSource"]
