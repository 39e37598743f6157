"""CPU per message of the source's executor read, in one process, without Spark: the pages of a
stream batch's id path turned into the source's Arrow batches, row by row (the reference rules
of ``engine/stream/read.py``, a named row per message, Python lists into Arrow arrays) against
column by column (``engine/stream/columns.py`` + ``partition_reader.to_batch``).

CPU time of the process (``time.process_time``: the driver's I/O thread that decodes the pages
included) rather than wall time, so that a loaded machine (a shared Cassandra node, other
work on the same cores) shifts both alike; each repeat runs both, in turn, over the same rows.

    .venv/bin/python -m bench.source_read_cpu --port 49142 --rows 50000 --size 100 --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable

import pyarrow as pa

from cassieq_spark.engine.core.messages import HEADER_GROUP
from cassieq_spark.engine.core.queues import get_queue
from cassieq_spark.engine.stream import columns
from cassieq_spark.engine.stream import read as stream_read
from cassieq_spark.spark.partition_reader import ARROW_SCHEMA, to_batch

from .common import BenchConfig, add_cassandra_args, client, ensure_keyspace, payloads

ROWS_PER_BATCH = 4096  # the row-by-row builder's batch size


def by_rows(conn, info, n: int, end_ts: int) -> int:
    """The row-by-row conversion: a named row and a delivery per message, Python lists."""
    cols: list[list] = [[] for _ in ARROW_SCHEMA]
    out = 0

    def flush() -> int:
        arrays = [pa.array(c, type=f.type) for c, f in zip(cols, ARROW_SCHEMA, strict=True)]
        for c in cols:
            c.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA).num_rows

    for row, count in stream_read.read_id_path(conn, info, 0, n, end_ts, ()):
        cols[0].append(row.id)
        cols[1].append(row.payload or b"")
        cols[2].append(list(row.headers.items()) if row.headers else [])
        cols[3].append(row.enqueued_at)
        cols[4].append(row.id // info.bucket_size)
        cols[5].append(count)
        cols[6].append(info.name)
        cols[7].append(str(info.queue_id))
        cols[8].append(row.headers.get(HEADER_GROUP) if row.headers else None)
        if len(cols[0]) >= ROWS_PER_BATCH:
            out += flush()
    return out + (flush() if cols[0] else 0)


def by_columns(conn, info, n: int, end_ts: int) -> int:
    """What the executors run: pages as columns, the rules over whole columns."""
    out = 0
    for d in columns.read_id_path(conn, info, 0, n, end_ts, ()):
        out += to_batch(d, info.name, str(info.queue_id), info.bucket_size).num_rows
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.source_read_cpu")
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--repeats", type=int, default=3)
    add_cassandra_args(ap)
    args = ap.parse_args(argv)
    cfg = BenchConfig.make(quick=True, contact_points=args.contact_points, port=args.port)
    ensure_keyspace(cfg)
    n = args.rows
    with client(cfg) as c:
        queue = f"read-cpu-{uuid.uuid4().hex[:8]}"
        c.create_queue(queue)
        data = payloads(n, args.size)
        for i in range(0, n, 10_000):
            c.put_many(queue, data[i : i + 10_000])
        info = get_queue(c.conn, queue)
        end_ts = int(time.time() * 1000) + 3_600_000
        paths: dict[str, Callable] = {"rows": by_rows, "columns": by_columns}
        us: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.repeats):
            for name, path in paths.items():
                t0 = time.process_time()
                got = path(c.conn, info, n, end_ts)
                if got != n:
                    raise RuntimeError(f"{name}: {got} rows, expected {n}")
                us[name].append(1e6 * (time.process_time() - t0) / n)
        c.delete_queue(queue)
    for name, v in us.items():
        print(
            f"{args.size} B {name:8s} CPU us/message: median {statistics.median(v):.2f} "
            f"(min {min(v):.2f}, max {max(v):.2f}; {', '.join(f'{x:.2f}' for x in v)})"
        )
    ratio = statistics.median(us["rows"]) / statistics.median(us["columns"])
    print(f"{args.size} B rows / columns: {ratio:.2f}x the CPU per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
