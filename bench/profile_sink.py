"""Profile of the streaming sink's write phase, inside Spark.

A parquet input of ``n`` rows (100 B, then 1 KiB ``value``; one file per task slot, as suite 1)
is written by ``writeStream.format("cassieq_profiled")`` (``bench/prof_datasource.py``: the
``cassieq`` sink with each task's ``write`` under cProfile) with ``Trigger.AvailableNow``,
after the same write by the plain ``cassieq`` sink (what the profiler costs). The report puts
Spark's ``durationMs`` split next to each task's ``write`` time and its cProfile split (waiting
on Cassandra, the driver's Python, reading the Arrow input from the JVM, our engine, ...).

Each run is checked first: ``n`` rows in the progress, ``n`` messages enqueued.
"""

from __future__ import annotations

import logging
import shutil
import tempfile

from . import prof_datasource, prof_progress, prof_stats
from .common import (
    BenchConfig,
    client,
    register_cassieq,
    run_available_now_progress,
    unique_queue,
)
from .profile_source import clear
from .sink import make_input

log = logging.getLogger("bench.profile_sink")


def write(spark, cfg: BenchConfig, path: str, queue: str, fmt: str):
    schema = spark.read.parquet(path).schema
    writer = (
        spark.readStream.schema(schema)
        .parquet(path)
        .writeStream.format(fmt)
        .options(**cfg.options(queue))
    )
    return run_available_now_progress(writer, "sink")


def _checked(c, queue: str, n: int, progress: list[dict]) -> None:
    rows = sum(p["numInputRows"] for p in progress)
    enqueued = int(c.stats(queue).get("enqueued") or 0)
    if rows != n or enqueued != n:
        raise RuntimeError(f"sink: {rows} rows in the progress, {enqueued} enqueued, expected {n}")


def run(spark, cfg: BenchConfig, n: int, prof_dir: str) -> str:
    register_cassieq(spark)
    prof_datasource.register(spark)
    work = tempfile.mkdtemp(prefix="bench-prof-sink-")
    parts = [f"# sink profile: writeStream AvailableNow of {n:,} rows, local[{cfg.processes}]", ""]
    try:
        with client(cfg) as c:
            make_input(spark, f"{work}/warm", 2000, 100, cfg.processes)
            warm = unique_queue("prof-sink-warm")
            c.create_queue(warm)
            write(spark, cfg, f"{work}/warm", warm, "cassieq_profiled")
            for size in (100, 1024):
                path = f"{work}/in-{size}"
                make_input(spark, path, n, size, cfg.processes)
                plain_q = unique_queue(f"prof-sink{size}-plain")
                c.create_queue(plain_q)
                _, plain = write(spark, cfg, path, plain_q, "cassieq")
                _checked(c, plain_q, n, plain)
                queue = unique_queue(f"prof-sink{size}")
                c.create_queue(queue)
                clear(prof_dir)
                wall, progress = write(spark, cfg, path, queue, "cassieq_profiled")
                _checked(c, queue, n, progress)
                ph = prof_stats.Phases.load(prof_dir)
                parts.append(report(cfg, n, size, wall, progress, plain, ph, prof_dir))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return "\n".join(parts)


def report(cfg, n: int, size: int, wall: float, progress, plain, ph, prof_dir: str) -> str:
    b = prof_progress.split(progress, with_rows=True)
    p = prof_progress.split(plain, with_rows=True)
    add, padd = b["seconds"]["addBatch"], p["seconds"]["addBatch"]
    w = ph.seconds("write")
    window = ph.window("write")
    lines = [
        f"## {size} B values: checked {n:,} rows in the progress and {n:,} enqueued (both runs)",
        f"without the profiler: addBatch {padd:.2f} s = {n / padd:,.0f} msg/s (the write phase)",
        f"with it: addBatch {add:.2f} s = {n / add:,.0f} msg/s; whole run {wall:.2f} s",
        "",
        prof_progress.format_split("Spark durationMs, triggers with rows (profiled run)", b),
        "",
        "each task's write() (our Python, input iteration from the JVM included), in order: "
        + ", ".join(f"{x:.3f}" for x in ph.each("write"))
        + f" s; {w:.3f} s of task time, per worker process "
        + ", ".join(f"{v:.3f} s" for v in ph.by_pid("write").values()),
        f"first write's start to last write's end {window:.3f} s = {100 * window / add:.0f}% of "
        f"addBatch; outside it (task launch, the job's start and commit): {add - window:.3f} s",
        f"per task slot: {n / max(1e-9, w):,.0f} rows/s of write() time",
        f"CPU of write(), summed over the tasks: {ph.cpu('write'):.3f} s in the task's thread "
        f"({1e6 * ph.cpu('write') / n:.1f} us a row; all our Python runs there), "
        f"{ph.cpu('write', 'cpu_process'):.3f} s in its process "
        f"({1e6 * ph.cpu('write', 'cpu_process') / n:.1f} us a row; with the driver's I/O "
        f"thread); {100 * ph.cpu('write') / max(1e-9, w):.0f}% of write()'s wall time",
        "",
        prof_stats.phase_report(prof_dir, "write", 25),
    ]
    return "\n".join(lines)
