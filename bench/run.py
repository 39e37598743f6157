"""The benchmark driver: ``python -m bench.run --quick|--full`` (``make bench-quick`` / ``make bench``).

Runs every suite, each comparison against a baseline measured in the same run, and writes
``bench/results/<stamp>.json``, ``<stamp>.md`` (the table), ``<stamp>-*.png`` (plots) and the
sink's hot-path profile. A suite whose component is not built yet is recorded as skipped with
the reason, so the harness runs today and picks components up when they land.
"""

from __future__ import annotations

import argparse
import datetime as dt
import inspect
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

from .common import (
    BenchConfig,
    SuiteUnavailable,
    ensure_cassandra,
    ensure_keyspace,
    spark_session,
)

log = logging.getLogger("bench")

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR = "com.datastax.spark:spark-cassandra-connector-assembly_2.13"
CONNECTOR_JARS = ROOT / ".cassandra" / "bench-jars"


# -- machine and versions -------------------------------------------------------------------------


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine_info(cfg: BenchConfig) -> dict:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in _read("/proc/cpuinfo").splitlines()
            if "model name" in ln
        ),
        platform.processor(),
    )
    mem_kb = next(
        (
            int(ln.split()[1])
            for ln in _read("/proc/meminfo").splitlines()
            if ln.startswith("MemTotal")
        ),
        0,
    )
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = None
    from cassieq_spark import local_cassandra

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = ""
    host = cfg.contact_points.split(",")[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "pyspark": spark_version,
        "cassandra": local_cassandra.query_release_version(host, cfg.port),
        "cassandra_nodes": "1 local node, same machine",
        "git_commit": commit,
        "load_average_start": list(os.getloadavg()),
    }


# -- suites ---------------------------------------------------------------------------------------


def check_connector(cfg: BenchConfig) -> dict:
    """Is a Spark Cassandra Connector release for Spark 4.x on Maven Central? (Bounded to ~2 min.)"""
    jars = sorted(CONNECTOR_JARS.glob("spark-cassandra-connector-assembly_2.13-4*.jar"))
    if jars:
        cfg.spark_jars = [str(jars[-1])]
        return {"release": "found", "jar": str(jars[-1])}
    found = None
    if shutil.which("mvn"):
        # RELEASE resolves the newest release through the artifact's metadata on Central.
        try:
            p = subprocess.run(
                [
                    "mvn",
                    "-B",
                    "-q",
                    "dependency:get",
                    f"-Dartifact={CONNECTOR}:RELEASE",
                    "-Dtransitive=false",
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            found = p.returncode == 0
            detail = (p.stdout + p.stderr).strip().splitlines()[:1]
        except subprocess.TimeoutExpired:
            detail = ["mvn timed out"]
    else:
        detail = ["mvn not installed"]
    repo = Path.home() / ".m2/repository/com/datastax/spark/spark-cassandra-connector-assembly_2.13"
    versions = sorted(p.name for p in repo.glob("4*") if p.is_dir()) if repo.is_dir() else []
    if found and versions:
        jar = next(repo.glob(f"{versions[-1]}/*.jar"), None)
        if jar is not None:
            CONNECTOR_JARS.mkdir(parents=True, exist_ok=True)
            shutil.copy(jar, CONNECTOR_JARS / jar.name)
            cfg.spark_jars = [str(CONNECTOR_JARS / jar.name)]
            return {"release": "found", "version": versions[-1], "jar": cfg.spark_jars[0]}
    return {
        "release": "none",
        "reason": (
            "no Spark Cassandra Connector release for Spark 4.x (Scala 2.13) on Maven Central: "
            f"{CONNECTOR}:RELEASE does not resolve, the newest line is 3.5.x for Spark 3.5; Spark 4 "
            "support is an open change upstream (CASSANALYTICS-173). The connector comparisons "
            "are not measured; a Spark 3.5 environment would be needed for them."
        ),
        "mvn": detail,
    }


def run_engine(cfg: BenchConfig) -> dict:
    """Suite 4 through ``bench/engine.py`` (written separately; not rewritten here).

    Either ``run(...)`` taking any of the keywords ``cfg``/``config`` (a BenchConfig),
    ``quick``, ``options``, ``repeats``, ``keyspace`` and returning a dict, or its command line
    ``main(argv)``, which writes ``engine-<date>.json`` into ``--out``; that file is read back.
    """
    try:
        from . import engine as engine_bench
    except ImportError as exc:
        raise SuiteUnavailable(f"bench/engine.py is not there yet ({exc})") from exc
    fn = getattr(engine_bench, "run", None)
    if fn is not None:
        offered = {
            "cfg": cfg,
            "config": cfg,
            "quick": cfg.quick,
            "options": cfg.options(),
            "repeats": cfg.repeats,
            "keyspace": cfg.keyspace,
        }
        params = inspect.signature(fn).parameters
        out = fn(**{k: v for k, v in offered.items() if k in params})
        return out if isinstance(out, dict) else {"result": out}
    main_fn = getattr(engine_bench, "main", None)
    if main_fn is None:
        raise SuiteUnavailable("bench/engine.py has neither run() nor main(argv)")
    import contextlib
    import io
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-engine-") as out_dir:
        argv = [
            "--messages", str(cfg.engine_messages),
            "--contact-points", cfg.contact_points,
            "--port", str(cfg.port),
            "--keyspace", cfg.keyspace,
            "--out", out_dir,
        ]  # fmt: skip
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            rc = main_fn(argv)
        if rc:
            raise RuntimeError(f"bench/engine.py exited with {rc}: {printed.getvalue()[-500:]}")
        files = sorted(Path(out_dir).glob("*.json"))
        if not files:
            raise RuntimeError("bench/engine.py wrote no JSON result")
        data = json.loads(files[-1].read_text())
    data["table"] = printed.getvalue()
    return data


def _spark_ready() -> str | None:
    """None when the cassieq Spark data source imports; otherwise why not."""
    try:
        from cassieq_spark.spark import register  # noqa: F401
    except Exception as exc:
        try:
            from cassieq_spark import register  # type: ignore[attr-defined]  # noqa: F401
        except Exception:
            return f"cassieq Spark data source not importable: {type(exc).__name__}: {exc}"
    return None


class Runner:
    def __init__(self, cfg: BenchConfig):
        self.cfg = cfg
        self.results: dict = {"suites": {}}
        self._spark = None

    def spark(self):
        if self._spark is None:
            t0 = time.perf_counter()
            self._spark = spark_session(self.cfg)
            log.info("Spark session up in %.1f s", time.perf_counter() - t0)
        return self._spark

    def suite(self, name: str, fn, *, needs_spark: bool = False, memory: bool = False):
        entry: dict = {}
        t0 = time.perf_counter()
        log.info("== suite %s", name)
        sampler = None
        try:
            if needs_spark:
                why = _spark_ready()
                if why:
                    raise SuiteUnavailable(why)
            if memory:
                from .memory import MemorySampler

                sampler = MemorySampler().__enter__()
            data = fn()
            entry = {"status": "ok", **(data or {})}
        except SuiteUnavailable as exc:
            entry = {"status": "skipped", "reason": f"not available yet: {exc}"}
            log.warning("suite %s skipped: %s", name, exc)
        except Exception as exc:
            entry = {
                "status": "failed",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc().splitlines()[-15:],
            }
            log.error("suite %s failed: %s", name, exc, exc_info=True)
        finally:
            if sampler is not None:
                sampler.__exit__(None, None, None)
                entry["memory"] = sampler.report()
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        self.results["suites"][name] = entry
        return entry

    def stop(self):
        if self._spark is not None:
            self._spark.stop()


def run_all(cfg: BenchConfig, only: set[str] | None = None) -> dict:
    from . import flatness, latency, sink, source

    runner = Runner(cfg)
    wanted = lambda n: only is None or n in only  # noqa: E731
    t0 = time.perf_counter()
    runner.results["config"] = {
        k: v for k, v in vars(cfg).items() if isinstance(v, (int, float, str, bool, list))
    }
    runner.results["machine"] = machine_info(cfg)
    connector_thread = None
    if wanted("connector"):
        # Maven is slow to answer; its look-up overlaps the other suites (it only reads).
        import threading

        connector_thread = threading.Thread(
            target=runner.suite, args=("connector", lambda: check_connector(cfg)), daemon=True
        )
        connector_thread.start()
    if wanted("engine"):
        runner.suite("engine", lambda: run_engine(cfg))
    if wanted("profile"):
        runner.suite("sink_profile", lambda: sink.profile_hot_path(cfg, cfg.profile_rows))
    try:
        if wanted("sink"):
            runner.suite(
                "sink", lambda: sink.run(runner.spark(), cfg), needs_spark=True, memory=True
            )
        if wanted("source"):
            runner.suite("source", lambda: source.run(runner.spark(), cfg), needs_spark=True)
        if wanted("latency"):
            runner.suite(
                "latency", lambda: latency.run(runner.spark(), cfg), needs_spark=True, memory=True
            )
        if wanted("flatness"):
            runner.suite(
                "flatness_source",
                lambda: flatness.run_source(runner.spark(), cfg),
                needs_spark=True,
            )
            # Its own old queue: the source's consumer lease outlives its query by a few
            # seconds and blocks get() on the source's queue meanwhile.
            runner.suite("flatness_client", lambda: flatness.run_client(cfg))
    finally:
        runner.stop()
    if connector_thread is not None:
        connector_thread.join(timeout=150)
    runner.results["machine"]["load_average_end"] = list(os.getloadavg())
    runner.results["total_seconds"] = round(time.perf_counter() - t0, 1)
    return runner.results


# -- output ---------------------------------------------------------------------------------------


def _fmt(v, digits: int = 0) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def table_rows(results: dict) -> list[dict]:
    """The comparisons as rows: what, median, min, max, baseline median, ratio."""
    rows: list[dict] = []
    s = results["suites"]

    def add(suite, what, summ, unit, base=None, base_name=None, ratio=None, digits=0):
        rows.append(
            {
                "suite": suite,
                "what": what,
                "unit": unit,
                "median": summ.get("median") if summ else None,
                "min": summ.get("min") if summ else None,
                "max": summ.get("max") if summ else None,
                "baseline": base_name,
                "baseline_median": base.get("median") if base else None,
                "ratio": ratio,
                "digits": digits,
            }
        )

    sk = s.get("sink", {})
    for size, r in (sk.get("sizes") or {}).items():
        add(
            "1 sink",
            f"writeStream cassieq, {size} B, write phase",
            r["sink_rate"],
            "msg/s",
            r["driver_rate"],
            "raw driver, same rows",
            r["ratio_vs_driver"],
        )
        add(
            "1 sink",
            f"writeStream cassieq, {size} B, incl. query start",
            r["sink_wall_rate"],
            "msg/s",
            r["driver_rate"],
            "raw driver, same rows",
            r["wall_ratio_vs_driver"],
        )
    src = s.get("source", {})
    if src.get("status") == "ok":
        add(
            "2 source",
            "AvailableNow consume+ack, batches",
            src["source_rate"],
            "msg/s",
            src["scan_rate"],
            "raw driver scan",
            src["ratio_vs_scan"],
        )
        add(
            "2 source",
            "AvailableNow consume+ack, incl. query start",
            src["source_wall_rate"],
            "msg/s",
            src["scan_rate"],
            "raw driver scan",
            src["wall_ratio_vs_scan"],
        )
        if "spark_read_rate" in src:
            add(
                "2 source",
                "AvailableNow consume+ack, incl. query start",
                src["source_wall_rate"],
                "msg/s",
                src["spark_read_rate"],
                "plain spark.read, same rows",
                src["wall_ratio_vs_spark_read"],
            )
    lat = s.get("latency", {})
    for trig, r in (lat.get("triggers") or {}).items():
        rows.append(
            {
                "suite": "3 latency",
                "what": f"put->delivery, trigger {trig} s (p50 / p95 / p99)",
                "unit": "s",
                "median": r["p50"],
                "min": None,
                "max": None,
                "extra": f"{_fmt(r['p50'], 3)} / {_fmt(r['p95'], 3)} / {_fmt(r['p99'], 3)}",
                "baseline": "trigger interval",
                "baseline_median": float(trig),
                "ratio": (r["p50"] / float(trig)) if r["p50"] else None,
                "digits": 3,
            }
        )
    eng = s.get("engine", {})
    if eng.get("status") == "ok" and isinstance(eng.get("cassieq"), list):
        ref = {r["operation"]: r for r in eng.get("reference_protocol") or []}
        for r in eng["cassieq"]:
            op = r["operation"]
            b = ref.get(op.split("(")[0])
            rows.append(
                {
                    "suite": "4 engine",
                    "what": f"{op}: msg/s; LWT/msg {r['lwt_per_message']} "
                    f"(reference {b['lwt_per_message'] if b else '-'})",
                    "unit": "msg/s",
                    "median": r["per_second"],
                    "min": None,
                    "max": None,
                    "baseline": "reference protocol" if b else None,
                    "baseline_median": b["per_second"] if b else None,
                    "ratio": r["per_second"] / b["per_second"] if b else None,
                    "digits": 0,
                }
            )
    for name, label in (("flatness_source", "source"), ("flatness_client", "client get+ack")):
        f = s.get(name, {})
        if f.get("status") == "ok":
            add(
                "5 flatness",
                f"{label} after {f['history']:,} consumed",
                f["old_rate"],
                "msg/s",
                f["fresh_rate"],
                "fresh queue",
                f["ratio_old_vs_fresh"],
            )
    prof = s.get("sink_profile", {})
    if prof.get("status") == "ok":
        rows.append(
            {
                "suite": "profile",
                "what": f"{prof['what']}, 1 process",
                "unit": "msg/s",
                "median": prof["rate_single_process"],
                "min": None,
                "max": None,
                "baseline": None,
                "baseline_median": None,
                "ratio": None,
                "digits": 0,
            }
        )
    for name in ("sink", "latency"):
        m = s.get(name, {}).get("memory")
        if m:
            rows.append(
                {
                    "suite": "6 memory",
                    "what": f"during {name}: driver / JVM / worker peak / workers sum",
                    "unit": "MiB",
                    "median": None,
                    "min": None,
                    "max": None,
                    "baseline": None,
                    "baseline_median": None,
                    "ratio": None,
                    "digits": 0,
                    "extra": f"{_fmt(m['driver_python_rss_mib'], 0)} / {_fmt(m['jvm_peak_mib'], 0)} / "
                    f"{_fmt(m['python_worker_peak_mib'], 0)} / {_fmt(m['python_workers_sum_peak_mib'], 0)}",
                }
            )
    return rows


def markdown(results: dict, plots: list[str]) -> str:
    m = results["machine"]
    c = results["config"]
    lines = [
        f"# cassieq-spark benchmark, {results['stamp']} ({'quick' if c['quick'] else 'full'})",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}; "
        f"Python {m['python']}, PySpark {m['pyspark']}, Cassandra {m['cassandra']} "
        f"({m['cassandra_nodes']}); commit {m['git_commit']}. Load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_start'])}, at end "
        f"{', '.join(f'{x:.2f}' for x in m.get('load_average_end', []))} (shared machine: "
        "absolute numbers drift, ratios within the run are what count).",
        "",
        f"Each figure: median of {c['repeats']} runs (min-max); processes/task slots: "
        f"{c['processes']}; rows: sink {c['sink_rows']:,}, source {c['source_rows']:,}.",
        "",
        "| suite | measurement | median | min | max | baseline | baseline median | ratio |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for r in table_rows(results):
        d = r["digits"]
        med = r.get("extra") or _fmt(r["median"], d)
        lines.append(
            f"| {r['suite']} | {r['what']} ({r['unit']}) | {med} | {_fmt(r['min'], d)} | "
            f"{_fmt(r['max'], d)} | {r['baseline'] or '-'} | {_fmt(r['baseline_median'], d)} | "
            f"{_fmt(r['ratio'], 2) if r['ratio'] is not None else '-'} |"
        )
    lines += ["", "## Suites not measured", ""]
    missing = False
    for name, e in results["suites"].items():
        if e.get("status") in ("skipped", "failed"):
            missing = True
            lines.append(f"- **{name}**: {e['status']}: {e.get('reason') or e.get('error')}")
        if name == "connector" and e.get("reason"):
            missing = True
            lines.append(f"- **Spark Cassandra Connector**: {e['reason']}")
    if not missing:
        lines.append("- none")
    eng = results["suites"].get("engine", {})
    if eng.get("status") == "ok" and eng.get("table"):
        lines += ["", "## Engine (bench/engine.py, one process, single messages)", "", "```"]
        lines += [ln for ln in eng["table"].splitlines() if not ln.startswith("written to")]
        lines += ["```"]
    prof = results["suites"].get("sink_profile", {})
    if prof.get("status") == "ok":
        lines += [
            "",
            "## Sink hot-path profile",
            "",
            f"{prof['what']} over {prof['rows']:,} "
            f"rows of {prof['payload_bytes']} B: {prof['rate_single_process']:,.0f} msg/s "
            "in one process." + (f" Note: {prof['note']}" if prof.get("note") else ""),
            "",
            f"Full top-30 text: `{results['stamp']}-sink-profile.txt`.",
        ]
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines.append(f"\nTotal run time: {results['total_seconds']} s.")
    return "\n".join(lines) + "\n"


def plots(results: dict, out_dir: Path, stamp: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    s = results["suites"]
    groups = []  # (title, [(label, summary)])
    for size, r in (s.get("sink", {}).get("sizes") or {}).items():
        groups.append(
            (
                f"sink, {size} B",
                [("cassieq sink", r["sink_rate"]), ("raw driver", r["driver_rate"])],
            )
        )
    if s.get("source", {}).get("status") == "ok":
        r = s["source"]
        groups.append(
            ("consume", [("cassieq source", r["source_rate"]), ("driver scan", r["scan_rate"])])
        )
    for name in ("flatness_source", "flatness_client"):
        if s.get(name, {}).get("status") == "ok":
            r = s[name]
            groups.append(
                (name.replace("_", " "), [("old queue", r["old_rate"]), ("fresh", r["fresh_rate"])])
            )
    if groups:
        fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.6), squeeze=False)
        for ax, (title, bars) in zip(axes[0], groups, strict=True):
            med = [b[1]["median"] for b in bars]
            lo = [b[1]["median"] - b[1]["min"] for b in bars]
            hi = [b[1]["max"] - b[1]["median"] for b in bars]
            ax.bar(
                [b[0] for b in bars], med, yerr=[lo, hi], capsize=4, color=["tab:blue", "tab:gray"]
            )
            ax.set_title(title, fontsize=10)
            ax.set_ylabel("messages/s")
            ax.tick_params(axis="x", labelsize=8)
        fig.suptitle(f"throughput, median and min-max ({stamp})", fontsize=10)
        fig.tight_layout()
        name = f"{stamp}-throughput.png"
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        made.append(name)
    trig = s.get("latency", {}).get("triggers") or {}
    if trig:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        for t, r in trig.items():
            vals = r["samples"]
            if vals:
                ax.plot(
                    vals, [(i + 1) / len(vals) for i in range(len(vals))], label=f"trigger {t} s"
                )
        ax.set_xlabel("put -> delivery (s)")
        ax.set_ylabel("fraction of messages")
        ax.set_title(f"end-to-end latency CDF ({stamp})", fontsize=10)
        ax.legend()
        fig.tight_layout()
        name = f"{stamp}-latency.png"
        fig.savefig(out_dir / name, dpi=100)
        plt.close(fig)
        made.append(name)
    return made


def write_outputs(results: dict, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = results["stamp"]
    paths = {}
    prof = results["suites"].get("sink_profile", {})
    if prof.get("status") == "ok":
        p = out_dir / f"{stamp}-sink-profile.txt"
        p.write_text(
            f"# {prof['what']}\n# {prof['rows']} rows of {prof['payload_bytes']} B, "
            f"{prof['seconds']:.2f} s\n# {prof.get('note') or ''}\n\n"
            "## sorted by cumulative time\n"
            + prof["top_cumulative"]
            + "\n## sorted by own time\n"
            + prof["top_tottime"]
        )
        paths["profile"] = p
    try:
        made = plots(results, out_dir, stamp)
    except Exception:
        log.exception("plots failed")
        made = []
    p = out_dir / f"{stamp}.json"
    p.write_text(json.dumps(results, indent=1, default=str, sort_keys=False))
    paths["json"] = p
    p = out_dir / f"{stamp}.md"
    p.write_text(markdown(results, made))
    paths["md"] = p
    for m in made:
        paths[m] = out_dir / m
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes, under 5 minutes (default)")
    mode.add_argument("--full", action="store_true", help="full sizes (2M-message history, ...)")
    ap.add_argument(
        "--only",
        help="comma-separated suites: connector,engine,profile,sink,source,latency,flatness",
    )
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--rows", type=int, help="rows for the sink and source suites")
    ap.add_argument(
        "--contact-points", default=os.environ.get("CASSIEQ_CONTACT_POINTS", "127.0.0.1")
    )
    ap.add_argument("--port", type=int, default=int(os.environ.get("CASSIEQ_PORT", "9042")))
    ap.add_argument("--results-dir", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("cassandra", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    cfg = BenchConfig.make(
        quick=not args.full,
        repeats=args.repeats,
        sink_rows=args.rows,
        source_rows=args.rows,
        contact_points=args.contact_points,
        port=args.port,
    )
    only = {x.strip() for x in args.only.split(",")} if args.only else None
    ensure_cassandra(cfg)
    ensure_keyspace(cfg)
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    results = run_all(cfg, only)
    results["stamp"] = stamp
    paths = write_outputs(results, Path(args.results_dir))
    print(paths["md"].read_text())
    print("written: " + ", ".join(str(p) for p in paths.values()))
    failed = [n for n, e in results["suites"].items() if e.get("status") == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
