"""Suite 1: the streaming sink vs the raw driver writing the same rows, plus a profile of its hot path.

The input is a parquet directory of ``n`` rows (``value`` binary of the payload size, one file
per task slot), read as a stream with ``Trigger.AvailableNow`` and written with
``writeStream.format("cassieq")``. One untimed warm-up query first starts the Python workers
and their per-process Cassandra sessions, as a long-running pipeline would have them.

Rates: ``rows / sum(addBatch)`` from the query progress (the write phase: reading parquet,
Arrow to Python, id reservation, pipelined batches, close) and ``rows / wall`` (including
query start, which a long-running query pays once). The raw driver's rate excludes its connect
and row building, so the ratio is conservative.
"""

from __future__ import annotations

import cProfile
import io
import logging
import pstats
import shutil
import tempfile
import time

from . import baseline_driver as bd
from .common import (
    BenchConfig,
    client,
    register_cassieq,
    run_available_now,
    summarize,
    unique_queue,
)

log = logging.getLogger("bench.sink")


def make_input(spark, path: str, n: int, size: int, parts: int) -> None:
    """``n`` rows of ``value`` (binary, exactly ``size`` bytes, distinct) in ``parts`` files."""
    (
        spark.range(n, numPartitions=parts)
        .selectExpr(
            f"cast(substring(concat(cast(id as string), ':', repeat('x', {size})), 1, {size}) "
            "as binary) as value"
        )
        .write.mode("overwrite")
        .parquet(path)
    )


def run_query(spark, cfg: BenchConfig, input_path: str, queue: str) -> dict:
    schema = spark.read.parquet(input_path).schema
    writer = (
        spark.readStream.schema(schema)
        .parquet(input_path)
        .writeStream.format("cassieq")
        .options(**cfg.options(queue))
    )
    return run_available_now(writer, "sink")


def _enqueued(cfg: BenchConfig, queue: str) -> int | None:
    try:
        with client(cfg) as c:
            return int(c.stats(queue).get("enqueued") or 0)
    except Exception:  # stats are a check, not the measurement
        log.warning("could not read stats of %s", queue, exc_info=True)
        return None


def run(spark, cfg: BenchConfig, sizes: tuple[int, ...] = (100, 1024), scc=None) -> dict:
    """``scc``: the scc suite's job (bench/scc_suite.SccJob), whose writes of the same rows
    follow each repeat's sink and driver runs, or None."""
    register_cassieq(spark)
    n = cfg.sink_rows
    out: dict = {"rows": n, "processes": cfg.processes, "sizes": {}}
    work = tempfile.mkdtemp(prefix="bench-sink-")
    try:
        with client(cfg) as c:
            warm_path = f"{work}/warm"
            make_input(spark, warm_path, 2000, 100, cfg.processes)
            warm_q = unique_queue("sink-warm")
            c.create_queue(warm_q)
            run_query(spark, cfg, warm_path, warm_q)
            for size in sizes:
                path = f"{work}/in-{size}"
                make_input(spark, path, n, size, cfg.processes)
                sink_rates, sink_wall_rates, driver_rates, checks = [], [], [], []
                for rep in range(cfg.repeats):
                    # Alternate sink and driver so drifting machine load hits both alike.
                    queue = unique_queue(f"sink{size}")
                    c.create_queue(queue)
                    r = run_query(spark, cfg, path, queue)
                    if r["rows"] != n:
                        raise RuntimeError(f"sink query saw {r['rows']} rows, expected {n}")
                    sink_rates.append(n / r["add_batch"])
                    sink_wall_rates.append(n / r["wall"])
                    if rep == 0:
                        checks.append({"queue": queue, "enqueued": _enqueued(cfg, queue)})
                    bq = c.create_queue(unique_queue(f"drv{size}"))
                    target = bd.Target(
                        cfg.contact_points, cfg.port, cfg.keyspace, str(bq.queue_id), bq.bucket_size
                    )
                    d = bd.write_rows(target, 0, n, size, cfg.processes)
                    driver_rates.append(d["rate"])
                    if scc is not None:
                        scc.after_sink_repeat(size, rep)
                    log.info(
                        "sink %dB rep %d: sink %.0f/s (wall %.0f/s), driver %.0f/s",
                        size,
                        rep,
                        sink_rates[-1],
                        sink_wall_rates[-1],
                        driver_rates[-1],
                    )
                s, w, d = summarize(sink_rates), summarize(sink_wall_rates), summarize(driver_rates)
                out["sizes"][str(size)] = {
                    "sink_rate": s,
                    "sink_wall_rate": w,
                    "driver_rate": d,
                    "ratio_vs_driver": s["median"] / d["median"],
                    "wall_ratio_vs_driver": w["median"] / d["median"],
                    "checks": checks,
                }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def profile_hot_path(cfg: BenchConfig, n: int, size: int = 100, top: int = 30) -> dict:
    """cProfile of the Python worker side of the sink over ``n`` rows, in this process.

    Tries the sink's own stream writer (``write()`` over Arrow record batches, as Spark calls
    it); when that cannot run outside a Spark task, profiles the engine path the sink is built
    on (``producer.enqueue``: reserve, pipelined unlogged batches, close).
    """
    import pyarrow as pa

    from .common import payloads

    data = payloads(n, size)
    with client(cfg) as c:
        queue = unique_queue("prof")
        info = c.create_queue(queue)
        what, note = None, None
        prof = cProfile.Profile()
        try:
            writer = _sink_writer(cfg, queue)
            batches = [
                pa.RecordBatch.from_pydict({"value": data[i : i + 10_000]})
                for i in range(0, n, 10_000)
            ]
            prof.enable()
            t0 = time.perf_counter()
            writer.write(iter(batches))
            secs = time.perf_counter() - t0
            prof.disable()
            what = "sink stream writer write() over Arrow batches"
        except Exception as exc:  # the sink may need a TaskContext or may not exist yet
            prof.disable()
            note = f"sink writer not profiled in-process ({type(exc).__name__}: {exc})"
            from cassieq_spark.engine.write.producer import enqueue

            prof = cProfile.Profile()
            prof.enable()
            t0 = time.perf_counter()
            enqueue(c.conn, c.counters, info, data)
            secs = time.perf_counter() - t0
            prof.disable()
            what = "engine producer.enqueue (the write path under the sink)"
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(top)
    text = buf.getvalue()
    buf2 = io.StringIO()
    pstats.Stats(prof, stream=buf2).sort_stats("tottime").print_stats(top)
    return {
        "what": what,
        "note": note,
        "rows": n,
        "payload_bytes": size,
        "seconds": secs,
        "rate_single_process": n / secs,
        "top_cumulative": text,
        "top_tottime": buf2.getvalue(),
    }


def _sink_writer(cfg: BenchConfig, queue: str):
    """The sink's stream writer, built the way Spark builds it (options as lowercase strings)."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    import cassieq_spark.spark as sp

    source_cls = getattr(sp, "CassieQDataSource", None)
    if source_cls is None:
        import cassieq_spark

        source_cls = cassieq_spark.CassieQDataSource
    opts = {k.lower(): v for k, v in cfg.options(queue).items()}
    opts["checkpointlocation"] = tempfile.mkdtemp(prefix="bench-prof-")
    ds = source_cls(opts)
    schema = StructType([StructField("value", BinaryType(), False)])
    return ds.streamWriter(schema, False)
