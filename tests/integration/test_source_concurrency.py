"""The source under concurrent producers (SIGKILLs of the driver process: tests/system/test_driver_crash_restarts.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.stream import Collector, start, wait_for

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import read_range
from cassieq_spark.engine.upkeep.repair import skipped_ranges
from cassieq_spark.spark import register

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PRODUCER = textwrap.dedent(
    """
    import json, sys
    from cassieq_spark import QueueClient
    opts, queue, n, out = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
    ids = []
    with QueueClient.from_options(opts) as c:
        for i in range(n):
            if i % 10 == 0:
                ids += c.put_many(queue, [f"{out}-many-{i}-{j}" for j in range(7)])
            else:
                ids.append(c.put(queue, f"{out}-one-{i}"))
    with open(out, "w") as f:
        json.dump(ids, f)
    """
)


def test_concurrent_producers_every_id_delivered_nothing_to_repair(
    spark, queue_client, queue_name, cassieq_options, tmp_path
):
    register(spark)
    # A generous repair timeout: on this slow machine a sink task may keep its block open for
    # many seconds, and the source must wait for it rather than pass it.
    queue_client.create_queue(queue_name, bucket_size=50, repair_timeout=120)
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-src"}
    c = Collector()
    src = start(spark, opts, c, tmp_path / "src", {"processingTime": "200 milliseconds"})
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs, outs = [], []
    sink = None
    try:
        wait_for(lambda: src.lastProgress is not None, 120, "the source to start", src)
        for k in range(3):
            out = tmp_path / f"ids{k}.json"
            outs.append(out)
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(script),
                        json.dumps(cassieq_options),
                        queue_name,
                        "150",
                        str(out),
                    ],
                    env=env,
                )
            )
        rate = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", "40")
            .load()
            .selectExpr("concat('rate-', CAST(value AS STRING)) AS value")
        )
        sink = (
            rate.writeStream.format("cassieq")
            .options(**cassieq_options, queue=queue_name)
            .option("checkpointLocation", str(tmp_path / "sink"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        for p in procs:
            assert p.wait(300) == 0
        wait_for(
            lambda: (sink.lastProgress or {}).get("batchId", 0) >= 3, 180, "sink batches", sink
        )
        sink.stop()
        sink.awaitTermination(60)
        # Rows of the sink's committed batches: the rate source numbers its rows 0, 1, ... in
        # order, so these values must all be delivered; the batch the stop killed may add more.
        committed = sum(p["numInputRows"] for p in sink.recentProgress)
        produced = sorted(i for out in outs for i in json.loads(out.read_text()))
        # Messages in the queue, counted from its rows, not from the `enqueued` counter: that
        # misses a sink task the stop killed between its close and its count. The counter is
        # read first: a task the stop killed may still be finishing its write (its Python
        # worker outlives the query), and rows read before its count would fall behind it
        # (once in CI, by that test's 20-row micro-batch;
        # test_enqueued_counter_never_ahead_of_rows.py).
        enqueued = queue_client.stats(queue_name)["enqueued"]
        info = queue_client.get_queue(queue_name)
        next_id = monoton.horizon(queue_client.conn, info, 0).next_id
        rows = list(read_range(queue_client.conn, info, 0, next_id, "id, dead"))
        total = sum(1 for r in rows if not r.dead)
        assert total >= enqueued  # no count without a live row
        assert total > len(produced)  # the sink wrote too
        wait_for(lambda: len(c.ids) >= total, 180, f"{total} messages delivered", src)
        time.sleep(2)  # a late duplicate would show up here
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if sink is not None and sink.isActive:
            sink.stop()
        src.stop()
    delivered = c.ids
    assert len(delivered) == len(set(delivered)) == total  # no crash: no duplicates
    assert set(produced) <= set(delivered)
    values = {r.value.decode() for r in c.rows}
    assert len(values) == total  # every payload once, including the sink's
    missing = {f"rate-{k}" for k in range(committed)} - values
    assert not missing, f"rows of committed sink batches never delivered: {sorted(missing)[:10]}"
    assert skipped_ranges(queue_client.conn, queue_client.get_queue(queue_name)) == []
    report = queue_client.repair(queue_name)
    assert report.republished == 0 and report.lost_ids == 0
    st = queue_client.stats(queue_name)
    assert st["republished"] == 0 and st["backlog"] == 0
