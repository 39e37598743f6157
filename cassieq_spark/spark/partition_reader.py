"""Reading one input partition of the cassieq source into Arrow record batches (executors).

The rows come from the engine page by page as columns (``engine/stream/columns.py``: the
rules of ``engine/stream/read.py`` for stream batches and of ``engine/stream/snapshot.py`` for
``spark.read``, evaluated over whole pages); this module picks the engine call for the
partition's kind and turns each page into a RecordBatch of exactly the source's schema
(PySpark 4.2+ checks types, column order and nullability of what ``read()`` yields), column by
column: a Python step per row is left only for rows with headers.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema

from ..config import connection_from_options
from ..engine.core.messages import HEADER_GROUP
from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection, shared_connection
from ..engine.stream import columns
from ..engine.stream import deliveries as stream_deliveries
from ..engine.stream.tally import TallyRecorder
from .partition import KIND_EMPTY, KIND_IDS, KIND_SNAPSHOT, KIND_TIMERS, CassieQPartition
from .schema import SOURCE_SCHEMA

ARROW_SCHEMA = to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")
_HEADERS = ARROW_SCHEMA.field("headers").type
_ENQUEUED = ARROW_SCHEMA.field("enqueued_at").type


def _headers(headers: Sequence, n: int) -> tuple[pa.Array, pa.Array]:
    """The headers column (an empty map where a row has none) and the group column: a Python
    step per row only in pages where some row has headers."""
    if headers.count(None) == n:
        empty = pa.array(np.zeros(n + 1, dtype=np.int32))
        no_str = pa.array([], pa.string())
        return pa.MapArray.from_arrays(empty, no_str, no_str, type=_HEADERS), pa.nulls(
            n, pa.string()
        )
    items = [list(h.items()) if h else [] for h in headers]
    groups = [h.get(HEADER_GROUP) if h else None for h in headers]
    return pa.array(items, type=_HEADERS), pa.array(groups, type=pa.string())


def to_batch(
    d: columns.Deliveries, queue: str, incarnation: str, bucket_size: int
) -> pa.RecordBatch:
    """A page of deliveries as a RecordBatch of exactly ``ARROW_SCHEMA``, column by column."""
    rows, n = d.rows, len(d)
    value = rows.payload if rows.payload.null_count == 0 else pc.fill_null(rows.payload, b"")
    headers, group = _headers(rows.headers, n)
    arrays = [
        rows.id,
        value,
        headers,
        pc.multiply(rows.enqueued_at, 1000).cast(_ENQUEUED),  # epoch ms -> us
        pc.divide(rows.id, bucket_size),  # ids are never negative: the floor division
        d.counts,
        pa.repeat(pa.scalar(queue, pa.string()), n),
        pa.repeat(pa.scalar(incarnation, pa.string()), n),
        group,
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _deliveries(conn: Connection, p: CassieQPartition) -> Iterator[columns.Deliveries]:
    """The pages of messages partition ``p`` delivers, with their delivery counts."""
    if p.kind == KIND_EMPTY:
        return iter(())
    queue = QueueInfo(name=p.queue, queue_id=uuid.UUID(p.queue_id), bucket_size=p.bucket_size)
    if p.kind == KIND_IDS:
        pages = columns.read_id_path(conn, queue, p.lo, p.hi, p.end_ts, p.excluded, p.replay)
        return _counted(conn, queue, p, pages)
    if p.kind == KIND_TIMERS:
        pages = columns.read_timer_path(conn, queue, p.ids, p.end_ts, p.excluded, p.replay)
        return _counted(conn, queue, p, pages)
    if p.kind == KIND_SNAPSHOT:
        return columns.read_unacked(conn, queue, p.lo, p.hi, p.reader)
    raise ValueError(f"unknown partition kind {p.kind!r}")


def _counted(
    conn: Connection,
    queue: QueueInfo,
    p: CassieQPartition,
    pages: Iterator[columns.Deliveries],
) -> Iterator[columns.Deliveries]:
    """A stream batch's pages, counted as a delivery of this run (``engine/stream/deliveries.py``)."""
    if not p.run:  # countDeliveries=false
        return pages
    part = stream_deliveries.part_key(p.kind, p.lo, p.hi, p.ids, p.end_ts)
    earlier = stream_deliveries.EarlierRuns(conn, queue.queue_id, part, p.run)
    # The first page is read while the run's record is written; nothing is handed on before
    # the record is (EarlierRuns.count).
    first = next(pages, None)
    return stream_deliveries.with_counts_pages(
        conn,
        queue,
        itertools.chain([first], pages) if first is not None else iter(()),
        earlier.count(),
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
    recorder = None
    if partition.kind == KIND_IDS and partition.tally_run:
        recorder = TallyRecorder(
            uuid.UUID(partition.queue_id),
            partition.tally_run,
            partition.end_ts,
            partition.lo,
            partition.hi,
        )
    for page in _deliveries(conn, partition):
        if recorder is not None:
            recorder.add(page.rows)
        yield to_batch(page, partition.queue, partition.queue_id, partition.bucket_size)
    # Only once every page was handed on: a task that stopped early records nothing.
    if recorder is not None:
        recorder.record(conn)
