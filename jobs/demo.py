"""The main job: a local end-to-end demo of cassieq-spark (`make demo`).

1. uses the Cassandra 5.x answering on 127.0.0.1:9042 (left running), or starts the embedded one
   (on the next free port if 9042 is held by something else), and bootstraps the schema;
2. creates the queue `demo`;
3. a Spark streaming query turns generated rows into queue messages (the `cassieq` sink);
4. a second streaming query consumes the queue (the `cassieq` source) and prints running counts;
   each micro-batch is acked when Spark commits it;
5. runs the repair job once and prints the queue's stats;
6. stops what it started.

While it runs, the queue is watched as `cassieq stats demo --watch` shows it (a live table on a
terminal, one line per refresh otherwise). Everything it says goes to `--out`/demo.log too, and it
ends by writing a plot of enqueued vs acked over time next to that log and printing its path.

A failure is one line; DEBUG=1 shows the traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from cassieq_dev.local_cassandra import cassandra_endpoint, report_failure  # noqa: E402
from cassieq_spark import QueueClient, QueueNotFoundError, plot, watch  # noqa: E402
from cassieq_spark.errors import one_line  # noqa: E402

QUEUE = "demo"
DEFAULT_OUT = os.path.join(ROOT, ".demo")
LOG_NAME = "demo.log"
PLOT_NAME = "demo-enqueued-vs-acked.png"
# Each refresh scans the queue's live buckets (engine/core/stats.py): seconds of driver work once
# tens of thousands of messages wait, so not every second on a small machine.
WATCH_INTERVAL = 2.0

_log: TextIO | None = None


def _stamped(text: str) -> str:
    return f"[demo {time.strftime('%H:%M:%S')}] {text}"


def log_only(text: str) -> None:
    if _log is not None:
        _log.write(_stamped(text) + "\n")
        _log.flush()


def say(text: str) -> None:
    print(_stamped(text), flush=True)
    log_only(text)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--seconds",
        type=float,
        default=30.0,
        help="how long the producer query runs once its first messages landed",
    )
    ap.add_argument("--rows-per-second", type=int, default=500)
    ap.add_argument("--port", type=int, default=9042)
    ap.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"directory for {LOG_NAME} and {PLOT_NAME} (default .demo/ in the checkout)",
    )
    ap.add_argument(
        "--master",
        default=os.environ.get("SPARK_MASTER") or "local[2]",
        help="Spark master, e.g. spark://127.0.0.1:7077 after `make spark-up` (default local[2])",
    )
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    global _log
    args.out = os.path.abspath(args.out)  # the printed paths work from any directory
    os.makedirs(args.out, exist_ok=True)
    _log = open(os.path.join(args.out, LOG_NAME), "w", encoding="utf-8")  # noqa: SIM115

    with _log, cassandra_endpoint(args.port, say=say) as cassandra:
        args.port = cassandra.port  # another one when the asked port was taken
        try:
            return run(args)
        finally:
            if cassandra.started:
                say("stopping the Cassandra this demo started")


class Watcher:
    """`cassieq stats demo --watch` beside the demo, in a thread; keeps every sample for the plot."""

    def __init__(self, client: QueueClient, queue: str) -> None:
        self.samples: list[watch.Sample] = []
        self._client = client
        self._queue = queue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-watch", daemon=True)

    def _record(self, cur: watch.Sample, prev: watch.Sample | None) -> None:
        self.samples.append(cur)
        log_only("watch " + watch.line(prev, cur))  # the log has the numbers even on a terminal

    def _run(self) -> None:
        try:
            watch.watch(
                lambda: self._client.stats(self._queue),
                WATCH_INTERVAL,
                stop=self._stop,
                on_sample=self._record,
                plain=lambda text: print(_stamped("watch " + text), flush=True),
            )
        except Exception as exc:  # the view helps to follow the demo; the demo goes on without it
            say(f"the live view stopped: {one_line(exc)}")

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def run(args) -> int:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from cassieq_spark.config import connection_from_options
    from cassieq_spark.spark import register
    from cassieq_spark.spark.repair_job import RepairSettings, run_pass

    options = {"contactPoints": "127.0.0.1", "port": str(args.port), "keyspace": "cassieq"}
    with QueueClient.from_options(options) as client:
        client.bootstrap(create_keyspace=True)
        with contextlib.suppress(QueueNotFoundError):  # a previous run's queue goes first
            client.delete_queue(QUEUE)
        client.create_queue(QUEUE, bucket_size=1000, repair_timeout=5.0)
        say(f"queue {QUEUE!r} created in keyspace 'cassieq' (bucket size 1000)")

        # Watching starts with the empty queue, so the plot starts at zero.
        with Watcher(client, QUEUE) as watcher:
            spark = (
                SparkSession.builder.master(args.master)
                .appName("cassieq-demo")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            # Stopping a query mid-write makes Spark log the aborted task at ERROR: noise here.
            spark.sparkContext.setLogLevel("FATAL")
            register(spark)
            say(f"Spark master: {spark.sparkContext.master}")
            work = tempfile.mkdtemp(prefix="cassieq-demo-")

            produced = (
                spark.readStream.format("rate")
                .option("rowsPerSecond", args.rows_per_second)
                .load()
                .select(
                    F.concat(F.lit("order-"), F.col("value").cast("string")).alias("value"),
                    F.create_map(F.lit("source"), F.lit("rate")).alias("headers"),
                )
            )
            producer = (
                produced.writeStream.format("cassieq")
                .options(**options, queue=QUEUE)
                .option("checkpointLocation", os.path.join(work, "producer"))
                .trigger(processingTime="1 second")
                .start()
            )
            say(
                f"producer query started: a rate source at {args.rows_per_second} rows/s -> cassieq sink"
            )

            seen = {"rows": 0, "batches": 0, "min_id": None, "max_id": None}

            def on_batch(df, batch_id):
                row = df.agg(
                    F.count("*").alias("n"), F.min("id").alias("lo"), F.max("id").alias("hi")
                ).first()
                if row.n:
                    seen["rows"] += row.n
                    seen["batches"] += 1
                    seen["min_id"] = (
                        row.lo if seen["min_id"] is None else min(seen["min_id"], row.lo)
                    )
                    seen["max_id"] = (
                        row.hi if seen["max_id"] is None else max(seen["max_id"], row.hi)
                    )
                    say(
                        f"consumer batch {batch_id}: {row.n} messages (ids {row.lo}..{row.hi}), {seen['rows']} so far"
                    )

            consumer = (
                spark.readStream.format("cassieq")
                .options(**options, queue=QUEUE)
                .load()
                .writeStream.foreachBatch(on_batch)
                .option("checkpointLocation", os.path.join(work, "consumer"))
                .trigger(processingTime="2 seconds")
                .start()
            )
            say(
                "consumer query started: cassieq source -> running counts (acked when each batch commits)"
            )

            # The sink's first batch starts Python workers: on a loaded machine that alone can
            # outlast --seconds, and a run with nothing enqueued proves nothing. The clock
            # starts once messages arrive.
            started = time.monotonic()
            while client.stats(QUEUE)["enqueued"] == 0 and time.monotonic() < started + 180:
                time.sleep(0.5)
            say(f"first messages enqueued {time.monotonic() - started:.1f} s after the start")
            time.sleep(args.seconds)
            producer.stop()
            enqueued = client.stats(QUEUE)["enqueued"]
            say(f"producer stopped after {args.seconds:.0f} s more: {enqueued} messages enqueued")

            deadline = time.time() + 120
            while time.time() < deadline and seen["rows"] < enqueued:
                time.sleep(1)
            time.sleep(5)  # one more trigger: the last batch is acked when the next one is planned
            consumer.stop()
            say(f"consumer stopped: {seen['rows']} messages delivered in {seen['batches']} batches")

            say(
                "running the repair job once (republishes what readers skipped, reclaims finished buckets)"
            )
            reports = run_pass(spark, connection_from_options(options), [QUEUE], RepairSettings())
            say("repair: " + json.dumps(reports[0].as_dict()))
            stats = client.stats(QUEUE)
            say("queue stats: " + json.dumps(stats, default=str))
            watcher.samples.append(watch.Sample(time.monotonic(), stats))
        spark.stop()

        plotted = plot.enqueued_vs_acked(
            watcher.samples,
            Path(args.out) / PLOT_NAME,
            title=f"make demo: queue {QUEUE!r}, a rate source at {args.rows_per_second} rows/s",
        )
        say(f"log: {Path(args.out) / LOG_NAME}")
        say(f"plot of enqueued vs acked over time: {plotted}")
        ok = enqueued > 0 and seen["rows"] >= enqueued and stats["backlog"] == 0
        if ok:
            say("OK: every enqueued message was delivered and acked")
        elif not enqueued:
            say("NOT OK: the producer enqueued nothing in 3 minutes (see the Spark lines above)")
        else:
            say("NOT OK: some messages were not delivered (see above)")
        return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as exc:  # one line for the user; DEBUG=1 shows the traceback
        report_failure("make demo failed", exc)
        sys.exit(1)
