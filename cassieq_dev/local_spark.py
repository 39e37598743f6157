"""Run a real Spark standalone cluster (one master, N workers) on 127.0.0.1 from the installed PySpark.

The pip PySpark ships ``bin/spark-class`` but not the ``sbin/start-*.sh`` scripts, so the master and
the workers are started here as ``spark-class org.apache.spark.deploy.master.Master`` and
``...worker.Worker``, each in its own session so they outlive the Python process that launched
them. Logs, work directories and pid files live under ``.spark/`` (git-ignored). Ready means the
master's JSON status page lists N alive workers.

Command line (used by the Makefile)::

    python -m cassieq_dev.local_spark up --workers 2 --worker-cores 1
    python -m cassieq_dev.local_spark status
    python -m cassieq_dev.local_spark down

From Python::

    with LocalSpark(workers=2) as spark_cluster:   # stops only what it started
        print(spark_cluster.master_url)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from cassieq_spark.errors import CassieQError

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASE_DIR = ROOT / ".spark"
DEFAULT_MASTER_PORT = 7077
DEFAULT_WEBUI_PORT = 8080
HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
STARTUP_TIMEOUT = 120.0
STOP_TIMEOUT = 20.0


class SparkClusterError(CassieQError):
    """The local Spark standalone cluster could not be started or reached."""


def spark_home() -> Path:
    """The installed PySpark's directory: it holds ``bin/spark-class`` and the jars."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass(frozen=True)
class Daemon:
    """One JVM of the cluster: the master (index 0) or worker ``index``."""

    name: str
    main_class: str
    args: tuple[str, ...]
    base_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.base_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.base_dir / f"{self.name}.log"

    def live_pid(self) -> int | None:
        """The pid in the pid file if that process is alive and is this daemon of this base dir."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            process = psutil.Process(pid)
            cmdline = " ".join(process.cmdline())
            state = process.status()
        except psutil.Error:
            return None
        marker = f"-Dcassieq.spark.daemon={self.base_dir}/{self.name} "
        if state in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) or marker not in cmdline + " ":
            return None
        return pid


def port_open(port: int) -> bool:
    """True if something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


class LocalSpark:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1, managed through pid files."""

    def __init__(
        self,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        master_port: int = DEFAULT_MASTER_PORT,
        webui_port: int = DEFAULT_WEBUI_PORT,
        base_dir: Path | str | None = None,
        worker_env: dict[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        if workers < 1 or worker_cores < 1:
            raise ValueError("workers and worker_cores must be >= 1")
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.master_port = master_port
        self.webui_port = webui_port
        self.base_dir = Path(base_dir).resolve() if base_dir else DEFAULT_BASE_DIR
        self.worker_env = dict(worker_env or {})
        self.startup_timeout = startup_timeout
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._started_here: list[Daemon] = []

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master_port}"

    @property
    def status_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}/json/"

    def master(self) -> Daemon:
        args = ("--host", HOST, "--port", str(self.master_port))
        return Daemon(
            "master", MASTER_CLASS, (*args, "--webui-port", str(self.webui_port)), self.base_dir
        )

    def worker(self, index: int) -> Daemon:
        name = f"worker-{index}"
        args = (
            self.master_url,
            # Worker n on 127.0.0.n, like Cassandra's nodes: Spark treats the workers as separate
            # hosts, so it places a speculative attempt on another worker than the original one.
            "--host",
            f"127.0.0.{index}",
            "--cores",
            str(self.worker_cores),
            "--memory",
            self.worker_memory,
            # 0 = any free port: worker UIs would otherwise race for 8081, 8082, ...
            "--webui-port",
            "0",
            "--work-dir",
            str(self.base_dir / name / "work"),
        )
        return Daemon(name, WORKER_CLASS, args, self.base_dir)

    def daemons(self) -> list[Daemon]:
        return [self.master(), *(self.worker(i) for i in range(1, self.workers + 1))]

    def recorded_daemons(self) -> list[Daemon]:
        """The master and every worker with a pid file under the base dir, however many."""
        recorded = sorted(
            int(p.stem.removeprefix("worker-"))
            for p in self.base_dir.glob("worker-*.pid")
            if p.stem.removeprefix("worker-").isdigit()
        )
        return [self.master(), *(self.worker(i) for i in recorded)]

    # --- state ---------------------------------------------------------------------------------
    def status(self) -> dict[str, Any] | None:
        """The master's JSON status page, or None while the master does not answer."""
        try:
            with urllib.request.urlopen(self.status_url, timeout=2) as reply:
                return json.loads(reply.read().decode())
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def alive_workers(self) -> int:
        status = self.status() or {}
        workers = status.get("workers") or []
        return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")

    def is_running(self) -> bool:
        return self.master().live_pid() is not None and self.alive_workers() >= self.workers

    # --- start / stop --------------------------------------------------------------------------
    def start(self) -> str:
        """Start the master and every worker that is not running; wait for N alive workers."""
        started = time.monotonic()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        master = self.master()
        if master.live_pid() is None:
            for port in (self.master_port, self.webui_port):
                if port_open(port):
                    raise SparkClusterError(
                        f"{HOST}:{port} is in use by a process this launcher did not start; "
                        "stop it or choose other ports (--master-port / --webui-port)"
                    )
            self._launch(master)
        self._wait(lambda: self.status() is not None, started, "the master's status page")
        for index in range(1, self.workers + 1):
            worker = self.worker(index)
            if worker.live_pid() is None:
                (self.base_dir / worker.name / "work").mkdir(parents=True, exist_ok=True)
                self._launch(worker, self.worker_env)
        self._wait(
            lambda: self.alive_workers() >= self.workers, started, f"{self.workers} alive workers"
        )
        log.info(
            "Spark master %s ready with %d worker(s) in %.1f s",
            self.master_url,
            self.workers,
            time.monotonic() - started,
        )
        return self.master_url

    def _launch(self, daemon: Daemon, extra_env: dict[str, str] | None = None) -> None:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": str(home), **(extra_env or {})}
        # spark-class reads this for the daemon JVM's options; the marker names the daemon so that
        # a pid file never points at a recycled pid of another process.
        env["SPARK_DAEMON_JAVA_OPTS"] = f"-Dcassieq.spark.daemon={daemon.base_dir}/{daemon.name}"
        env.setdefault("SPARK_DAEMON_MEMORY", "512m")
        cmd = [str(home / "bin" / "spark-class"), daemon.main_class, *daemon.args]
        log.info("starting Spark %s", daemon.name)
        with open(daemon.log_file, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.base_dir,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        self._procs[daemon.name] = proc
        # spark-class execs java, so the child's pid is the JVM's once the exec happened.
        daemon.pid_file.write_text(f"{proc.pid}\n")
        self._started_here.append(daemon)

    def _wait(self, ready: object, started: float, what: str) -> None:
        deadline = started + self.startup_timeout
        while not ready():  # type: ignore[operator]
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise SparkClusterError(
                        f"Spark {name} exited with code {proc.returncode} while waiting for {what}; "
                        f"see {self.base_dir / (name + '.log')}"
                    )
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"no {what} after {self.startup_timeout:.0f} s; see the logs in {self.base_dir}"
                )
            time.sleep(0.5)

    def stop(self, only_started_here: bool = False) -> int:
        """Stop the workers then the master; returns how many daemons were stopped."""
        daemons = self._started_here if only_started_here else self.recorded_daemons()
        stopped = 0
        for daemon in reversed(daemons):
            stopped += stop_daemon(daemon, self._procs.get(daemon.name))
        self._started_here.clear()
        return stopped

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` and every executor and Python worker it started."""
        daemon = self.worker(index)
        pid = daemon.live_pid()
        if pid is None:
            raise SparkClusterError(f"Spark {daemon.name} is not running")
        # The worker runs in its own session; its executors are in the same process group.
        with suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        proc = self._procs.get(daemon.name)
        if proc is not None:
            proc.wait(timeout=STOP_TIMEOUT)
        daemon.pid_file.unlink(missing_ok=True)

    def start_worker(self, index: int) -> None:
        worker = self.worker(index)
        if worker.live_pid() is None:
            self._launch(worker, self.worker_env)

    def __enter__(self) -> LocalSpark:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(only_started_here=True)


def stop_daemon(daemon: Daemon, proc: subprocess.Popen[bytes] | None) -> bool:
    """SIGTERM the daemon's process group (SIGKILL after STOP_TIMEOUT); False if it did not run."""
    pid = daemon.live_pid()
    if pid is None:
        daemon.pid_file.unlink(missing_ok=True)
        return False
    log.info("stopping Spark %s (pid %d)", daemon.name, pid)
    with suppress(ProcessLookupError):
        # The whole group: a worker's executors must not outlive it.
        os.killpg(os.getpgid(pid), signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        while daemon.live_pid() is not None and time.monotonic() < deadline:
            if proc is not None:
                proc.poll()
            time.sleep(0.2)
        if daemon.live_pid() is not None:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    if proc is not None:
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_TIMEOUT)
    daemon.pid_file.unlink(missing_ok=True)
    return True


# --- command line ----------------------------------------------------------------------------------
def _out(message: object, error: bool = False) -> None:
    print(message, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cassieq_dev.local_spark")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("up", "start a master and N workers (idempotent); print the master URL"),
        ("down", "stop the workers and the master recorded in pid files"),
        ("status", "say what runs"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--workers", type=int, default=2)
        p.add_argument("--worker-cores", type=int, default=1)
        p.add_argument("--worker-memory", default="1g")
        p.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT)
        p.add_argument("--webui-port", type=int, default=DEFAULT_WEBUI_PORT)
        p.add_argument("--base-dir", default=str(DEFAULT_BASE_DIR))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cluster = LocalSpark(
        workers=args.workers,
        worker_cores=args.worker_cores,
        worker_memory=args.worker_memory,
        master_port=args.master_port,
        webui_port=args.webui_port,
        base_dir=args.base_dir,
    )
    if args.command == "up":
        try:
            _out(cluster.start())
        except SparkClusterError as exc:
            _out(exc, error=True)
            return 1
        return 0
    if args.command == "down":
        _out(f"stopped {cluster.stop()} Spark daemon(s)")
        return 0
    alive = cluster.alive_workers()
    master = cluster.master().live_pid()
    _out(
        f"master {cluster.master_url}: "
        + (f"running (pid {master}), {alive} alive worker(s)" if master else "stopped")
    )
    return 0 if master else 1


if __name__ == "__main__":
    sys.exit(main())
