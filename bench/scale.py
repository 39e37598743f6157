"""Suite "scale": sink and source throughput on a Spark standalone cluster of 1 and 2 workers
(1 core each) against 1 and 3 Cassandra nodes, each as a ratio to 1 worker x 1 node in this run.

Every configuration writes the same ``rows`` messages with a batch ``df.write.format("cassieq")``
(Spark starts the executors before the timed write: an untimed warm-up write goes first) and
consumes them with the streaming source (``AvailableNow``, acked on commit); both are checked by
counting (``enqueued`` and ``acked`` equal to ``rows``) before a rate is reported. The 3-node ring
(127.0.0.1-3, ports 19142/17100) holds its keyspace at replication factor 1, so that adding nodes
spreads the partitions instead of copying them. On a 2-core machine the workers, the nodes and the
driver share the same cores: the ratios show overheads, not the gain of real hardware.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time

from cassieq_spark import QueueClient

from .common import BenchConfig, SuiteUnavailable, unique_queue

log = logging.getLogger("bench.scale")

MASTER_PORT, WEBUI_PORT = 7377, 8380
RING_PORT, RING_STORAGE_PORT = 19142, 17100  # not the cluster test's 19042/17000


def _session(master: str, workers: int):
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return (
        SparkSession.builder.master(master)
        .appName(f"cassieq-bench-scale-{workers}w")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", str(2 * workers))
        .getOrCreate()
    )


def _one(spark, options: dict[str, str], rows: int, parts: int) -> dict:
    """Write then consume ``rows`` messages on a fresh queue; rates in messages per second."""
    from cassieq_spark.spark import register

    register(spark)
    queue = unique_queue("scale")
    with QueueClient.from_options(options) as client:
        client.create_queue(queue)
        frame = spark.range(rows, numPartitions=parts).selectExpr("CAST(id AS STRING) AS value")
        t0 = time.perf_counter()
        frame.write.format("cassieq").options(**options).option("queue", queue).mode(
            "append"
        ).save()
        write_s = time.perf_counter() - t0
        counted: list[int] = []
        t0 = time.perf_counter()
        (
            spark.readStream.format("cassieq")
            .options(**options)
            .option("queue", queue)
            .load()
            .writeStream.foreachBatch(lambda df, _id: counted.append(df.count()))
            .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-scale-"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )
        read_s = time.perf_counter() - t0
        stats = client.stats(queue)
        client.delete_queue(queue)
    if stats["enqueued"] != rows or sum(counted) != rows or stats["acked"] != rows:
        raise RuntimeError(
            f"scale run did not do the work: enqueued {stats['enqueued']}, consumed "
            f"{sum(counted)}, acked {stats['acked']} of {rows}"
        )
    return {
        "sink_msg_s": round(rows / write_s),
        "source_msg_s": round(rows / read_s),
        "sink_seconds": round(write_s, 2),
        "source_seconds": round(read_s, 2),
    }


def _ring():
    from cassieq_dev.local_cassandra import STATE_DIR, LocalCassandra

    return LocalCassandra(
        nodes=3,
        port=RING_PORT,
        storage_port=RING_STORAGE_PORT,
        heap="384M",
        base_dir=STATE_DIR / "bench-ring",
    )


def run(cfg: BenchConfig, rows: int | None = None) -> dict:
    from cassieq_dev.local_spark import LocalSpark

    rows = rows or (20_000 if cfg.quick else 100_000)
    results: dict = {"rows": rows, "configs": {}}
    targets: list[tuple[int, dict[str, str]]] = [(1, cfg.options())]
    ring = _ring()
    try:
        ring.start()
        ring_options = {
            "contactPoints": ",".join(ring.contact_points),
            "port": str(RING_PORT),
            "keyspace": cfg.keyspace,
        }
        with QueueClient.from_options(ring_options) as client:
            client.bootstrap(create_keyspace=True, replication_factor=1)
        targets.append((3, ring_options))
    except Exception as exc:  # the 1-node figures still mean something without the ring
        results["ring"] = f"3-node ring not measured: {type(exc).__name__}: {exc}"
        log.warning("%s", results["ring"])
    try:
        for workers in (1, 2):
            with LocalSpark(
                workers=workers,
                worker_cores=1,
                master_port=MASTER_PORT,
                webui_port=WEBUI_PORT,
                base_dir=tempfile.mkdtemp(prefix="bench-spark-"),
            ) as cluster:
                spark = _session(cluster.master_url, workers)
                try:
                    for nodes, options in targets:
                        _one(spark, options, 1000, 2 * workers)  # warm-up: executors, sessions
                        key = f"{workers}w x {nodes}n"
                        results["configs"][key] = _one(spark, options, rows, 2 * workers)
                        log.info("scale %s: %s", key, results["configs"][key])
                finally:
                    spark.stop()
    finally:
        ring.stop_started_here()
    base = results["configs"].get("1w x 1n")
    if not base:
        raise SuiteUnavailable("the 1 worker x 1 node baseline did not run")
    for entry in results["configs"].values():
        entry["sink_ratio"] = round(entry["sink_msg_s"] / base["sink_msg_s"], 2)
        entry["source_ratio"] = round(entry["source_msg_s"] / base["source_msg_s"], 2)
    return results
