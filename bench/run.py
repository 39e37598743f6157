"""The benchmark driver: ``python -m bench.run --quick|--full`` (``make bench-quick`` / ``make bench``).

Runs every suite, each comparison against a baseline measured in the same run, and writes
``bench/results/<stamp>.json``, ``<stamp>.md`` (the table), ``<stamp>-*.png`` (plots) and the
sink's hot-path profile. A suite whose component is not built yet is recorded as skipped with
the reason, so the harness runs today and picks components up when they land.

Modules: ``suites`` (running and recording each suite), ``machine`` (what it ran on), ``report``
(table and files), ``plots`` (PNGs); the suites themselves are ``sink``, ``source``, ``latency``,
``flatness``, ``engine``, ``memory`` and ``scc_suite`` (the Spark Cassandra Connector on a side
PySpark 3.5; its ratios in ``scc_report``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from pathlib import Path

from .common import (
    BenchConfig,
    add_cassandra_args,
    ensure_cassandra,
    ensure_keyspace,
    log_to_stderr,
)
from .report import markdown, table_rows, write_outputs
from .suites import Runner, check_connector, run_all, run_engine

__all__ = [
    "Runner",
    "check_connector",
    "main",
    "markdown",
    "run_all",
    "run_engine",
    "table_rows",
    "write_outputs",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sizes, under 5 minutes (default)")
    mode.add_argument("--full", action="store_true", help="full sizes (2M-message history, ...)")
    ap.add_argument(
        "--only",
        help="comma-separated suites: connector,engine,groups,redrive,profile,sink,source,latency,flatness,scc,scale,service,async_client (scale: full mode or named)",
    )
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--rows", type=int, help="rows for the sink and source suites")
    ap.add_argument(
        "--original-src",
        default=os.environ.get("CASSIEQ_ORIGINAL_SRC", ""),
        help="a checkout of the original CassieQ server, the service suite's baseline "
        "(or CASSIEQ_ORIGINAL_SRC; without it that baseline is skipped)",
    )
    add_cassandra_args(ap)
    args = ap.parse_args(argv)
    log_to_stderr()
    cfg = BenchConfig.make(
        quick=not args.full,
        repeats=args.repeats,
        sink_rows=args.rows,
        source_rows=args.rows,
        contact_points=args.contact_points,
        port=args.port,
        original_src=args.original_src,
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
