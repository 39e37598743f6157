"""Run a Spark Connect server on 127.0.0.1 from the installed PySpark (`make spark-connect-up`).

The pip PySpark ships the Connect server's jar and ``bin/spark-submit``; its
``sbin/start-connect-server.sh`` daemonizes through ``spark-daemon.sh``, which keeps its own pid
files under ``/tmp``. The server is started here instead as ``spark-submit --class
...SparkConnectServer`` in a session of its own (it outlives the Python process that launched it),
with its log and pid file under ``.spark/connect/`` (git-ignored), the same way
:mod:`cassieq_dev.local_spark` starts the standalone cluster. Ready means its gRPC port accepts
connections (the server opens it after its SparkSession is up).

Clients reach it as ``sc://127.0.0.1:15002``. The connector runs in the server's Python workers,
so the server runs them with ``PYSPARK_PYTHON`` = this checkout's venv Python (where cassieq-spark
is installed): ``format("cassieq")`` is then found there by itself, and
``cassieq_spark.spark.register(spark)`` from an ``sc://`` session works too.

Command line (used by the Makefile)::

    python -m cassieq_dev.local_connect up [--port 15002] [--master local[2]]
    python -m cassieq_dev.local_connect status
    python -m cassieq_dev.local_connect down

From Python::

    with LocalConnect(port=15102) as server:   # stops only what it started
        spark = SparkSession.builder.remote(server.url).getOrCreate()
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from cassieq_dev.local_spark import (
    DEFAULT_BASE_DIR,
    HOST,
    Daemon,
    SparkClusterError,
    port_open,
    spark_home,
    stop_daemon,
)

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
DEFAULT_PORT = 15002  # Spark Connect's own default
DEFAULT_MASTER = "local[2]"
STARTUP_TIMEOUT = 180.0


class LocalConnect:
    """A Spark Connect server on 127.0.0.1:``port`` running its jobs on ``master``, managed
    through a pid file under ``base_dir``."""

    def __init__(
        self,
        port: int = DEFAULT_PORT,
        master: str = DEFAULT_MASTER,
        base_dir: Path | str | None = None,
        python: str | None = None,
        conf: dict[str, str] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.port = port
        self.master = master
        self.base_dir = Path(base_dir).resolve() if base_dir else DEFAULT_BASE_DIR / "connect"
        self.python = python or os.environ.get("PYSPARK_PYTHON") or sys.executable
        self.conf = dict(conf or {})
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_here = False

    @property
    def url(self) -> str:
        """What ``SparkSession.builder.remote(...)`` takes."""
        return f"sc://{HOST}:{self.port}"

    def daemon(self) -> Daemon:
        return Daemon("connect", SERVER_CLASS, (), self.base_dir)

    def is_running(self) -> bool:
        return self.daemon().live_pid() is not None and port_open(self.port)

    def command(self) -> list[str]:
        daemon = self.daemon()
        conf = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            **self.conf,
        }
        cmd = [
            str(spark_home() / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "cassieq Spark Connect server",
            "--master",
            self.master,
            # The marker names the server in its JVM's command line, so that the pid file never
            # points at a recycled pid of another process (the driver runs in that JVM).
            "--driver-java-options",
            f"-Dcassieq.spark.daemon={daemon.base_dir}/{daemon.name}",
        ]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd

    def start(self) -> str:
        """Start the server unless it runs; wait until its port answers. Returns its URL."""
        started = time.monotonic()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        daemon = self.daemon()
        if daemon.live_pid() is None:
            if port_open(self.port):
                raise SparkClusterError(
                    f"{HOST}:{self.port} is in use by a process this launcher did not start; "
                    "stop it or choose another port (--port)"
                )
            home = spark_home()
            env = {
                **os.environ,
                "SPARK_HOME": str(home),
                "PYSPARK_PYTHON": self.python,
                "PYSPARK_DRIVER_PYTHON": self.python,
            }
            env.pop("SPARK_REMOTE", None)  # the server itself is a classic session
            env.pop("SPARK_CONNECT_MODE_ENABLED", None)
            log.info("starting the Spark Connect server on %s (master %s)", self.url, self.master)
            with open(daemon.log_file, "ab") as out:
                self._proc = subprocess.Popen(
                    self.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.base_dir,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                )
            # spark-submit execs spark-class, which execs java: the child's pid is the JVM's.
            daemon.pid_file.write_text(f"{self._proc.pid}\n")
            self._started_here = True
        deadline = started + self.startup_timeout
        while not port_open(self.port):
            if self._proc is not None and self._proc.poll() is not None:
                raise SparkClusterError(
                    f"the Spark Connect server exited with code {self._proc.returncode} before "
                    f"its port {self.port} answered; see {daemon.log_file}"
                )
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"the Spark Connect server's port {self.port} did not answer within "
                    f"{self.startup_timeout:.0f} s; see {daemon.log_file}"
                )
            time.sleep(0.5)
        log.info("Spark Connect server %s ready in %.1f s", self.url, time.monotonic() - started)
        return self.url

    def stop(self, only_started_here: bool = False) -> bool:
        """Stop the server (only one this object started, if asked); True if one was stopped."""
        if only_started_here and not self._started_here:
            return False
        self._started_here = False
        return stop_daemon(self.daemon(), self._proc)

    def __enter__(self) -> LocalConnect:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop(only_started_here=True)


def _out(message: object, error: bool = False) -> None:
    print(message, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cassieq_dev.local_connect")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("up", "start the Spark Connect server (idempotent); print its sc:// URL"),
        ("down", "stop the server recorded in the pid file"),
        ("status", "say whether it runs"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("--port", type=int, default=DEFAULT_PORT)
        p.add_argument(
            "--master",
            default=DEFAULT_MASTER,
            help="where the server runs its jobs: local[N], or the spark:// of `make spark-up`",
        )
        p.add_argument("--base-dir", default=str(DEFAULT_BASE_DIR / "connect"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = LocalConnect(port=args.port, master=args.master, base_dir=args.base_dir)
    if args.command == "up":
        try:
            _out(server.start())
        except SparkClusterError as exc:
            _out(exc, error=True)
            return 1
        return 0
    if args.command == "down":
        _out("stopped the Spark Connect server" if server.stop() else "no server was running")
        return 0
    pid = server.daemon().live_pid()
    _out(f"Spark Connect {server.url}: " + (f"running (pid {pid})" if pid else "stopped"))
    return 0 if pid else 1


if __name__ == "__main__":
    sys.exit(main())
