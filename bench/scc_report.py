"""The Spark Cassandra Connector comparison of a run: this run's sink and source suites against
the ``scc`` suite's writes and read, as ratios of medians (and the range of the ratios of
repeat i to repeat i), with the goals of issue 15: sink >= 1.5x the tuned connector write,
source consume+ack >= 1.0x the connector's full read."""

from __future__ import annotations

from .rows import table_row

WRITE_GOAL = 1.5
READ_GOAL = 1.0


def _pair(a: dict | None, b: dict | None) -> dict | None:
    """``a / b`` of two summaries: the medians' ratio, and min/max over repeat i vs repeat i."""
    if not a or not b or not a.get("median") or not b.get("median"):
        return None
    pairs = [x / y for x, y in zip(a.get("values") or [], b.get("values") or [], strict=False) if y]
    return {
        "ratio": a["median"] / b["median"],
        "min": min(pairs) if pairs else None,
        "max": max(pairs) if pairs else None,
    }


def comparison(results: dict) -> dict:
    """Every ratio the run allows (none when the scc suite or the other side did not run ok)."""
    s = results["suites"]
    scc = s.get("scc", {})
    if scc.get("status") != "ok":
        return {}
    out: dict = {"write": {}, "read": {}}
    sink = s.get("sink", {})
    if sink.get("status") == "ok":
        for size, r in (sink.get("sizes") or {}).items():
            c = (scc.get("sizes") or {}).get(size)
            if not c:
                continue
            out["write"][size] = {
                "vs_tuned": _pair(r["sink_rate"], c["tuned_write_rate"]),
                "vs_default": _pair(r["sink_rate"], c["default_write_rate"]),
                "goal": WRITE_GOAL,
            }
    src = s.get("source", {})
    c = (scc.get("sizes") or {}).get("100")
    if src.get("status") == "ok" and c:
        out["read"]["100"] = {
            "batches_vs_read": _pair(src["source_rate"], c["read_rate"]),
            "wall_vs_read": _pair(src["source_wall_rate"], c["read_rate"]),
            "plain_read_vs_read": _pair(src.get("spark_read_rate"), c["read_rate"]),
            "floor_vs_read": _pair(src.get("floor_read_rate"), c["read_rate"]),
            "goal": READ_GOAL,
        }
    return out


def table_rows(results: dict) -> list[dict]:
    """Rows for the run's table: the connector's own figures, then the ratios against it."""
    s = results["suites"]
    scc = s.get("scc", {})
    if scc.get("status") != "ok":
        return []
    rows: list[dict] = []

    def row(suite, what, summ, base=None, base_name=None, ratio=None):
        rows.append(table_row(suite, what, summ, "msg/s", base, base_name, ratio))

    for size, c in (scc.get("sizes") or {}).items():
        row("scc", f"SCC 3.5.1 df.write, {size} B, default settings", c["default_write_rate"])
        row("scc", f"SCC 3.5.1 df.write, {size} B, tuned", c["tuned_write_rate"])
        if c["read_rate"].get("median") is not None:  # interleaved runs read 100 B only
            row("scc", f"SCC 3.5.1 spark.read in full, {size} B", c["read_rate"])
    cmp = comparison(results)
    for size, w in cmp.get("write", {}).items():
        r, c = s["sink"]["sizes"][size], scc["sizes"][size]
        what = f"writeStream cassieq, {size} B, write phase"
        if w["vs_tuned"]:
            row("1c sink vs SCC", what, r["sink_rate"], c["tuned_write_rate"],
                f"SCC write tuned (goal >= {WRITE_GOAL})", w["vs_tuned"]["ratio"])  # fmt: skip
        if w["vs_default"]:
            row("1c sink vs SCC", what, r["sink_rate"], c["default_write_rate"],
                "SCC write default", w["vs_default"]["ratio"])  # fmt: skip
    rd = cmp.get("read", {}).get("100")
    if rd:
        src, c = s["source"], scc["sizes"]["100"]
        base = f"SCC full read, 100 B (goal >= {READ_GOAL})"
        if rd["batches_vs_read"]:
            row("2b source vs SCC", "AvailableNow consume+ack, batches", src["source_rate"],
                c["read_rate"], base, rd["batches_vs_read"]["ratio"])  # fmt: skip
        if rd["wall_vs_read"]:
            row("2b source vs SCC", "AvailableNow consume+ack, incl. query start",
                src["source_wall_rate"], c["read_rate"], base, rd["wall_vs_read"]["ratio"])  # fmt: skip
        if rd["plain_read_vs_read"]:
            row("2b source vs SCC", "plain spark.read cassieq (no acks), 100 B",
                src["spark_read_rate"], c["read_rate"], "SCC full read, 100 B",
                rd["plain_read_vs_read"]["ratio"])  # fmt: skip
        if rd.get("floor_vs_read"):
            row("2b source vs SCC", "Python data source floor (ready Arrow batches, no Cassandra)",
                src["floor_read_rate"], c["read_rate"], "SCC full read, 100 B",
                rd["floor_vs_read"]["ratio"])  # fmt: skip
    return rows


def markdown(results: dict) -> list[str]:
    """The section on the connector: how it ran, the ratios with their range and the goals."""
    scc = results["suites"].get("scc", {})
    if scc.get("status") != "ok":
        return []
    env = scc.get("env") or {}
    lines = [
        "",
        "## Spark Cassandra Connector (suite scc, same run)",
        "",
        f"{scc['connector']} on PySpark {scc['pyspark']} (Python {scc['python']}), local"
        f"[{scc['processes']}], {scc['rows']:,} rows per write into a plain table "
        "(bucket int, id bigint, value blob, PRIMARY KEY (bucket, id)); tuned = "
        + ", ".join(f"{k}={v}" for k, v in scc["tuned_settings"].items())
        + f". Side environment: virtualenv {env.get('venv')} ({env.get('venv_seconds')} s), "
        f"jars {env.get('jars')} ({env.get('jars_seconds')} s); the job was up and warm in "
        f"{scc['start_seconds']} s (its Spark session {scc['session_seconds']} s). Read "
        f"partitions: {scc['sizes'].get('100', {}).get('read_partitions')}.",
        "",
    ]
    loads = [
        f"{name} {e['load_average'][0]:.1f}-{e['load_average'][1]:.1f}"
        for name, e in results["suites"].items()
        if name in ("sink", "source", "scc") and e.get("load_average")
    ]
    if scc.get("interleaved_with"):
        how = (
            "Interleaved with the " + " and ".join(scc["interleaved_with"]) + " suites: its "
            "default and tuned writes follow each sink repeat (and its driver baseline), its read "
            "follows each source repeat, so drifting load hits both alike"
        )
    else:
        how = "Run alone (no sink or source suite in this run)"
    lines += [
        how
        + (": 1-minute load average at start-end of " + ", ".join(loads) if loads else "")
        + ".",
        "",
    ]
    cmp = comparison(results)

    def fmt(p: dict | None, goal: float) -> str:
        if not p:
            return "-"
        rng = f" (repeat by repeat {p['min']:.2f}-{p['max']:.2f})" if p["min"] is not None else ""
        verdict = "met" if p["ratio"] >= goal else "NOT met"
        return f"**{p['ratio']:.2f}**{rng}, goal >= {goal}: {verdict}"

    for size, w in cmp.get("write", {}).items():
        lines.append(f"- sink vs SCC tuned write, {size} B: {fmt(w['vs_tuned'], WRITE_GOAL)}")
        if w["vs_default"]:
            lines.append(f"- sink vs SCC default write, {size} B: {w['vs_default']['ratio']:.2f}")
    rd = cmp.get("read", {}).get("100")
    if rd:
        lines.append(
            "- source consume+ack (batches) vs SCC full read, 100 B: "
            + fmt(rd["batches_vs_read"], READ_GOAL)
        )
        lines.append(
            "- source consume+ack incl. query start vs SCC full read, 100 B: "
            + fmt(rd["wall_vs_read"], READ_GOAL)
        )
        if rd["plain_read_vs_read"]:
            lines.append(
                "- plain spark.read of the queue (no stream, no acks) vs SCC full read, 100 B: "
                f"{rd['plain_read_vs_read']['ratio']:.2f}"
            )
        fl = rd.get("floor_vs_read")
        if fl and fl["min"] is not None:
            lines.append(
                "- the floor of a Python data source on this Spark (`bench/source_floor.py`: "
                "ready Arrow batches of the source's schema, no Cassandra) vs SCC full read: "
                f"**{fl['ratio']:.2f}** (repeat by repeat {fl['min']:.2f}-{fl['max']:.2f}): "
                "a source that reads Cassandra cannot pass this"
            )
    if not cmp.get("write") and not cmp.get("read"):
        lines.append("- no ratios: the sink and source suites did not run ok in this run")
    return lines
