"""What acking a committed stream batch costs as the batch grows: the wall time of the driver's
ack (``StreamConsumer.ack_through``) of one batch of plain messages (never delayed, never
delivered to a client), for batches of 1,000, 10,000 and 100,000 messages, two ways:

* ``tally``: the batch's partitions (one per bucket, as the source cuts them) were read whole
  by the run that planned it, each recording its tally (``engine/stream/tally.py``), as the
  executors do; the ack reads the tallies;
* ``scan``: no tallies (a replay, or a run without them): the ack scans the batch's rows.

The batch is planned as the source's driver plans it and read in this process (the executors'
read, without Spark). Each repeat uses a fresh queue; the ack's own count (the queue's
``acked`` counter) and the reader pointer are checked before a figure is reported. The figure
to watch is the ratio of the largest batch's ack to the smallest's: 1.0 means the ack costs the
same whatever the batch size.

    .venv/bin/python -m bench.ack_cost --port 49142 --repeats 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path

from cassieq_spark.engine.core import pointers
from cassieq_spark.engine.core.queues import get_queue
from cassieq_spark.engine.stream import tally
from cassieq_spark.engine.stream.consumer import Position, StreamConsumer
from cassieq_spark.spark.partition import KIND_IDS, CassieQPartition, plan_ranges
from cassieq_spark.spark.partition_reader import read_partition

from .common import BenchConfig, add_cassandra_args, client, ensure_keyspace, payloads

SIZES = (1_000, 10_000, 100_000)
PUT_CHUNK = 10_000


def read_batch(cfg: BenchConfig, info, run: str, end) -> int:
    """The executors' read of the batch's id path (``read_partition``, the source's own), one
    partition per bucket, each recording its tally when ``run`` is given; returns the messages
    delivered."""
    connection = tuple(sorted(cfg.options().items()))
    delivered = 0
    for lo, hi in plan_ranges(end.from_id, end.id, info.bucket_size):
        part = CassieQPartition(
            KIND_IDS,
            connection=connection,
            queue=info.name,
            queue_id=str(info.queue_id),
            bucket_size=info.bucket_size,
            lo=lo,
            hi=hi,
            end_ts=end.ts,
            tally_run=run,
        )
        delivered += sum(b.num_rows for b in read_partition(part))
    return delivered


def ack_once(c, cfg: BenchConfig, n: int, size: int, way: str) -> float:
    """Seconds of the ack of one batch of ``n`` plain messages on a fresh queue."""
    queue = f"ack-cost-{uuid.uuid4().hex[:8]}"
    c.create_queue(queue)
    try:
        data = payloads(n, size)
        for i in range(0, n, PUT_CHUNK):
            c.put_many(queue, data[i : i + PUT_CHUNK])
        info = get_queue(c.conn, queue)
        run = uuid.uuid4().hex[:16] if way == "tally" else ""
        stream = StreamConsumer(c.conn, info, f"bench:{queue}", 30.0, run)
        # As in a running query: the batches before this one were acked up to now, so the
        # timer path's pointer is recent (a first batch would also look at every timer slot
        # since the queue was made, which grows with the time the fill took).
        first = stream.initial()
        end = stream.plan(Position(first.from_id, first.id, stream.clock.now_ms())).end
        if end is None or end.id - end.from_id != n:
            raise RuntimeError(f"{queue}: planned {end}, expected a batch of {n} ids")
        if read_batch(cfg, info, run, end) != n:
            raise RuntimeError(f"{queue}: the batch's read did not deliver {n} messages")
        if run:
            found = tally.read_tallies(c.conn, info.queue_id, run, end.ts, end.from_id, end.id)
            if tally.cover(end.from_id, end.id, found)[1]:
                raise RuntimeError(f"{queue}: the tasks' tallies do not cover the batch")
        before = c.stats(queue)["acked"]
        t0 = time.perf_counter()
        stream.ack_through(end)
        took = time.perf_counter() - t0
        acked = c.stats(queue)["acked"] - before
        reader = pointers.read(c.conn, info).reader
        if acked != n or reader != end.id:
            raise RuntimeError(f"{queue}: acked {acked} of {n}, reader pointer {reader}")
        stream.lease.release()
        return took
    finally:
        c.delete_queue(queue)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ack_cost")
    ap.add_argument("--size", type=int, default=100, help="payload bytes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    add_cassandra_args(ap)
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    cfg = BenchConfig.make(quick=True, contact_points=args.contact_points, port=args.port)
    ensure_keyspace(cfg)
    ways = ("tally", "scan")
    ms: dict[tuple[str, int], list[float]] = {(w, n): [] for w in ways for n in sizes}
    with client(cfg) as c:
        for _ in range(args.repeats):
            for n in sizes:
                for way in ways:
                    ms[(way, n)].append(1000 * ack_once(c, cfg, n, args.size, way))
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        f"# ack of one batch of plain {args.size} B messages [commit {commit}, "
        f"{os.cpu_count()} cores, Cassandra {cfg.contact_points}:{cfg.port} (one node, same "
        f"machine), {args.repeats} repeats, load average at the end {load}]"
    ]
    for (way, n), v in ms.items():
        lines.append(
            f"{way:5s} ack of {n:>7,}: median {statistics.median(v):8.1f} ms "
            f"(min {min(v):.1f}, max {max(v):.1f})"
        )
    lo, hi = min(sizes), max(sizes)
    for way in ways:
        ratio = statistics.median(ms[(way, hi)]) / statistics.median(ms[(way, lo)])
        lines.append(
            f"{way:5s} ack of {hi:,} / ack of {lo:,}: {ratio:.2f}x (goal: 1.0x within noise)"
        )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.results_dir:
        out = Path(args.results_dir)
        out.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
        (out / f"ack-cost-{stamp}.txt").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
