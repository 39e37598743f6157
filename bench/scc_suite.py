"""Suite ``scc``: the Spark Cassandra Connector as a same-run baseline for the sink and the source.

The connector has no release for Spark 4; its newest, 3.5.1 (Scala 2.12), runs on Spark 3.5. So
the suite builds a side environment and caches it under ``.cassandra/bench-scc/`` (git-ignored):

- ``venv/``: ``python3 -m venv`` + ``pip install 'pyspark==3.5.*'`` (PySpark 3.5 supports
  Python 3.8-3.11; the first of ``python3``, ``python3.11``, ``python3.10``, ... in that range);
- ``jars/``: ``spark-cassandra-connector_2.12:3.5.1`` and its runtime dependencies from Maven
  Central through ``bench/scc/pom.xml`` (Spark and Scala excluded: PySpark ships them);

each rebuilt only when its stamp (the pom's hash, the pinned PySpark line) no longer matches.
Then it creates plain tables in the bench keyspace and runs ``bench/scc/scc_job.py`` with the
side Python: default and tuned writes of the sink suite's rows, each counted, and a full read
of the tuned table. The ratios against this run's own sink and source suites are computed in
``bench/report.py``. When the environment cannot be built (no network, no ``mvn``, no suitable
Python), the suite is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time

from .common import BenchConfig, SuiteUnavailable, client, summarize
from .machine import ROOT

log = logging.getLogger("bench.scc")

SCC_DIR = ROOT / "bench" / "scc"
POM = SCC_DIR / "pom.xml"
JOB = SCC_DIR / "scc_job.py"
# Not under bench/: the unit tests walk bench/ for modules; .cassandra/ is git-ignored and
# `make clean` removes it, beside check_connector's .cassandra/bench-jars.
CACHE = ROOT / ".cassandra" / "bench-scc"
VENV = CACHE / "venv"
JARS = CACHE / "jars"
PYSPARK_SPEC = "pyspark==3.5.*"
PYTHON_RANGE = ((3, 8), (3, 11))  # PySpark 3.5's supported Pythons
SIZES = (100, 1024)


def _run(cmd: list[str], what: str, timeout: float, **kw) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SuiteUnavailable(f"{what}: {type(exc).__name__}: {exc}") from exc
    if p.returncode != 0:
        tail = " | ".join((p.stdout + p.stderr).strip().splitlines()[-5:])
        raise SuiteUnavailable(f"{what} failed (exit {p.returncode}): {tail}")
    return p


def _python_version(exe: str) -> tuple[int, int] | None:
    try:
        p = subprocess.run(
            [exe, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        major, minor = p.stdout.split()
        return int(major), int(minor)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def find_python() -> str:
    """The first interpreter PySpark 3.5 supports, or SuiteUnavailable with what was found."""
    seen = []
    for name in ("python3", "python3.11", "python3.10", "python3.9", "python3.8"):
        exe = shutil.which(name)
        if exe is None:
            continue
        v = _python_version(exe)
        seen.append(f"{name}={'.'.join(map(str, v)) if v else '?'}")
        if v is not None and PYTHON_RANGE[0] <= v <= PYTHON_RANGE[1]:
            return exe
    raise SuiteUnavailable(
        "no Python for PySpark 3.5 (3.8-3.11) to build the connector's side environment: "
        + (", ".join(seen) or "none found")
    )


def ensure_venv() -> dict:
    """``.cassandra/bench-scc/venv`` with PySpark 3.5; built once, then reused."""
    stamp = VENV / ".installed"
    py = VENV / "bin" / "python"
    if stamp.is_file() and stamp.read_text() == PYSPARK_SPEC and py.exists():
        return {"venv": "cached", "venv_seconds": 0.0}
    t0 = time.perf_counter()
    base = find_python()
    shutil.rmtree(VENV, ignore_errors=True)
    _run([base, "-m", "venv", str(VENV)], "python3 -m venv", 300)
    _run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", PYSPARK_SPEC],
        f"pip install {PYSPARK_SPEC}",
        1200,
    )
    stamp.write_text(PYSPARK_SPEC)
    return {"venv": "built", "venv_seconds": round(time.perf_counter() - t0, 1)}


def ensure_jars() -> dict:
    """``.cassandra/bench-scc/jars``: the connector and its dependencies, via ``bench/scc/pom.xml``."""
    digest = hashlib.sha256(POM.read_bytes()).hexdigest()
    stamp = JARS / ".resolved"
    if stamp.is_file() and stamp.read_text() == digest and any(JARS.glob("*.jar")):
        return {"jars": "cached", "jars_seconds": 0.0}
    if shutil.which("mvn") is None:
        raise SuiteUnavailable("mvn not installed: the connector's jars cannot be resolved")
    t0 = time.perf_counter()
    shutil.rmtree(JARS, ignore_errors=True)
    JARS.mkdir(parents=True)
    _run(
        [
            "mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
            f"-DoutputDirectory={JARS}", "-DincludeScope=runtime",
        ],
        "mvn dependency:copy-dependencies (bench/scc/pom.xml)",
        900,
    )  # fmt: skip
    stamp.write_text(digest)
    return {"jars": "built", "jars_seconds": round(time.perf_counter() - t0, 1)}


def ensure_env() -> dict:
    """Both halves of the side environment, with how long each took (0 when cached)."""
    t0 = time.perf_counter()
    env = {**ensure_venv(), **ensure_jars()}
    env["seconds"] = round(time.perf_counter() - t0, 1)
    return env


def _tables(prefix: str, repeats: int) -> list[str]:
    names = [f"{prefix}_warm"]
    for size in SIZES:
        for rep in range(repeats):
            names += [f"{prefix}_{size}_default_{rep}", f"{prefix}_{size}_tuned_{rep}"]
    return names


def create_tables(cfg: BenchConfig, names: list[str]) -> None:
    with client(cfg) as c:
        for t in names:
            c.conn.session.execute(f"DROP TABLE IF EXISTS {cfg.keyspace}.{t}", timeout=120)
            c.conn.session.execute(
                f"CREATE TABLE {cfg.keyspace}.{t} (bucket int, id bigint, value blob, "
                "PRIMARY KEY (bucket, id))",
                timeout=120,
            )


def drop_tables(cfg: BenchConfig, names: list[str]) -> None:
    try:
        with client(cfg) as c:
            for t in names:
                c.conn.session.execute(f"DROP TABLE IF EXISTS {cfg.keyspace}.{t}", timeout=120)
    except Exception:  # clean-up only; the next run drops them before creating
        log.warning("could not drop the scc tables %s", names, exc_info=True)


def run_job(cfg: BenchConfig, prefix: str) -> dict:
    """``bench/scc/scc_job.py`` under the side Python; its one JSON line, parsed."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "PYTHONPATH", "PYTHONHOME")
    }
    py = str(VENV / "bin" / "python")
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = py
    host = cfg.contact_points.split(",")[0].split(":")[0]
    cmd = [
        py, str(JOB), "--jars-dir", str(JARS), "--host", host, "--port", str(cfg.port),
        "--keyspace", cfg.keyspace, "--prefix", prefix, "--rows", str(cfg.sink_rows),
        "--repeats", str(cfg.repeats), "--sizes", ",".join(map(str, SIZES)),
        "--processes", str(cfg.processes),
    ]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = "\n".join(p.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"scc_job.py exited with {p.returncode}:\n{tail}")
    return json.loads(lines[-1])


def run(cfg: BenchConfig) -> dict:
    """Build or reuse the side environment, run the job, summarize every rate (median/min/max)."""
    env = ensure_env()
    log.info("scc side environment: %s", env)
    prefix = f"scc_{os.getpid()}"
    names = _tables(prefix, cfg.repeats)
    create_tables(cfg, names)
    try:
        t0 = time.perf_counter()
        job = run_job(cfg, prefix)
        job_seconds = time.perf_counter() - t0
    finally:
        drop_tables(cfg, names)
    n = cfg.sink_rows
    sizes: dict[str, dict] = {}
    for size, runs in job["sizes"].items():
        for kind in ("default_write", "tuned_write"):
            bad = [r for r in runs[kind] if r["rows_in_table"] != n]
            if bad:
                raise RuntimeError(f"scc {kind} {size} B: tables with a wrong count: {bad}")
        if any(r["rows"] != n for r in runs["read"]):
            raise RuntimeError(f"scc read {size} B: a read counted other than {n} rows")
        sizes[size] = {
            "default_write_rate": summarize([r["rate"] for r in runs["default_write"]]),
            "tuned_write_rate": summarize([r["rate"] for r in runs["tuned_write"]]),
            "read_rate": summarize([r["rate"] for r in runs["read"]]),
            "read_partitions": sorted({r["partitions"] for r in runs["read"]}),
        }
        log.info(
            "scc %s B: %s",
            size,
            {k: v["median"] for k, v in sizes[size].items() if k != "read_partitions"},
        )
    return {
        "rows": n,
        "processes": cfg.processes,
        "connector": "com.datastax.spark:spark-cassandra-connector_2.12:3.5.1",
        "pyspark": job["pyspark"],
        "python": job["python"],
        "jars": job["jars"],
        "tuned_settings": job["tuned_settings"],
        "env": env,
        "job_seconds": round(job_seconds, 1),
        "session_seconds": round(job["session_seconds"], 1),
        "sizes": sizes,
    }
