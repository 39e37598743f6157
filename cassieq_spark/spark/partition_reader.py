"""Reading one input partition of the cassieq source into Arrow record batches (executors).

The rows come from the engine (``engine/stream/read.py`` for stream batches,
``engine/stream/snapshot.py`` for ``spark.read``); this module only picks the engine call for the
partition's kind and turns its rows into RecordBatches of exactly the source's schema
(PySpark 4.2+ checks types, column order and nullability of what ``read()`` yields).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from ..config import connection_from_options
from ..engine.core.messages import HEADER_GROUP
from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection, shared_connection
from ..engine.stream import deliveries as stream_deliveries
from ..engine.stream import read as stream_read
from ..engine.stream import snapshot
from .partition import KIND_EMPTY, KIND_IDS, KIND_SNAPSHOT, KIND_TIMERS, CassieQPartition
from .schema import SOURCE_SCHEMA

ROWS_PER_BATCH = 4096
ARROW_SCHEMA = to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")


class _BatchBuilder:
    """Collects message rows and cuts them into RecordBatches of exactly ``ARROW_SCHEMA``."""

    def __init__(self, queue: str, incarnation: str, bucket_size: int):
        self.queue = queue
        self.incarnation = incarnation
        self.bucket_size = bucket_size
        self._clear()

    def _clear(self) -> None:
        self.cols: list[list] = [[] for _ in ARROW_SCHEMA]

    def add(self, row, delivery_count: int) -> pa.RecordBatch | None:
        c = self.cols
        c[0].append(row.id)
        c[1].append(row.payload or b"")
        c[2].append(list(row.headers.items()) if row.headers else [])
        c[3].append(row.enqueued_at)
        c[4].append(row.id // self.bucket_size)
        c[5].append(delivery_count)
        c[6].append(self.queue)
        c[7].append(self.incarnation)
        c[8].append(row.headers.get(HEADER_GROUP) if row.headers else None)
        return self.flush() if len(c[0]) >= ROWS_PER_BATCH else None

    def flush(self) -> pa.RecordBatch | None:
        if not self.cols[0]:
            return None
        arrays = [
            pa.array(col, type=f.type) for col, f in zip(self.cols, ARROW_SCHEMA, strict=True)
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _deliveries(conn: Connection, p: CassieQPartition) -> Iterator[stream_read.Delivery]:
    """(row, delivery_count) of the messages partition ``p`` delivers."""
    if p.kind == KIND_EMPTY:
        return iter(())
    queue = QueueInfo(name=p.queue, queue_id=uuid.UUID(p.queue_id), bucket_size=p.bucket_size)
    if p.kind == KIND_IDS:
        rows = stream_read.read_id_path(conn, queue, p.lo, p.hi, p.end_ts, p.excluded, p.replay)
        return _counted(conn, queue, p, rows)
    if p.kind == KIND_TIMERS:
        rows = stream_read.read_timer_path(conn, queue, p.ids, p.end_ts, p.excluded, p.replay)
        return _counted(conn, queue, p, rows)
    if p.kind == KIND_SNAPSHOT:
        return snapshot.read_unacked(conn, queue, p.lo, p.hi, p.reader)
    raise ValueError(f"unknown partition kind {p.kind!r}")


def _counted(
    conn: Connection, queue: QueueInfo, p: CassieQPartition, rows: Iterator[stream_read.Delivery]
) -> Iterator[stream_read.Delivery]:
    """A stream batch's rows, counted as a delivery of this run (``engine/stream/deliveries.py``)."""
    if not p.run:  # countDeliveries=false
        return rows
    part = stream_deliveries.part_key(p.kind, p.lo, p.hi, p.ids, p.end_ts)
    earlier = stream_deliveries.earlier_runs(conn, queue.queue_id, part, p.run)
    return stream_deliveries.with_counts(
        conn,
        queue,
        rows,
        earlier,
        p.max_delivery_count,
        max_attempts=p.max_batch_attempts or None,
        drop_allowed=p.drop_allowed,
        what=_describe(p),
    )


def _describe(p: CassieQPartition) -> str:
    """The partition's messages, for an error message."""
    if p.ids:
        more = f" ... {p.ids[-1]}" if len(p.ids) > 1 else ""
        return f"the {len(p.ids)} due messages with ids {p.ids[0]}{more}"
    return f"ids {p.lo}..{p.hi - 1}"


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, CassieQPartition):
        raise TypeError(f"not a cassieq partition: {partition!r}")
    conn = shared_connection(connection_from_options(dict(partition.connection)))
    builder = _BatchBuilder(partition.queue, partition.queue_id, partition.bucket_size)
    for row, deliveries in _deliveries(conn, partition):
        batch = builder.add(row, deliveries)
        if batch is not None:
            yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch
