"""The floor of any Python data source on this Spark: ``format("cassieq_floor")`` hands Spark
ready-made Arrow record batches of exactly the cassieq source's schema, with no Cassandra and
no work per batch, so what it costs is Spark's own path for a Python source (the Python
worker's framing of the batches, the JVM's conversion of Arrow columns into rows).

The source suite reads it beside the SCC read: if the floor alone is not faster than the
connector's whole read (Cassandra included), no change inside this project's Python can bring
the source to the connector's rate; what would is named in bench/README.md.

Its batches: ``PAGE_ROWS`` messages of ``payload_bytes`` each, no headers, one queue name and
incarnation, delivery count 1, built once per task and yielded again until the partition's rows
are handed on.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from .cpu_split import CpuSplit

PAGE_ROWS = 5000


class _Slice(InputPartition):
    def __init__(self, rows: int, payload_bytes: int):
        self.rows = rows
        self.payload_bytes = payload_bytes


def _batch(rows: int, payload_bytes: int):
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from cassieq_spark.spark.partition_reader import ARROW_SCHEMA

    ids = pa.array(np.arange(rows, dtype=np.int64))
    offsets = pa.array(np.zeros(rows + 1, dtype=np.int32))
    no_str = pa.array([], pa.string())
    arrays = [
        ids,
        pa.array([b"x" * payload_bytes] * rows, pa.binary()),
        pa.MapArray.from_arrays(offsets, no_str, no_str, type=ARROW_SCHEMA.field("headers").type),
        pa.array(np.full(rows, 1_790_000_000_000_000, dtype=np.int64)).cast(
            ARROW_SCHEMA.field("enqueued_at").type
        ),
        pc.divide(ids, 1000),
        pa.array(np.ones(rows, dtype=np.int32)),
        pa.repeat(pa.scalar("bench-floor", pa.string()), rows),
        pa.repeat(pa.scalar("00000000-0000-0000-0000-000000000000", pa.string()), rows),
        pa.nulls(rows, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


class _Reader(DataSourceReader):
    def __init__(self, options: dict[str, str]):
        self.rows = int(options.get("rows", "100000"))
        self.partitions_ = int(options.get("partitions", "10"))
        self.payload_bytes = int(options.get("payloadBytes", "100"))

    def partitions(self):
        per, extra = divmod(self.rows, self.partitions_)
        return [
            _Slice(per + (1 if i < extra else 0), self.payload_bytes)
            for i in range(self.partitions_)
        ]

    def read(self, partition):
        left = partition.rows
        page = _batch(min(PAGE_ROWS, left), partition.payload_bytes) if left else None
        while left > 0:
            batch = page if left >= page.num_rows else page.slice(0, left)
            left -= batch.num_rows
            yield batch


class FloorSource(DataSource):
    """``spark.read.format("cassieq_floor")``, options ``rows``, ``partitions``,
    ``payloadBytes``."""

    @classmethod
    def name(cls) -> str:
        return "cassieq_floor"

    def schema(self):
        from cassieq_spark.spark.schema import SOURCE_SCHEMA

        return SOURCE_SCHEMA

    def reader(self, schema):
        return _Reader(self.options)


def read_floor(spark, rows: int, partitions: int = 10) -> dict:
    """One batch read of ``rows`` floor rows into ``noop``: wall seconds, the CPU split, and
    the rows Spark counted (after the timed read)."""
    spark.dataSource.register(FloorSource)
    opts = {"rows": str(rows), "partitions": str(partitions)}
    with CpuSplit() as split:
        spark.read.format("cassieq_floor").options(**opts).load().write.format("noop").mode(
            "overwrite"
        ).save()
    counted = spark.read.format("cassieq_floor").options(**opts).load().count()
    return {"wall": split.wall, "rows": counted, "cpu": split}
