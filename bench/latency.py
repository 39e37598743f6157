"""Suite 3: end-to-end latency from ``put`` to delivery in a ``processingTime`` query.

A producer thread calls ``put`` at a steady rate; each payload carries the wall-clock time
just before its ``put``. The query's ``foreachBatch`` collects the payloads on the driver and
records ``now - sent`` for each: that is put -> id reserved -> written -> seen by the source's
horizon -> read -> delivered to the user's code. Production starts once the query has run its
first (slow, start-up) batch.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from typing import Any

from .common import BenchConfig, client, percentile, register_cassieq, unique_queue

log = logging.getLogger("bench.latency")


def _produce(cfg: BenchConfig, queue: str, seconds: float, rate: float, stop: threading.Event):
    sent = 0
    with client(cfg) as c:
        start = time.perf_counter()
        while not stop.is_set():
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
            due = sent / rate
            if due > elapsed:
                time.sleep(min(due - elapsed, 0.05))
                continue
            c.put(queue, f"{time.time():.6f}".encode())
            sent += 1
    return sent


def measure(spark, cfg: BenchConfig, trigger_s: float) -> dict:
    queue = unique_queue(f"lat{int(trigger_s * 1000)}")
    with client(cfg) as c:
        c.create_queue(queue)
    latencies: list[float] = []
    lock = threading.Lock()

    def on_batch(df, _batch_id):
        rows = df.select("value").collect()
        now = time.time()
        got = [now - float(bytes(r.value).decode()) for r in rows]
        with lock:
            latencies.extend(got)

    ckpt = tempfile.mkdtemp(prefix="bench-lat-ckpt-")
    stop = threading.Event()
    try:
        q = (
            spark.readStream.format("cassieq")
            .options(**cfg.options(queue))
            .load()
            .writeStream.foreachBatch(on_batch)
            .option("checkpointLocation", ckpt)
            .trigger(processingTime=f"{int(trigger_s * 1000)} milliseconds")
            .start()
        )
        deadline = time.time() + 120
        while q.lastProgress is None and time.time() < deadline and q.isActive:
            time.sleep(0.2)
        if not q.isActive:
            raise RuntimeError(f"latency query stopped: {q.exception()}")
        sent = _produce(cfg, queue, cfg.latency_seconds, cfg.latency_rate, stop)
        # Let the last puts arrive: a few triggers' worth, bounded.
        deadline = time.time() + max(10.0, 10 * trigger_s)
        while time.time() < deadline:
            with lock:
                if len(latencies) >= sent:
                    break
            time.sleep(0.1)
        q.stop()
        if q.exception() is not None:
            raise RuntimeError(f"latency query failed: {q.exception()}")
    finally:
        stop.set()
        shutil.rmtree(ckpt, ignore_errors=True)
    vals = sorted(latencies)
    return {
        "trigger_s": trigger_s,
        "sent": sent,
        "delivered": len(vals),
        "p50": percentile(vals, 50),
        "p95": percentile(vals, 95),
        "p99": percentile(vals, 99),
        "max": vals[-1] if vals else None,
        "samples": [round(v, 4) for v in vals],
    }


def run(spark, cfg: BenchConfig, triggers: tuple[float, ...] = (1.0, 0.2)) -> dict:
    register_cassieq(spark)
    out: dict[str, Any] = {
        "rate_per_s": cfg.latency_rate,
        "seconds": cfg.latency_seconds,
        "triggers": {},
    }
    for t in triggers:
        r = measure(spark, cfg, t)
        log.info(
            "latency trigger %.1fs: p50 %.3f p95 %.3f p99 %.3f (%d/%d delivered)",
            t,
            r["p50"] or -1,
            r["p95"] or -1,
            r["p99"] or -1,
            r["delivered"],
            r["sent"],
        )
        out["triggers"][str(t)] = r
    return out
