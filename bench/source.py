"""Suite 2: consume-and-ack with an AvailableNow query vs a plain raw-driver scan of the same rows.

Each repeat fills a fresh queue with ``n`` messages (``put_many``), reads them once with a plain
Spark batch read (``spark.read.format("cassieq")``, no acks), consumes them with
``readStream.format("cassieq")`` and ``Trigger.AvailableNow`` into the ``noop`` sink (the acks
happen on commit, inside the timed run), then scans the same rows with the raw driver. Each repeat then consumes ``n`` messages of 1 KiB
the same way (a queue of their own): the goal is 1 KiB within 20% of 100 B in messages per
second (``ratio_1k_vs_100``, the ratio of the medians, with repeat i against repeat i).
"""

from __future__ import annotations

import logging

from . import baseline_driver as bd
from .common import (
    BenchConfig,
    client,
    payloads,
    register_cassieq,
    run_available_now,
    summarize,
    unique_queue,
)
from .cpu_split import CpuSplit
from .source_floor import read_floor

log = logging.getLogger("bench.source")


def fill(c, queue: str, n: int, size: int = 100, salt: int = 0) -> None:
    data = payloads(n, size, salt)
    for i in range(0, n, 10_000):
        c.put_many(queue, data[i : i + 10_000])


def consume(spark, cfg: BenchConfig, queue: str, extra: dict | None = None) -> dict:
    """One AvailableNow run over ``queue`` into the noop sink; rows, wall and batch seconds."""
    reader = spark.readStream.format("cassieq").options(**cfg.options(queue))
    for k, v in (extra or {}).items():
        reader = reader.option(k, v)
    return run_available_now(reader.load().writeStream.format("noop"), "source")


def spark_read(spark, cfg: BenchConfig, queue: str) -> dict:
    """A plain Spark batch read of the same messages (``spark.read.format("cassieq")``, the
    snapshot of unacked messages) into ``noop``: Spark's own cost without stream or acks.
    ``cpu``: the read's CPU split (``cpu_split``); the rows are counted after it."""
    with CpuSplit() as split:
        df = spark.read.format("cassieq").options(**cfg.options(queue)).load()
        df.write.format("noop").mode("overwrite").save()
    return {"wall": split.wall, "rows": df.count(), "cpu": split}


def run(spark, cfg: BenchConfig, scc=None) -> dict:
    """``scc``: the scc suite's job (bench/scc_suite.SccJob), whose full read of the same number
    of 100 B rows follows each repeat's source and scan runs, or None."""
    register_cassieq(spark)
    n = cfg.source_rows
    src_rates, src_wall_rates, scan_rates, read_rates, acked = [], [], [], [], []
    big_rates: list[float] = []
    floor_rates: list[float] = []
    cpu: dict[str, list[dict[str, float]]] = {
        "floor_read": [],
        "spark_read": [],
        "consume_incl_start": [],
        "scc_read": [],
    }
    with client(cfg) as c:
        warm = unique_queue("src-warm")
        c.create_queue(warm)
        fill(c, warm, 2000)
        consume(spark, cfg, warm)
        for rep in range(cfg.repeats):
            queue = unique_queue("src")
            info = c.create_queue(queue)
            fill(c, queue, n, salt=rep)
            plain = spark_read(spark, cfg, queue)
            if plain["rows"] != n:
                raise RuntimeError(f"spark.read saw {plain['rows']} rows, expected {n}")
            read_rates.append(n / plain["wall"])
            cpu["spark_read"].append(plain["cpu"].per_message_us(n))
            floor = read_floor(spark, n)
            if floor["rows"] != n:
                raise RuntimeError(f"the floor source counted {floor['rows']} rows, expected {n}")
            floor_rates.append(n / floor["wall"])
            cpu["floor_read"].append(floor["cpu"].per_message_us(n))
            with CpuSplit() as split:
                r = consume(spark, cfg, queue)
            cpu["consume_incl_start"].append(split.per_message_us(n))
            if r["rows"] != n:
                raise RuntimeError(f"source query delivered {r['rows']} rows, expected {n}")
            src_rates.append(n / r["batch_seconds"])
            src_wall_rates.append(n / r["wall"])
            st = c.stats(queue)
            acked.append({"acked": st.get("acked"), "backlog": st.get("backlog")})
            target = bd.Target(
                cfg.contact_points, cfg.port, cfg.keyspace, str(info.queue_id), info.bucket_size
            )
            buckets = list(range(0, (n + info.bucket_size - 1) // info.bucket_size))
            s = bd.scan_rows(target, buckets, cfg.processes)
            if s["rows"] != n:
                raise RuntimeError(f"driver scan read {s['rows']} rows, expected {n}")
            scan_rates.append(s["rate"])
            big = unique_queue("src-1k")
            c.create_queue(big)
            fill(c, big, n, size=1024, salt=rep)
            r = consume(spark, cfg, big)
            if r["rows"] != n:
                raise RuntimeError(f"source query delivered {r['rows']} 1 KiB rows, expected {n}")
            big_rates.append(n / r["batch_seconds"])
            if scc is not None:
                read_cpu = scc.after_source_repeat(rep)
                if read_cpu is not None:
                    cpu["scc_read"].append(read_cpu)
            log.info(
                "source rep %d: %.0f/s (wall %.0f/s), 1 KiB %.0f/s, scan %.0f/s",
                rep,
                src_rates[-1],
                src_wall_rates[-1],
                big_rates[-1],
                scan_rates[-1],
            )
    s, w, d = summarize(src_rates), summarize(src_wall_rates), summarize(scan_rates)
    pr = summarize(read_rates)
    b = summarize(big_rates)
    by_repeat = [x / y for x, y in zip(big_rates, src_rates, strict=True) if y]
    return {
        "rows": n,
        "processes": cfg.processes,
        "source_rate": s,
        "source_wall_rate": w,
        "scan_rate": d,
        "ratio_vs_scan": s["median"] / d["median"],
        "source_rate_1k": b,
        "ratio_1k_vs_100": {
            "ratio": b["median"] / s["median"],
            "min": min(by_repeat),
            "max": max(by_repeat),
        },
        "spark_read_rate": pr,
        "floor_read_rate": summarize(floor_rates),
        "wall_ratio_vs_spark_read": w["median"] / pr["median"],
        "wall_ratio_vs_scan": w["median"] / d["median"],
        "after_run": acked,
        "cpu_us_per_message": {
            what: {kind: summarize([r[kind] for r in runs]) for kind in runs[0]}
            for what, runs in cpu.items()
            if runs
        },
        "connector_read": "suite scc (SCC 3.5.1 on a side PySpark 3.5; no release for Spark 4.x)",
    }
