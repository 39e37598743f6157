"""Profile of put -> delivery at a 0.2 s ``processingTime`` trigger: where the time goes.

A producer ``put``s 20 messages a second for ``cfg.latency_seconds`` into a queue read by
``readStream.format("cassieq_profiled")`` (``bench/prof_datasource.py``) into a
``foreachBatch`` that collects each batch on the driver, as suite 3 does. Every message's
latency is split in three, using the progress of the trigger that delivered it (its start
``timestamp`` and ``durationMs``):

- ``put``: the client's ``put`` call (reserve, write, close);
- ``wait``: from the put's return to the start of the trigger that delivers it (the trigger
  interval, and a trigger that starts while the previous one still runs);
- ``trigger``: from that trigger's start to ``foreachBatch`` holding the row (planning, the
  batch's job, the read).

Each trigger with rows is split by Spark's ``durationMs`` and by our Python's calls, and the
same query shape on Spark's own ``rate`` source (no Cassandra) gives Spark's floor for a
trigger at this interval. The run is checked first: every message sent is delivered.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import shutil
import statistics
import tempfile
import threading
import time

from . import prof_datasource, prof_progress, prof_stats
from .common import BenchConfig, client, percentile, register_cassieq, unique_queue
from .profile_source import clear

log = logging.getLogger("bench.profile_latency")

TRIGGER = "200 milliseconds"


def _produce(cfg: BenchConfig, queue: str, put_end: dict[int, tuple[float, float]]) -> int:
    sent = 0
    with client(cfg) as c:
        start = time.perf_counter()
        while time.perf_counter() - start < cfg.latency_seconds:
            due = sent / cfg.latency_rate
            if due > time.perf_counter() - start:
                time.sleep(min(due - (time.perf_counter() - start), 0.05))
                continue
            t0 = time.time()
            c.put(queue, f"{sent}:{t0:.6f}".encode())
            put_end[sent] = (t0, time.time())
            sent += 1
    return sent


def _start(spark, ckpt: str, df, on_batch):
    return (
        df.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", ckpt)
        .trigger(processingTime=TRIGGER)
        .start()
    )


def _wait_first(q) -> None:
    deadline = time.time() + 120
    while q.lastProgress is None and time.time() < deadline and q.isActive:
        time.sleep(0.2)
    if not q.isActive:
        raise RuntimeError(f"query stopped: {q.exception()}")


def _epoch(ts: str) -> float:
    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def measure(spark, cfg: BenchConfig, prof_dir: str, fmt: str = "cassieq_profiled") -> dict:
    queue = unique_queue("prof-lat")
    with client(cfg) as c:
        c.create_queue(queue)
    got: list[tuple[int, int, float]] = []  # message index, batch id, delivered at
    fb: dict[int, tuple[float, float]] = {}  # batch id: foreachBatch called, rows collected
    lock = threading.Lock()

    def on_batch(df, batch_id):
        called = time.time()
        rows = df.select("value").collect()
        now = time.time()
        with lock:
            fb[batch_id] = (called, now)
            got.extend((int(bytes(r.value).split(b":")[0]), batch_id, now) for r in rows)

    ckpt = tempfile.mkdtemp(prefix="bench-prof-lat-")
    put_end: dict[int, tuple[float, float]] = {}
    try:
        df = spark.readStream.format(fmt).options(**cfg.options(queue)).load()
        q = _start(spark, ckpt, df, on_batch)
        _wait_first(q)
        time.sleep(1.0)
        clear(prof_dir)
        sent = _produce(cfg, queue, put_end)
        deadline = time.time() + 10
        while time.time() < deadline:
            with lock:
                if len(got) >= sent:
                    break
            time.sleep(0.1)
        time.sleep(0.5)
        q.stop()
        if q.exception() is not None:
            raise RuntimeError(f"latency query failed: {q.exception()}")
        progress = list(q.recentProgress)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    ids = sorted(i for i, _, _ in got)
    if ids != list(range(sent)):
        raise RuntimeError(f"sent {sent}, delivered {len(ids)} ({len(set(ids))} distinct)")
    return {"sent": sent, "got": got, "put_end": put_end, "progress": progress, "fb": fb}


def timeline(m: dict, ph) -> list[tuple[str, float]]:
    """Mean ms from a trigger's start to each step, over the triggers with rows: when our
    planning calls ran, when foreachBatch was called, when the read ran, when the rows were
    on the driver and when the trigger ended."""
    steps: dict[str, list[float]] = {}

    def add(name: str, v: float) -> None:
        steps.setdefault(name, []).append(1000 * v)

    for p in m["progress"]:
        if not p.get("numInputRows") or p["batchId"] not in m["fb"]:
            continue
        ts = _epoch(p["timestamp"])
        te = ts + p["durationMs"]["triggerExecution"] / 1000.0
        called, collected = m["fb"][p["batchId"]]
        for phase in ("latestOffset", "partitions", "read", "commit"):
            calls = [c for c in ph.calls.get(phase, []) if ts - 0.01 <= c["start"] <= te]
            if calls:
                first = min(calls, key=lambda c: c["start"])
                add(f"{phase} starts", first["start"] - ts)
                add(f"{phase} ends", first["start"] + first["seconds"] - ts)
        add("foreachBatch called", called - ts)
        add("rows collected on the driver", collected - ts)
        add("trigger ends", te - ts)
    out = [(k, statistics.fmean(v)) for k, v in steps.items()]
    return sorted(out, key=lambda kv: kv[1])


def control(spark, cfg: BenchConfig, seconds: float = 8.0) -> list[dict]:
    """The same query shape on Spark's ``rate`` source: Spark's own cost per trigger."""
    seen = [0]

    def on_batch(df, _batch_id):
        seen[0] += len(df.select("value").collect())

    ckpt = tempfile.mkdtemp(prefix="bench-prof-rate-")
    try:
        df = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", str(int(cfg.latency_rate)))
            .load()
        )
        q = _start(spark, ckpt, df, on_batch)
        _wait_first(q)
        time.sleep(seconds)
        q.stop()
        progress = list(q.recentProgress)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    if seen[0] == 0:
        raise RuntimeError("the rate source delivered nothing")
    return progress


def run(spark, cfg: BenchConfig, prof_dir: str) -> str:
    register_cassieq(spark)
    prof_datasource.register(spark)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "2000")
    # A short untimed run first: the session's first query starts Spark's Python workers.
    measure(spark, dataclasses.replace(cfg, latency_seconds=3.0), prof_dir, "cassieq")
    plain = measure(spark, cfg, prof_dir, "cassieq")  # what the profiler itself costs
    m = measure(spark, cfg, prof_dir)
    ph = prof_stats.Phases.load(prof_dir)
    ctl = control(spark, cfg)
    return report(cfg, m, ph, ctl, prof_dir) + "\n" + report_plain(plain)


def _latencies(m: dict) -> list[float]:
    return sorted(at - m["put_end"][idx][0] for idx, _, at in m["got"])


def report_plain(m: dict) -> str:
    lat = _latencies(m)
    p = [percentile(lat, q) or 0.0 for q in (50, 95, 99)]
    return "\n".join(
        [
            f"## the same run without the profiler (format cassieq, just before): {m['sent']} sent "
            f"and delivered, latency p50 {p[0]:.3f} s, p95 {p[1]:.3f} s, p99 {p[2]:.3f} s",
            "",
            prof_progress.format_split(
                "cassieq source without the profiler, triggers with rows",
                prof_progress.split(m["progress"], with_rows=True),
            ),
            "",
        ]
    )


def report(cfg: BenchConfig, m: dict, ph, ctl: list[dict], prof_dir: str) -> str:
    starts = {p["batchId"]: _epoch(p["timestamp"]) for p in m["progress"]}
    parts = []
    for idx, batch_id, at in m["got"]:
        t0, t1 = m["put_end"][idx]
        ts = starts.get(batch_id)
        if ts is None:
            continue
        parts.append((at - t0, t1 - t0, ts - t1, at - ts))
    parts.sort()
    lat = [p[0] for p in parts]
    worst = parts[int(0.95 * len(parts)) :]

    def mean(xs) -> float:
        return statistics.fmean(xs) if xs else 0.0

    rows = prof_progress.split(m["progress"], with_rows=True)
    empty = prof_progress.split(m["progress"], with_rows=False)
    rate = prof_progress.split(ctl, with_rows=True)
    p = [percentile(lat, q) or 0.0 for q in (50, 95, 99)]
    lines = [
        f"# latency profile: put -> foreachBatch at processingTime {TRIGGER}, "
        f"{cfg.latency_rate:.0f} puts/s for {cfg.latency_seconds:.0f} s",
        f"checked: {m['sent']} sent, {m['sent']} delivered, each once "
        f"({len(parts)} matched to their trigger's progress)",
        f"latency p50 {p[0]:.3f} s, p95 {p[1]:.3f} s, p99 {p[2]:.3f} s, max {lat[-1]:.3f} s "
        f"(goal p99 <= trigger + 0.3 s = 0.5 s)",
        "",
        f"{'split (mean s)':<28} {'put':>7} {'wait':>7} {'trigger':>8} {'total':>7}",
        f"{'every message':<28} {mean([x[1] for x in parts]):>7.3f} {mean([x[2] for x in parts]):>7.3f} "
        f"{mean([x[3] for x in parts]):>8.3f} {mean(lat):>7.3f}",
        f"{'slowest 5%':<28} {mean([x[1] for x in worst]):>7.3f} {mean([x[2] for x in worst]):>7.3f} "
        f"{mean([x[3] for x in worst]):>8.3f} {mean([x[0] for x in worst]):>7.3f}",
        "",
        prof_progress.format_split("cassieq source, triggers with rows", rows),
        "",
        prof_progress.format_split("cassieq source, empty triggers (recorded ones)", empty),
        "",
        prof_progress.format_split(
            "Spark's rate source, same foreachBatch and trigger (Spark's floor)", rate
        ),
        "",
        "a trigger with rows, mean ms from its start (bench's clocks; Spark's timestamp in ms):",
        *[f"  {v:8.1f}  {k}" for k, v in timeline(m, ph)],
        "",
        "our Python per call (mean ms, calls):",
    ]
    for phase in ("latestOffset", "partitions", "read", "commit"):
        n = ph.count(phase)
        lines.append(f"  {phase:<13} {1000 * ph.seconds(phase) / max(1, n):8.1f} ms x {n}")
    ours = sum(ph.seconds(x) for x in ("latestOffset", "partitions", "commit"))
    trig = rows["seconds"]["triggerExecution"] + empty["seconds"]["triggerExecution"]
    lines += [
        f"  driver-side calls in all: {ours:.2f} s over {rows['triggers'] + empty['triggers']} "
        f"recorded triggers ({trig:.2f} s of triggerExecution)",
        f"  a trigger with rows: {rows['mean_ms']['triggerExecution']:.0f} ms for cassieq vs "
        f"{rate['mean_ms']['triggerExecution']:.0f} ms for Spark's rate source",
        "",
    ]
    for phase in ("latestOffset", "read", "partitions", "commit"):
        lines.append(prof_stats.phase_report(prof_dir, phase, 15))
    return "\n".join(lines)
