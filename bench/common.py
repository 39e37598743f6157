"""Shared helpers for the benchmark suites: settings, timing summaries, queues, Spark sessions."""

from __future__ import annotations

import logging
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("bench")

BENCH_KEYSPACE = "cassieq_bench"


class SuiteUnavailable(Exception):
    """A suite cannot run yet (its component is missing); recorded, not fatal."""


@dataclass
class BenchConfig:
    """Sizes and connection settings shared by every suite; ``quick`` scales everything down."""

    quick: bool = True
    contact_points: str = "127.0.0.1"
    port: int = 9042
    keyspace: str = BENCH_KEYSPACE
    repeats: int = 3
    processes: int = field(default_factory=lambda: os.cpu_count() or 2)
    sink_rows: int = 100_000  # smaller runs measure query start-up more than writing
    source_rows: int = 100_000
    flatness_history: int = 200_000
    flatness_rows: int = 10_000
    engine_messages: int = 300
    profile_rows: int = 20_000
    latency_seconds: float = 8.0
    latency_rate: float = 20.0
    results_dir: str = "bench/results"
    spark_jars: list[str] = field(default_factory=list)
    original_src: str = ""  # a checkout of the original CassieQ server (suite service)

    @classmethod
    def make(cls, quick: bool, **overrides) -> BenchConfig:
        if quick:
            cfg = cls(quick=True)
        else:
            cfg = cls(
                quick=False,
                repeats=5,
                sink_rows=500_000,
                source_rows=500_000,
                flatness_history=2_000_000,
                flatness_rows=100_000,
                engine_messages=2000,
                profile_rows=200_000,
                latency_seconds=40.0,
                latency_rate=50.0,
            )
        for k, v in overrides.items():
            if v is not None:
                setattr(cfg, k, v)
        return cfg

    def options(self, queue: str | None = None) -> dict[str, str]:
        """Spark-style options for the cassieq sink/source and ``QueueClient.from_options``."""
        o = {
            "contactPoints": self.contact_points,
            "port": str(self.port),
            "keyspace": self.keyspace,
        }
        if queue is not None:
            o["queue"] = queue
        return o


def summarize(values: Sequence[float]) -> dict:
    """Median, min and max of repeated measurements (the raw values are kept too)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "values": []}
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "values": [round(v, 3) for v in vals],
    }


def ratio(a: dict | None, b: dict | None) -> float | None:
    """Ratio of two summaries' medians (``a / b``), or None when either is missing."""
    if not a or not b or not a.get("median") or not b.get("median"):
        return None
    return a["median"] / b["median"]


def percentile(sorted_vals: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_vals:
        return None
    k = max(0, min(len(sorted_vals) - 1, int(round(p / 100.0 * len(sorted_vals) + 0.5)) - 1))
    return float(sorted_vals[k])


def payloads(n: int, size: int, salt: int = 0) -> list[bytes]:
    """``n`` distinct payloads of exactly ``size`` bytes (a counter padded with filler)."""
    out = []
    for i in range(n):
        head = f"{salt}:{i}:".encode()
        out.append((head + b"x" * size)[:size])
    return out


def unique_queue(prefix: str) -> str:
    return f"bench-{prefix}-{uuid.uuid4().hex[:10]}"


def client(cfg: BenchConfig):
    from cassieq_spark import QueueClient

    return QueueClient.from_options(cfg.options())


def ensure_cassandra(cfg: BenchConfig) -> None:
    """Start the project's local Cassandra when nothing answers on the configured port."""
    from cassieq_dev import local_cassandra

    host = cfg.contact_points.split(",")[0].split(":")[0]
    if local_cassandra.port_open(host, cfg.port):
        return
    if host not in ("127.0.0.1", "localhost"):
        raise RuntimeError(f"Cassandra at {host}:{cfg.port} does not answer")
    log.info("no Cassandra on %s:%d; starting the local one", host, cfg.port)
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "cassieq_dev.local_cassandra", "up", "--port", str(cfg.port)],
        check=True,
    )


def ensure_keyspace(cfg: BenchConfig) -> None:
    with client(cfg) as q:
        q.bootstrap(create_keyspace=True)


def spark_session(cfg: BenchConfig, app: str = "cassieq-bench"):
    """A local Spark with one task slot per core, like the driver baseline's process count."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = (
        SparkSession.builder.master(f"local[{cfg.processes}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cfg.processes))
        .config("spark.python.worker.reuse", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
    )
    if cfg.spark_jars:
        b = b.config("spark.jars", ",".join(cfg.spark_jars))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def register_cassieq(spark) -> None:
    """Register the cassieq data source; raises SuiteUnavailable when it is not built yet."""
    try:
        from cassieq_spark.spark import register
    except Exception as exc:  # ImportError, or a half-written module failing at import
        raise SuiteUnavailable(
            f"cassieq Spark data source not importable: {type(exc).__name__}: {exc}"
        ) from exc
    register(spark)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def run_available_now_progress(writer, what: str) -> tuple[float, list[dict]]:
    """Start an ``AvailableNow`` query from a configured ``DataStreamWriter`` (checkpoint in a
    temporary directory) and wait for it: its wall seconds (query start included) and every
    trigger's progress as a dict."""
    import shutil
    import tempfile

    ckpt = tempfile.mkdtemp(prefix="bench-ckpt-")
    try:
        t0 = time.perf_counter()
        q = writer.option("checkpointLocation", ckpt).trigger(availableNow=True).start()
        q.awaitTermination()
        wall = time.perf_counter() - t0
        if q.exception() is not None:
            raise RuntimeError(f"{what} query failed: {q.exception()}")
        return wall, list(q.recentProgress)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def run_available_now(writer, what: str) -> dict:
    """``run_available_now_progress`` summed: rows, wall seconds, and the seconds spent in
    ``addBatch`` (the sink's write) and in whole triggers."""
    wall, progress = run_available_now_progress(writer, what)

    def ms(key: str) -> float:
        return sum(p["durationMs"].get(key, 0) for p in progress) / 1000.0

    return {
        "rows": sum(p["numInputRows"] for p in progress),
        "wall": wall,
        "add_batch": ms("addBatch"),
        "batch_seconds": ms("triggerExecution"),
        "batches": len(progress),
    }


def add_cassandra_args(ap) -> None:
    """The bench commands' options for where Cassandra is (CASSIEQ_CONTACT_POINTS,
    CASSIEQ_PORT) and where results go."""
    ap.add_argument(
        "--contact-points", default=os.environ.get("CASSIEQ_CONTACT_POINTS", "127.0.0.1")
    )
    ap.add_argument("--port", type=int, default=int(os.environ.get("CASSIEQ_PORT", "9042")))
    root = Path(__file__).resolve().parents[1]
    ap.add_argument("--results-dir", default=str(root / "bench" / "results"))


def log_to_stderr() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("cassandra", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
