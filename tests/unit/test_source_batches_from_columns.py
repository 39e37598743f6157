"""A page of deliveries becomes the source's RecordBatch column by column
(``partition_reader.to_batch``) with the same values a row-by-row conversion gives: a null
payload as empty bytes, rows without headers as empty maps, the group from the header, the
enqueued time in microseconds (null where the row has none), the bucket from the id."""

from __future__ import annotations

import pyarrow as pa
import pytest
from cassandra.util import datetime_from_timestamp

from cassieq_spark.engine.core.messages import HEADER_GROUP
from cassieq_spark.engine.stream import columns
from cassieq_spark.spark.partition_reader import ARROW_SCHEMA, to_batch

pytestmark = [pytest.mark.unit, pytest.mark.fast]

END = 1_790_000_000_000
BUCKET = 1000


def _page(headers_every: int) -> list[tuple]:
    out = []
    for i in range(2500):
        h = None
        if headers_every and i % headers_every == 0:
            h = {"k": str(i)} if i % 2 else {HEADER_GROUP: f"g{i % 7}", "x": "y"}
        out.append(
            (
                i * 3 + 17,
                None if i % 11 == 0 else b"p" * (i % 40),
                h,
                None if i % 13 == 0 else END - i,
                None,
                None,
                None if i % 5 else 2,
                None,
                None,
                None,
                None,
                None,
            )
        )
    return out


def _row_by_row(tuples, counts) -> pa.RecordBatch:
    """The conversion one row at a time, into Python lists, then Arrow arrays."""
    cols: list[list] = [[] for _ in ARROW_SCHEMA]
    for t, count in zip(tuples, counts, strict=True):
        mid, payload, headers, enq = t[0], t[1], t[2], t[3]
        cols[0].append(mid)
        cols[1].append(payload or b"")
        cols[2].append(list(headers.items()) if headers else [])
        cols[3].append(None if enq is None else datetime_from_timestamp(enq / 1000.0))
        cols[4].append(mid // BUCKET)
        cols[5].append(count)
        cols[6].append("q1")
        cols[7].append("inc-1")
        cols[8].append(headers.get(HEADER_GROUP) if headers else None)
    arrays = [pa.array(c, type=f.type) for c, f in zip(cols, ARROW_SCHEMA, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


@pytest.mark.parametrize("headers_every", [0, 1, 17], ids=["no-headers", "all", "some"])
def test_a_page_as_a_batch_matches_the_row_by_row_conversion(headers_every):
    tuples = _page(headers_every)
    rows = columns.Rows.from_columns(tuple(zip(*tuples, strict=True)))
    d = columns.deliver_id_path(rows, END, ())
    assert len(d) == len(tuples) - sum(1 for t in tuples if t[3] is None)
    kept = [t for t in tuples if t[3] is not None]
    got = to_batch(d, "q1", "inc-1", BUCKET)
    assert got.schema == ARROW_SCHEMA
    assert got.equals(_row_by_row(kept, d.counts.to_pylist()))


def test_a_snapshot_page_keeps_rows_without_an_enqueued_time():
    tuples = _page(3)
    rows = columns.Rows.from_columns(tuple(zip(*[t[:10] for t in tuples], strict=True)))
    d = columns.deliver_unacked(rows, reader=0)
    got = to_batch(d, "q1", "inc-1", BUCKET)
    assert got.equals(_row_by_row(tuples, d.counts.to_pylist()))
    assert got.column("enqueued_at").null_count == sum(1 for t in tuples if t[3] is None)
