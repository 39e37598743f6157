"""The profiles of issue 15: ``python -m bench.profile_run`` (``make bench-profile``).

For each path it runs one profile script and writes its report to
``bench/results/profile-<stamp>-<path>.txt`` (and prints it):

- ``paths``: single put, single get, get_many / ack_many, and the reference protocol's put,
  get and ack: statements, Paxos rounds, sequential round trips and where each call's time
  goes (``bench/profile_paths.py``);
- ``sink``: the sink's write phase in Spark, each task's ``write`` profiled
  (``bench/profile_sink.py``);
- ``source``: an AvailableNow consume-and-ack run, its planning, reads and ack pass
  profiled against Spark's own per-trigger split (``bench/profile_source.py``);
- ``latency``: put -> delivery at a 0.2 s ``processingTime`` trigger, each trigger split, and
  the same trigger on Spark's own ``rate`` source (``bench/profile_latency.py``).

Each script checks it did the work (rows delivered, acked, enqueued) before reporting.
Run it ``nice``: it shares the machine's cores with whatever else runs there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import (
    BenchConfig,
    add_cassandra_args,
    ensure_cassandra,
    ensure_keyspace,
    log_to_stderr,
    spark_session,
)
from .machine import ROOT

PATHS = ("paths", "sink", "source", "latency")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.profile_run", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--only", help="comma-separated: " + ",".join(PATHS))
    ap.add_argument("--rows", type=int, default=50_000, help="rows for the sink and source")
    ap.add_argument("--messages", type=int, default=300, help="calls per single-message path")
    ap.add_argument("--latency-seconds", type=float, default=15.0)
    add_cassandra_args(ap)
    args = ap.parse_args(argv)
    log_to_stderr()
    only = [x.strip() for x in args.only.split(",")] if args.only else list(PATHS)
    unknown = set(only) - set(PATHS)
    if unknown:
        ap.error(f"unknown: {', '.join(sorted(unknown))}")
    cfg = BenchConfig.make(
        quick=True,
        contact_points=args.contact_points,
        port=args.port,
        latency_seconds=args.latency_seconds,
    )
    ensure_cassandra(cfg)
    ensure_keyspace(cfg)
    stamp = dt.datetime.now().strftime("%Y-%m-%d_%H%M%S")
    out_dir = Path(args.results_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Spark's Python processes inherit the environment: set before the session starts.
    prof_dir = tempfile.mkdtemp(prefix="cassieq-prof-")
    from .prof_datasource import ENV

    os.environ[ENV] = prof_dir
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    try:
        written = _run(args, cfg, only, stamp, out_dir, prof_dir)
    finally:
        shutil.rmtree(prof_dir, ignore_errors=True)
    print("written: " + ", ".join(written))
    return 0


def _run(
    args, cfg: BenchConfig, only: list[str], stamp: str, out_dir: Path, prof_dir: str
) -> list[str]:
    spark = None
    written = []
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    for name in only:
        load0 = os.getloadavg()
        if name == "paths":
            from . import profile_paths

            text = profile_paths.run(cfg, args.messages)
        else:
            if spark is None:
                spark = spark_session(cfg, "cassieq-profile")
            if name == "sink":
                from . import profile_sink

                text = profile_sink.run(spark, cfg, args.rows, prof_dir)
            elif name == "source":
                from . import profile_source

                text = profile_source.run(spark, cfg, args.rows, prof_dir)
            else:
                from . import profile_latency

                text = profile_latency.run(spark, cfg, prof_dir)
        load1 = os.getloadavg()
        head = (
            f"[{stamp}, commit {commit}, {os.cpu_count()} cores, Cassandra {cfg.contact_points}:"
            f"{cfg.port} (one node, same machine); load average (1/5/15 min) at start "
            f"{'/'.join(f'{x:.1f}' for x in load0)}, at end {'/'.join(f'{x:.1f}' for x in load1)}]"
        )
        text = head + "\n" + text
        path = out_dir / f"profile-{stamp}-{name}.txt"
        # Runs started in the same second (several at once) each keep their own file: created
        # exclusively, the next free suffix otherwise.
        k = 2
        while True:
            try:
                with open(path, "x") as f:
                    f.write(text)
                break
            except FileExistsError:
                path = out_dir / f"profile-{stamp}-{name}-{k}.txt"
                k += 1
        print(text)
        written.append(str(path))
    if spark is not None:
        spark.stop()
    return written


if __name__ == "__main__":
    sys.exit(main())
