"""Profile of the streaming source: where an AvailableNow consume-and-ack run spends its time.

One queue of ``n`` messages of 100 B is consumed by ``readStream.format("cassieq_profiled")``
(``bench/prof_datasource.py``: the ``cassieq`` source with each Python call recorded) into the
``noop`` sink. The report puts side by side:

- the whole run (query start included) and the sum of its triggers;
- Spark's ``durationMs`` split of the triggers (``bench/prof_progress.py``);
- our Python's share: the driver-side calls (``latestOffset``, ``partitions``, ``commit``: the
  ack pass) and the workers' ``read`` of each partition, each with its cProfile split into
  waiting on Cassandra, the driver's Python, Arrow, ... (``bench/prof_stats.py``).

The run is checked before anything is reported: ``n`` rows delivered, ``n`` acked.

    .venv/bin/python -m bench.profile_run --only source --port 9242
"""

from __future__ import annotations

import logging
import shutil
import time

from . import prof_datasource, prof_progress, prof_stats
from .common import (
    BenchConfig,
    client,
    register_cassieq,
    run_available_now_progress,
    unique_queue,
)
from .source import fill

log = logging.getLogger("bench.profile_source")


def clear(prof_dir: str) -> None:
    """Forget what earlier runs recorded (the directory itself stays: Spark's processes
    inherited its name)."""
    import os

    for name in os.listdir(prof_dir):
        path = os.path.join(prof_dir, name)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)


BATCHES = 5  # the per-batch run: maxMessagesPerTrigger = n / BATCHES


def consume(
    spark, cfg: BenchConfig, queue: str, fmt: str = "cassieq_profiled", max_per_trigger: int = 0
):
    reader = spark.readStream.format(fmt).options(**cfg.options(queue))
    if max_per_trigger:
        reader = reader.option("maxMessagesPerTrigger", str(max_per_trigger))
    return run_available_now_progress(reader.load().writeStream.format("noop"), "source")


def _checked(c, queue: str, n: int, progress: list[dict]) -> None:
    time.sleep(0.5)  # a last ack may land just after the query's end
    rows = sum(p["numInputRows"] for p in progress)
    st = c.stats(queue)
    if rows != n:
        raise RuntimeError(f"source delivered {rows} rows, expected {n}")
    if int(st.get("acked") or 0) != n or int(st.get("backlog") or 0) != 0:
        raise RuntimeError(f"after the run: acked {st.get('acked')}, backlog {st.get('backlog')}")


def run(spark, cfg: BenchConfig, n: int, prof_dir: str) -> str:
    register_cassieq(spark)
    prof_datasource.register(spark)
    with client(cfg) as c:
        warm = unique_queue("prof-src-warm")
        c.create_queue(warm)
        fill(c, warm, 2000)
        consume(spark, cfg, warm)
        # The same run without the profiler first: what the profiler itself costs.
        plain_q = unique_queue("prof-src-plain")
        c.create_queue(plain_q)
        fill(c, plain_q, n)
        plain_wall, plain_progress = consume(spark, cfg, plain_q, "cassieq")
        _checked(c, plain_q, n, plain_progress)
        queue = unique_queue("prof-src")
        c.create_queue(queue)
        fill(c, queue, n, salt=1)
        clear(prof_dir)
        wall, progress = consume(spark, cfg, queue)
        _checked(c, queue, n, progress)
        ph = prof_stats.Phases.load(prof_dir)
        if ph.rows("read") != n:
            raise RuntimeError(f"profiled reads returned {ph.rows('read')} rows, expected {n}")
        plain = prof_progress.split(plain_progress, with_rows=True)
        head = (
            f"without the profiler (format cassieq, same size, just before): whole run "
            f"{plain_wall:.2f} s ({n / plain_wall:,.0f} msg/s), triggers with rows "
            f"{plain['seconds']['triggerExecution']:.2f} s "
            f"({n / max(1e-9, plain['seconds']['triggerExecution']):,.0f} msg/s), "
            f"addBatch {plain['seconds']['addBatch']:.2f} s"
        )
        # The report reads the profiles now: the per-batch run below records over them.
        text = report(cfg, n, wall, progress, ph, prof_dir, head)
        return text + "\n" + _per_batch_run(spark, cfg, c, n, prof_dir)


def _per_batch_run(spark, cfg: BenchConfig, c, n: int, prof_dir: str) -> str:
    """The same consumption in ``BATCHES`` triggers: each trigger's fixed cost, and the ack
    pass of each committed batch (in the next trigger's ``latestOffset``)."""
    queue = unique_queue("prof-src-batches")
    c.create_queue(queue)
    fill(c, queue, n, salt=2)
    clear(prof_dir)
    wall, progress = consume(spark, cfg, queue, max_per_trigger=n // BATCHES)
    _checked(c, queue, n, progress)
    ph = prof_stats.Phases.load(prof_dir)
    if ph.rows("read") != n:
        raise RuntimeError(f"profiled reads returned {ph.rows('read')} rows, expected {n}")
    rows = prof_progress.split(progress, with_rows=True)
    lines = [
        f"## the same {n:,} messages in {rows['triggers']} triggers "
        f"(maxMessagesPerTrigger {n // BATCHES:,}): checked {n:,} delivered and acked",
        f"whole run {wall:.2f} s ({n / wall:,.0f} msg/s); triggers with rows "
        f"{rows['seconds']['triggerExecution']:.2f} s "
        f"({n / rows['seconds']['triggerExecution']:,.0f} msg/s)",
        "",
        prof_progress.format_split("Spark durationMs, triggers with rows", rows),
        "",
        "our Python, each call in order (s): the latestOffset of trigger k+1 acks batch k",
    ]
    for phase in ("latestOffset", "partitions", "read", "commit"):
        each = ", ".join(f"{x:.3f}" for x in ph.each(phase))
        lines.append(f"  {phase:<13} {ph.count(phase):>3} calls, {ph.seconds(phase):.3f} s: {each}")
    lines.append("")
    lines.append(prof_stats.phase_report(prof_dir, "latestOffset", 15))
    return "\n".join(lines)


def report(cfg, n: int, wall: float, progress: list[dict], ph, prof_dir: str, head: str) -> str:
    batches = prof_progress.split(progress, with_rows=True)
    trig = batches["seconds"]["triggerExecution"]
    add = batches["seconds"]["addBatch"]
    driver_calls = sum(ph.seconds(p) for p in ("latestOffset", "partitions", "commit"))
    read_s = ph.seconds("read")
    window = ph.window("read")
    per_pid = ph.by_pid("read")
    lines = [
        f"# source profile: AvailableNow consume+ack of {n:,} messages of 100 B, "
        f"local[{cfg.processes}], into noop",
        f"checked: {n:,} rows delivered, {n:,} acked, backlog 0 (both runs)",
        "",
        head,
        f"with the profiler: whole run incl. query start {wall:.2f} s ({n / wall:,.0f} msg/s); "
        f"triggers with rows {trig:.2f} s ({n / trig:,.0f} msg/s); query start and empty "
        f"triggers {wall - trig:.2f} s ({100 * (wall - trig) / wall:.0f}% of the run)",
        "",
        prof_progress.format_split("Spark durationMs, triggers with rows (profiled run)", batches),
        "",
        prof_progress.format_split(
            "Spark durationMs, every trigger (profiled run)", prof_progress.split(progress, None)
        ),
        "",
        "our Python (bench/prof_datasource.py), each call in order (s):",
    ]
    for phase in (
        "initialOffset",
        "prepareForTriggerAvailableNow",
        "latestOffset",
        "partitions",
        "read",
        "commit",
    ):
        each = ", ".join(f"{x:.3f}" for x in ph.each(phase))
        lines.append(f"  {phase:<29} {ph.count(phase):>3} calls, {ph.seconds(phase):.3f} s: {each}")
    lines += [
        f"  read: {ph.rows('read'):,} rows, {read_s:.3f} s of task time, per worker process "
        + ", ".join(f"{v:.3f} s" for v in per_pid.values())
        + f"; first read's start to last read's end {window:.3f} s = {100 * window / add:.0f}% of addBatch",
        f"  addBatch outside that window (task launch, the job's start and end): {add - window:.3f} s",
        f"  inside it, besides our reads, Spark moves the Arrow batches to the JVM into noop; "
        f"our reads use {read_s / max(1e-9, window * cfg.processes):.0%} of the {cfg.processes} slots' time",
        f"  driver-side calls (planning; the ack pass of a committed batch runs in the next "
        f"latestOffset): {driver_calls:.3f} s = {100 * driver_calls / trig:.0f}% of the triggers",
        "",
    ]
    for phase in (
        "read",
        "latestOffset",
        "partitions",
        "commit",
        "initialOffset",
        "prepareForTriggerAvailableNow",
    ):
        lines.append(prof_stats.phase_report(prof_dir, phase))
    return "\n".join(lines)
