"""A run's results as a table (markdown) and files: ``<stamp>.json``, ``<stamp>.md``, the plots
and the sink's profile."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from . import scc_report
from . import service as service_suite
from .plots import plots
from .rows import table_row

log = logging.getLogger("bench")


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
        rows.append(table_row(suite, what, summ, unit, base, base_name, ratio, digits))

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
        if "source_rate_1k" in src:
            add(
                "2 source",
                "AvailableNow consume+ack, batches, 1 KiB (goal >= 0.8x 100 B)",
                src["source_rate_1k"],
                "msg/s",
                src["source_rate"],
                "the same at 100 B",
                src["ratio_1k_vs_100"]["ratio"],
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
            # get_many / ack_many against the reference's get / ack (one message per call there).
            b = ref.get(
                op.split("(")[0].removesuffix("_many")
                if op.startswith(("get_many", "ack_many"))
                else op.split("(")[0]
            )
            rows.append(
                {
                    "suite": "4 engine",
                    "what": f"{op}: msg/s; LWT/msg {r['lwt_per_message']} "
                    f"(reference {b['lwt_per_message'] if b else '-'})",
                    "unit": "msg/s",
                    "median": r["per_second"],
                    "min": r.get("min"),
                    "max": r.get("max"),
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
    ac = s.get("async_client", {})
    if ac.get("status") == "ok":
        add(
            "9 async client",
            f"get_many({ac['batch']})+ack_many, {ac['tasks']} tasks on one loop",
            ac["async_rate"],
            "msg/s",
            ac["sync_rate"],
            f"QueueClient, {ac['tasks']} threads",
            ac["ratio_async_vs_sync"],
        )
    rows += scc_report.table_rows(results)
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


_CPU_RUNS = {
    "floor_read": "floor: a Python source of ready Arrow batches (no Cassandra)",
    "spark_read": "plain `spark.read` of the queue",
    "consume_incl_start": "stream consume+ack, query start included",
    "scc_read": "SCC 3.5.1 full read, 100 B",
}


def _cpu_split(src: dict) -> list[str]:
    """The source suite's CPU microseconds per message by kind of process (bench/cpu_split.py):
    where each reader's time goes on the shared cores."""
    cpu = src.get("cpu_us_per_message")
    if not cpu:
        return []
    kinds = (
        "cassandra",
        "spark_jvm",
        "python_worker",
        "source_runner",
        "bench",
        "other",
        "total",
        "idle_share",
    )
    lines = [
        "",
        "## CPU per message by kind of process (source suite; bench/cpu_split.py)",
        "",
        "Median (min-max) of the repeats, CPU microseconds per message; `python_worker`: the "
        "executors' Python (the reads), `source_runner`: the stream's Python on the driver "
        "(its process start, planning, acks); `bench`: the bench's processes (the SCC job's "
        "Python driver); `other`: the rest of the machine (other work on it); `idle_share`: "
        "the cores' idle share over the run.",
        "",
        "| run | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    for what, label in _CPU_RUNS.items():
        if what not in cpu:
            continue
        cells = []
        for k in kinds:
            v = cpu[what].get(k)
            cells.append("-" if not v else f"{v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


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
    lines += scc_report.markdown(results)
    lines += _cpu_split(results["suites"].get("source", {}))
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
    lines += service_suite.markdown(results["suites"].get("service", {}))
    scale = results["suites"].get("scale", {})
    if scale.get("status") == "ok":
        lines += [
            "",
            f"## Scale ({scale['rows']:,} messages; ratios to 1 worker x 1 node in this run)",
            "",
            "| workers x nodes | sink msg/s | ratio | source msg/s | ratio |",
            "|---|---|---|---|---|",
        ]
        for key, c in scale["configs"].items():
            lines.append(
                f"| {key} | {c['sink_msg_s']:,} | {c['sink_ratio']:.2f} | "
                f"{c['source_msg_s']:,} | {c['source_ratio']:.2f} |"
            )
        if scale.get("ring"):
            lines.append(f"\n{scale['ring']}")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines.append(f"\nTotal run time: {results['total_seconds']} s.")
    return "\n".join(lines) + "\n"


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
    if results["suites"].get("scc", {}).get("status") == "ok":
        results["scc_comparison"] = scc_report.comparison(results)
    p = out_dir / f"{stamp}.json"
    p.write_text(json.dumps(results, indent=1, default=str, sort_keys=False))
    paths["json"] = p
    p = out_dir / f"{stamp}.md"
    p.write_text(markdown(results, made))
    paths["md"] = p
    for m in made:
        paths[m] = out_dir / m
    return paths
