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
import tempfile
import time

from . import memory
from .common import BenchConfig, SuiteUnavailable, client, summarize
from .cpu_split import CpuSplit
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


class SccJob:
    """``bench/scc/scc_job.py`` under the side Python, up for the whole run: the sink and source
    suites call :meth:`after_sink_repeat` / :meth:`after_source_repeat` so that the connector's
    runs alternate with theirs (drifting load hits both alike), or :meth:`run_alone` does them
    all. A failure is kept and raised by :meth:`finish`, never into the calling suite."""

    def __init__(self, cfg: BenchConfig):
        self.cfg = cfg
        self.env = ensure_env()
        log.info("scc side environment: %s", self.env)
        self.prefix = f"scc_{os.getpid()}"
        self.tables = _tables(self.prefix, cfg.repeats)
        create_tables(cfg, self.tables)
        self.runs: dict[str, dict[str, list]] = {
            str(size): {"default_write": [], "tuned_write": [], "read": []} for size in SIZES
        }
        self.error: str | None = None
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_HOME", "PYTHONPATH", "PYTHONHOME")
        }
        py = str(VENV / "bin" / "python")
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = py
        host = cfg.contact_points.split(",")[0].split(":")[0]
        cmd = [
            py, str(JOB), "--jars-dir", str(JARS), "--host", host, "--port", str(cfg.port),
            "--keyspace", cfg.keyspace, "--warm-table", f"{self.prefix}_warm",
            "--rows", str(cfg.sink_rows), "--processes", str(cfg.processes),
        ]  # fmt: skip
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env=env,
        )
        memory.EXCLUDED_ROOTS.add(self.proc.pid)
        self.info = self._reply()
        self.start_seconds = time.perf_counter() - t0

    def _reply(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                out = json.loads(line)
                if "error" in out:
                    raise RuntimeError(f"scc_job.py: {out['error']}")
                return out
        self.proc.wait(timeout=60)
        self.stderr.seek(0)
        tail = "\n".join(self.stderr.read().strip().splitlines()[-15:])
        raise RuntimeError(f"scc_job.py exited with {self.proc.returncode}:\n{tail}")

    def _ask(self, **cmd) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def _guarded(self, fn, *args) -> None:
        if self.error is not None:
            return
        try:
            fn(*args)
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("scc: %s", self.error)

    def _writes(self, size: int, rep: int) -> None:
        for mode in ("default", "tuned"):
            table = f"{self.prefix}_{size}_{mode}_{rep}"
            r = self._ask(op="write", size=size, mode=mode, table=table)
            self.runs[str(size)][f"{mode}_write"].append(r)
        w = self.runs[str(size)]
        log.info("scc %dB rep %d: default write %.0f/s, tuned write %.0f/s", size, rep,
                 w["default_write"][-1]["rate"], w["tuned_write"][-1]["rate"])  # fmt: skip

    def _ensure_written(self, size: int, rep: int) -> None:
        """The tables a read of repeat ``rep`` reads, written first if no sink suite did."""
        if len(self.runs[str(size)]["tuned_write"]) <= rep % self.cfg.repeats:
            self._writes(size, rep % self.cfg.repeats)

    def _read(self, size: int, rep: int) -> None:
        self._ensure_written(size, rep)
        table = f"{self.prefix}_{size}_tuned_{rep % self.cfg.repeats}"
        r = self._ask(op="read", size=size, table=table)
        self.runs[str(size)]["read"].append(r)
        log.info("scc %dB rep %d: read %.0f/s", size, rep, r["rate"])

    def after_sink_repeat(self, size: int, rep: int) -> None:
        self._guarded(self._writes, size, rep)

    def after_source_repeat(self, rep: int) -> dict[str, float] | None:
        """The read of the tuned 100 B table of the same repeat (the source suite reads 100 B
        messages), its table written first if no sink suite did; returns the read's CPU
        microseconds per row by kind of process (``cpu_split``), or None if it failed."""
        self._guarded(self._ensure_written, 100, rep)  # outside the read's CPU split
        with CpuSplit() as split:
            self._guarded(self._read, 100, rep)
        if self.error is not None:
            return None
        return split.per_message_us(self.cfg.sink_rows)

    def run_alone(self, writes: bool = True, reads: bool = True) -> None:
        for rep in range(self.cfg.repeats):
            for size in SIZES:
                if writes:
                    self._guarded(self._writes, size, rep)
                if reads:
                    self._guarded(self._read, size, rep)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=120)
        except Exception:
            log.warning("scc_job.py did not stop; killing it", exc_info=True)
            self.proc.kill()
        finally:
            memory.EXCLUDED_ROOTS.discard(self.proc.pid)
            drop_tables(self.cfg, self.tables)
            self.stderr.close()

    def finish(self, interleaved: list[str]) -> dict:
        """Close the job and summarize every rate (median/min/max), or raise its failure."""
        self.close()
        if self.error is not None:
            raise RuntimeError(self.error)
        n = self.cfg.sink_rows
        sizes: dict[str, dict] = {}
        for size, runs in self.runs.items():
            if any(
                r["rows_in_table"] != n for k in ("default_write", "tuned_write") for r in runs[k]
            ):
                raise RuntimeError(f"scc {size} B: a written table counted other than {n} rows")
            if any(r["rows"] != n for r in runs["read"]):
                raise RuntimeError(f"scc read {size} B: a read counted other than {n} rows")
            sizes[size] = {
                "default_write_rate": summarize([r["rate"] for r in runs["default_write"]]),
                "tuned_write_rate": summarize([r["rate"] for r in runs["tuned_write"]]),
                "read_rate": summarize([r["rate"] for r in runs["read"]]),
                "read_partitions": sorted({r["partitions"] for r in runs["read"]}),
            }
        return {
            "rows": n,
            "processes": self.cfg.processes,
            "connector": "com.datastax.spark:spark-cassandra-connector_2.12:3.5.1",
            "pyspark": self.info["pyspark"],
            "python": self.info["python"],
            "jars": self.info["jars"],
            "tuned_settings": self.info["tuned_settings"],
            "env": self.env,
            "interleaved_with": interleaved,
            "start_seconds": round(self.start_seconds, 1),
            "session_seconds": round(self.info["session_seconds"], 1),
            "sizes": sizes,
        }


def run(cfg: BenchConfig) -> dict:
    """The suite alone (``--only scc``, or without the sink and source): every repeat in turn."""
    job = SccJob(cfg)
    try:
        job.run_alone()
    except BaseException:
        job.close()
        raise
    return job.finish([])
