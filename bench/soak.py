"""The soak: every producer and consumer of the queue at once, for minutes, counted.

``make soak MINUTES=10 [NODES=3]`` (``python -m bench.soak --minutes 10 --nodes 3``) starts a
durable local Cassandra of its own (1 or 3 nodes on 127.0.0.1-3, CQL port 21042, RF = nodes),
then runs together:

- a Spark streaming sink (rate source -> queue ``stream``) and the streaming source on that
  queue (processingTime 500 ms, foreachBatch recording every delivery), in this process's
  local[2] Spark;
- a client producer into ``stream``, a client producer into ``clients``, a get/ack consumer and a
  get_many(10)/ack_many consumer (batch receive) on ``clients``, each in a process of its own.

Every payload carries its send time, so each delivery gives an end-to-end latency. After the
run it stops the producers, lets the consumers drain, and writes
``bench/results/soak-<stamp>.json``: messages produced and delivered per path, duplicates with
their cause (a replay of the same Spark batch; a client redelivery after the visibility timeout;
an enqueue twice), lost messages, latency p50/p99 per minute, and the resident memory of every
process (Python driver, Spark JVM, Python workers, client processes, Cassandra nodes) every
10 s, its growth from minute 5 (after warm-up) to the end, and a PNG of memory and p99 latency
beside the JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import percentile
from bench.memory import cmdline, descendants, status_kb
from bench.soak_traffic import consume, produce, read_lines

log = logging.getLogger("bench.soak")
RESULTS = Path(__file__).resolve().parent / "results"
PORT, STORAGE_PORT = 21042, 21000
SINK_ROWS_PER_SECOND = 20
PRODUCER_RATE = 10.0  # messages per second, per client producer
# One get/ack consumer and one get_many(10)/ack_many consumer on the client queue.
CONSUMER_BATCHES = (1, 10)
WARM_UP_MINUTES = 5  # memory growth is measured from here to the end


class Deliveries:
    """foreachBatch sink of the streaming source: (id, payload, received ms, batch id)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        got = int(time.time() * 1000)
        rows = df.select("id", "value").collect()
        with self.lock:
            self.rows.extend((r.id, bytes(r.value).decode(), got, batch_id) for r in rows)


class MemoryLog:
    """RSS of named processes every ``interval`` seconds, in a thread."""

    def __init__(self, pids: dict[str, int], interval: float = 10.0):
        self.pids = dict(pids)
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.interval = interval
        self.started = time.monotonic()

    def _sample(self) -> None:
        rss: dict[str, float] = {}
        for name, pid in self.pids.items():
            kb = status_kb(pid, "VmRSS")
            if kb is not None:
                rss[name] = round(kb / 1024.0, 1)
        known = set(self.pids.values())
        workers, workers_kb = 0, 0
        for pid in descendants(os.getpid()):  # the Spark JVM and the Python workers it forks
            if pid in known:
                continue
            cmd = cmdline(pid)
            kb = status_kb(pid, "VmRSS")
            if kb is None:
                continue
            if "java" in cmd.split(" ")[0] and "CassandraDaemon" not in cmd:
                # The largest: a short-lived java child (seen as 1 MiB samples) is not Spark.
                rss["spark_jvm"] = max(rss.get("spark_jvm", 0.0), round(kb / 1024.0, 1))
            elif "pyspark" in cmd:
                workers += 1
                workers_kb += kb
        rss["spark_python_workers_sum"] = round(workers_kb / 1024.0, 1)
        rss["spark_python_workers"] = workers
        self.samples.append((time.monotonic() - self.started, rss))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._sample()
            except Exception:  # a process ended between listing and reading
                continue

    def start(self) -> None:
        self._sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sample()

    def at(self, seconds: float) -> dict[str, float]:
        return min(self.samples, key=lambda s: abs(s[0] - seconds))[1]


def _sent_ms(payload: str) -> int:
    return int(payload.rsplit("-", 1)[1])


def _per_minute(latencies: list[tuple[int, float]], t0_ms: int) -> list[dict[str, Any]]:
    by_min: dict[int, list[float]] = collections.defaultdict(list)
    for got, lat in latencies:
        by_min[(got - t0_ms) // 60000].append(lat)
    out = []
    for minute in sorted(by_min):
        vals = sorted(by_min[minute])
        out.append(
            {
                "minute": minute + 1,
                "messages": len(vals),
                "p50_s": round(percentile(vals, 50) or 0, 3),
                "p99_s": round(percentile(vals, 99) or 0, 3),
            }
        )
    return out


def _stream_figures(rows, produced: set[str], sink_rows: int) -> dict[str, Any]:
    """The stream path: client payloads ``ps-...`` and the sink's ``sink-<n>-<ms>`` (rows 0 ..
    sink_rows-1 of committed sink batches must all arrive)."""
    per_id = collections.defaultdict(set)
    payload_ids = collections.defaultdict(set)
    count: collections.Counter[int] = collections.Counter()
    for mid, payload, _, batch in rows:
        per_id[mid].add(batch)
        payload_ids[payload].add(mid)
        count[mid] += 1
    sink_seen = {int(p.split("-")[1]) for p in payload_ids if p.startswith("sink-")}
    lost = sorted(produced - set(payload_ids))
    lost += [f"sink-{k}" for k in range(sink_rows) if k not in sink_seen]
    return {
        "delivered": len(per_id),
        "duplicates": {
            "replay_of_same_batch": sum(n - 1 for m, n in count.items() if len(per_id[m]) == 1),
            "in_another_batch": sum(1 for m in per_id if len(per_id[m]) > 1),
            "enqueued_twice": sum(1 for ids in payload_ids.values() if len(ids) > 1),
        },
        "lost": lost[:50],
        "lost_count": len(lost),
    }


def _client_figures(acks: list[dict], produced: set[str]) -> dict[str, Any]:
    by_payload = collections.defaultdict(list)
    for a in acks:
        by_payload[a["p"]].append(a)
    return {
        "delivered": len(by_payload),
        "duplicates": {
            "redelivered_after_visibility_timeout": sum(
                len(v) - 1 for v in by_payload.values() if len({a["id"] for a in v}) == 1
            ),
            "enqueued_twice": sum(1 for v in by_payload.values() if len({a["id"] for a in v}) > 1),
        },
        "lost": sorted(produced - set(by_payload))[:50],
        "lost_count": len(produced - set(by_payload)),
    }


def run(minutes: float, nodes: int) -> dict[str, Any]:
    from bench.common import BenchConfig, spark_session
    from cassieq_dev.local_cassandra import STATE_DIR, LocalCassandra
    from cassieq_spark import QueueClient

    cluster = LocalCassandra(
        nodes=nodes,
        port=PORT,
        storage_port=STORAGE_PORT,
        heap="512M",
        base_dir=STATE_DIR / f"soak-{nodes}",
        durable=True,
    )
    if not cluster.is_running():
        cluster.wipe()
    work = Path(tempfile.mkdtemp(prefix="cassieq-soak-"))
    stop = str(work / "stop")
    with cluster:
        options = {
            "contactPoints": ",".join(cluster.contact_points),
            "port": str(PORT),
            "keyspace": "cassieq_soak",
        }
        with QueueClient.from_options(options) as admin:
            admin.bootstrap(create_keyspace=True, replication_factor=min(3, nodes))
            stamp = time.strftime("%Y%m%d%H%M%S")
            stream_q, client_q = f"stream_{stamp}", f"clients_{stamp}"
            admin.create_queue(stream_q, bucket_size=1000)
            admin.create_queue(client_q, bucket_size=1000)
        ctx = mp.get_context("spawn")
        procs = {
            "producer_stream": ctx.Process(
                target=produce,
                args=(options, stream_q, "ps", PRODUCER_RATE, stop, str(work / "ps.jsonl")),
            ),
            "producer_clients": ctx.Process(
                target=produce,
                args=(options, client_q, "pc", PRODUCER_RATE, stop, str(work / "pc.jsonl")),
            ),
        }
        for k, batch in enumerate(CONSUMER_BATCHES):
            procs[f"consumer_{k}"] = ctx.Process(
                target=consume, args=(options, client_q, stop, str(work / f"c{k}.jsonl"), batch)
            )
        cfg = BenchConfig.make(quick=True)
        spark = spark_session(cfg, "cassieq-soak")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        deliveries = Deliveries()
        reader = spark.readStream.format("cassieq").options(
            **options, queue=stream_q, consumerId=f"{stream_q}-soak"
        )
        source = (
            reader.load()
            .writeStream.foreachBatch(deliveries)
            .option("checkpointLocation", str(work / "src"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        sink = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", str(SINK_ROWS_PER_SECOND))
            .load()
            .selectExpr(
                "concat('sink-', CAST(value AS STRING), '-', "
                "CAST(unix_millis(timestamp) AS STRING)) AS value"
            )  # fmt: skip
            .writeStream.format("cassieq")
            .options(**options, queue=stream_q)
            .option("checkpointLocation", str(work / "sink"))
            .trigger(processingTime="1 second")
            .start()
        )
        for p in procs.values():
            p.start()
        pids = {name: p.pid for name, p in procs.items() if p.pid}
        pids["driver_python"] = os.getpid()
        for i in range(1, nodes + 1):
            pid = cluster.pid(i)
            if pid:
                pids[f"cassandra_{i}"] = pid
        memory = MemoryLog(pids)
        memory.start()
        t0_ms = int(time.time() * 1000)
        deadline = time.monotonic() + minutes * 60
        while time.monotonic() < deadline:
            time.sleep(5)
            for q, name in ((source, "source"), (sink, "sink")):
                if not q.isActive:
                    raise RuntimeError(f"the {name} query stopped: {q.exception()}")
            log.info(
                "%.1f min: %d stream deliveries", (time.time() * 1000 - t0_ms) / 60000,
                len(deliveries.rows),
            )  # fmt: skip
        memory.stop()  # the end of the run, before producers stop and the drain
        Path(stop).touch()
        for p in procs.values():
            p.join(300)
        sink.stop()
        sink_rows = sum(p["numInputRows"] for p in sink.recentProgress)
        produced_stream = {r["p"] for r in read_lines(work / "ps.jsonl") if "p" in r}
        # The source drains what is left (at most 2 minutes).
        drain_until = time.monotonic() + 120
        while time.monotonic() < drain_until:
            with deliveries.lock:
                got = {p for _, p, _, _ in deliveries.rows}
            if produced_stream <= got and sink_rows <= sum(1 for p in got if p.startswith("sink-")):
                break
            time.sleep(2)
        time.sleep(3)
        source.stop()
        spark.stop()

    with deliveries.lock:
        rows = list(deliveries.rows)
    stream = _stream_figures(rows, produced_stream, sink_rows)
    acks = [
        r
        for k in range(len(CONSUMER_BATCHES))
        for r in read_lines(work / f"c{k}.jsonl")
        if "p" in r
    ]
    produced_clients = {r["p"] for r in read_lines(work / "pc.jsonl") if "p" in r}
    clients = _client_figures(acks, produced_clients)
    errors = [r["error"] for f in work.glob("*.jsonl") for r in read_lines(f) if "error" in r]
    stream_lat = [(got, (got - _sent_ms(p)) / 1000) for _, p, got, _ in rows]
    client_lat = [(a["t"], (a["t"] - _sent_ms(a["p"])) / 1000) for a in acks]
    per_minute = _per_minute(stream_lat + client_lat, t0_ms)
    steady = [m for m in per_minute if 2 <= m["minute"] <= minutes]
    end = memory.samples[-1][0]
    start_mem, minute2, end_mem = memory.at(30), memory.at(120), memory.at(end)
    warm = memory.at(min(WARM_UP_MINUTES * 60, end))

    def growth_from(base: dict[str, float]) -> dict[str, float]:
        return {
            k: round(100.0 * (end_mem[k] - v) / v, 1)
            for k, v in base.items()
            if k in end_mem and v > 0 and k != "spark_python_workers"
        }

    return {
        "minutes": minutes,
        "nodes": nodes,
        "replication_factor": min(3, nodes),
        "rates": {"sink_rows_per_s": SINK_ROWS_PER_SECOND, "per_client_producer": PRODUCER_RATE},
        "produced": {
            "sink": sink_rows,
            "client_into_stream": len(produced_stream),
            "client_into_clients": len(produced_clients),
        },
        "stream": stream,
        "clients": clients,
        "errors_seen_by_clients": len(errors),
        "errors_sample": errors[:5],
        "latency_per_minute": per_minute,
        "latency_per_minute_stream": _per_minute(stream_lat, t0_ms),
        "latency_per_minute_clients": _per_minute(client_lat, t0_ms),
        # Minute 1 holds the queries' start; the last minutes past ``minutes`` hold the drain.
        "p99_s_range_minutes_2_to_end": [
            min((m["p99_s"] for m in steady), default=None),
            max((m["p99_s"] for m in steady), default=None),
        ],
        "memory_mib": {
            "start_30s": start_mem,
            "minute_2": minute2,
            f"minute_{WARM_UP_MINUTES}": warm,
            "end": end_mem,
        },
        "memory_growth_pct_minute2_to_end": growth_from(minute2),
        f"memory_growth_pct_minute{WARM_UP_MINUTES}_to_end": growth_from(warm),
        "memory_series_mib": [
            {"s": round(t, 1), **{k: v for k, v in rss.items() if k != "spark_python_workers"}}
            for t, rss in memory.samples
        ],
        "consumer_batches": list(CONSUMER_BATCHES),
        "load_average": os.getloadavg(),
    }


def soak_plot(report: dict[str, Any], out: Path) -> Path:
    """Resident memory of every process and the per-minute p99 of each path, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, lat) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    series = report["memory_series_mib"]
    names = sorted({k for row in series for k in row if k != "s"})
    for name in names:
        # Runs before the sampler kept the largest java child recorded a short-lived one as
        # the Spark JVM now and then (samples of 1 MiB): left out.
        pts = [
            (row["s"] / 60, row[name])
            for row in series
            if name in row and not (name == "spark_jvm" and row[name] < 50)
        ]
        mem.plot([p[0] for p in pts], [p[1] for p in pts], label=name)
    mem.axvline(WARM_UP_MINUTES, color="grey", linestyle=":")
    mem.set_ylabel("RSS (MiB)")
    mem.set_yscale("log")
    mem.legend(fontsize=7, ncol=3, loc="lower right")
    mem.set_title(
        f"soak {report['minutes']:g} min, {report['nodes']} nodes: memory and p99 latency"
    )
    for kind in ("stream", "clients"):
        rows = report[f"latency_per_minute_{kind}"]
        lat.plot([m["minute"] for m in rows], [m["p99_s"] for m in rows], marker=".", label=kind)
    lat.set_xlabel("minute")
    lat.set_ylabel("p99 put-to-delivery (s)")
    lat.set_yscale("log")
    lat.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--nodes", type=int, choices=(1, 3), default=1)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    RESULTS.mkdir(exist_ok=True)
    report = run(args.minutes, args.nodes)
    total = report["produced"]
    if sum(total.values()) == 0:
        print("soak did no work: nothing was produced", file=sys.stderr)
        return 1
    path = RESULTS / f"soak-{time.strftime('%Y-%m-%d_%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("produced", "errors_seen_by_clients")}, indent=2))
    print(f"stream: {report['stream']['delivered']} delivered, lost {report['stream']['lost_count']}, "
          f"duplicates {report['stream']['duplicates']}")  # fmt: skip
    print(f"clients: {report['clients']['delivered']} delivered, lost "
          f"{report['clients']['lost_count']}, duplicates {report['clients']['duplicates']}")  # fmt: skip
    for kind in ("stream", "clients"):
        for m in report[f"latency_per_minute_{kind}"]:
            print(f"{kind} minute {m['minute']}: {m['messages']} msgs, p50 {m['p50_s']} s, "
                  f"p99 {m['p99_s']} s")  # fmt: skip
    growth = report[f"memory_growth_pct_minute{WARM_UP_MINUTES}_to_end"]
    print(f"memory growth minute {WARM_UP_MINUTES} -> end (%): {growth}")
    print(f"wrote {path}")
    try:
        print(f"plot {soak_plot(report, path.with_suffix('.png'))}")
    except ImportError as exc:  # matplotlib is part of the bench extra
        log.warning("no plot: %s", exc)
    lost = report["stream"]["lost_count"] + report["clients"]["lost_count"]
    return 1 if lost else 0


if __name__ == "__main__":
    raise SystemExit(main())
