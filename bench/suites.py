"""The suites of a run: each one timed, recorded ok / skipped (with the reason) / failed, the
Spark session shared between them, the connector look-up overlapping the rest."""

from __future__ import annotations

import inspect
import json
import logging
import os
import shutil
import subprocess
import time
import traceback
from pathlib import Path

from .common import BenchConfig, SuiteUnavailable, spark_session
from .machine import ROOT, machine_info

log = logging.getLogger("bench")

CONNECTOR = "com.datastax.spark:spark-cassandra-connector-assembly_2.13"
CONNECTOR_JARS = ROOT / ".cassandra" / "bench-jars"


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
            "--repeats", str(cfg.repeats),
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
    except Exception as exc:  # ImportError, or a half-written module failing at import
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
        load_start = os.getloadavg()[0]
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
        # 1-minute load average around the suite: suites measured apart (sink, source, scc) are
        # compared in the report, and on a shared machine the load between them drifts.
        entry["load_average"] = [round(load_start, 2), round(os.getloadavg()[0], 2)]
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
    if wanted("groups"):
        from . import groups

        runner.suite("groups", lambda: groups.suite(cfg))
    if wanted("redrive"):
        from . import redrive

        # 2,000 (full: 10,000) dead letters: batch path against one at a time, counted
        runner.suite("redrive", lambda: redrive.suite(cfg))
    if wanted("profile"):
        runner.suite("sink_profile", lambda: sink.profile_hot_path(cfg, cfg.profile_rows))
    # The Spark Cassandra Connector (its own PySpark 3.5 job, up for the run): with the sink or
    # the source in the run, its repeats alternate with theirs; alone, it runs after them.
    scc_job, scc_failure = None, None
    interleave = [n for n in ("sink", "source") if wanted(n)] if wanted("scc") else []
    if interleave:
        from . import scc_suite

        try:
            scc_job = scc_suite.SccJob(cfg)
        except Exception as exc:  # SuiteUnavailable -> skipped, anything else -> failed
            scc_failure = exc
    try:
        if wanted("sink"):
            runner.suite(
                "sink",
                lambda: sink.run(runner.spark(), cfg, scc=scc_job),
                needs_spark=True,
                memory=True,
            )
        if wanted("source"):
            runner.suite(
                "source", lambda: source.run(runner.spark(), cfg, scc=scc_job), needs_spark=True
            )
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
        if interleave:

            def scc_result() -> dict:
                if scc_failure is not None:
                    raise scc_failure
                assert scc_job is not None
                return scc_job.finish(interleave)

            runner.suite("scc", scc_result)
    if wanted("scc") and not interleave:
        from . import scc_suite

        # Alone: after the shared session stopped. Skipped with the reason when the side
        # environment cannot be built.
        runner.suite("scc", lambda: scc_suite.run(cfg))
    if wanted("async_client"):
        from . import async_client

        # AsyncQueueClient, 50 tasks on one loop, against QueueClient on 50 threads
        runner.suite("async_client", lambda: async_client.run(cfg))
    if wanted("service"):
        from . import service

        # cassieq serve processes of its own (1 and 2 instances) on loopback
        runner.suite("service", lambda: service.run(cfg))
    if wanted("scale") and (only is not None or not cfg.quick):
        from . import scale

        # Its own Spark standalone cluster and 3-node ring: after the shared session stopped.
        runner.suite("scale", lambda: scale.run(cfg), needs_spark=True)
    if connector_thread is not None:
        connector_thread.join(timeout=150)
    runner.results["machine"]["load_average_end"] = list(os.getloadavg())
    runner.results["total_seconds"] = round(time.perf_counter() - t0, 1)
    return runner.results
