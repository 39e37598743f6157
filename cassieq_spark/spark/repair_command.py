"""The repair job: republish what readers skipped, count lost reservations, reclaim storage.

    cassieq-repair --queue NAME [--queue NAME2 ...] | --all-queues
        [--contact-points H,H] [--port P] [--keyspace K] [--local-dc DC]
        [--username U --password P] [--repair-timeout S] [--max-buckets N]
        [--dry-run] [--loop --interval S] [--master URL | --remote sc://HOST:PORT]

``python -m cassieq_spark.spark.repair_command ...`` and ``spark-submit jobs/repair.py ...`` (the
launcher in the repository) run the same; outside ``spark-submit`` the job runs on a local Spark
(``local[2]`` unless ``--master`` or ``spark.master`` say otherwise), or, with ``--remote
sc://HOST:PORT`` (also ``--master sc://...``), as a Spark Connect client of that server: the
pass uses DataFrames only (``cassieq_spark.spark.repair_job``), so it needs no ``SparkContext``.
Connection flags fall back to ``CASSIEQ_*`` variables.

Output: one JSON object per queue and pass on its own line of stdout, in the order the queues
were named (``--all-queues``: name order), so the last line is the last queue's report. Logs
and progress go to stderr, and are written before a pass's reports: ``spark-submit`` merges the
Python driver's stderr into its stdout, so there the JSON lines are still the last ones; pick
them out as the lines starting with ``{``.

Exit statuses: 0 success; 1 error (cluster unreachable, schema missing, a pass failed);
2 bad command line or option value; 4 a named queue does not exist.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import time
from collections.abc import Mapping

from ..config import (
    add_connection_flags,
    connection_from_options,
    options_from_flags,
    validate_queue_name,
)
from ..config.flags import EXIT_ERROR, EXIT_OK, exit_status
from ..errors import (
    ConfigError,
    ConnectionFailedError,
    one_line,
)
from ..validate import (
    integer_text,
    plain_number_text,
    repair_timeout_seconds,
)

log = logging.getLogger("cassieq.repair")


def _repair_timeout(text: str) -> float:
    try:
        return repair_timeout_seconds(text, "a repair timeout")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# What SparkSession.builder.master() takes; anything else makes the JVM die with a stack trace
# before any error of ours could be printed. Threads and failures of local[...] start at 1 (the
# JVM refuses "to run locally with 0 threads" in a stack trace).
_MASTER_RE = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[[1-9]\d*,[1-9]\d*,[1-9]\d*\]|yarn"
    r"|(spark|mesos|k8s|sc)://\S+",
    re.ASCII,
)
# A pass every day at least: a longer pause is a job that looks alive and repairs nothing.
MAX_INTERVAL_SECONDS = 86400.0
DEFAULT_INTERVAL_SECONDS = 30.0
# How long the probe of a spark:// master waits for a TCP connection before the job gives up
# (Spark itself retries for over a minute, then fails without naming the master).
MASTER_PROBE_SECONDS = 5.0
# Spark Connect's port when an sc:// URL names none.
CONNECT_DEFAULT_PORT = 15002


def _remote(text: str) -> str:
    if not text.strip().startswith("sc://"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Spark Connect URL; use sc://HOST:PORT (for example "
            "sc://127.0.0.1:15002), or --master for a classic Spark master"
        )
    return _master(text)


def connect_address(url: str) -> tuple[str, int]:
    """HOST and PORT of a Spark Connect URL ``sc://HOST[:PORT][/;param=value...]``."""
    rest = url.strip()[len("sc://") :].split("/", 1)[0].split(";", 1)[0]
    if rest.startswith("["):  # an IPv6 address
        host, _, tail = rest[1:].partition("]")
        port = tail.removeprefix(":")
    else:
        host, _, port = rest.partition(":")
    number = integer_text(port) if port else CONNECT_DEFAULT_PORT
    if not host or number is None or not 1 <= number <= 65535:
        raise ConfigError(f"{url!r}: {rest!r} is not HOST:PORT")
    return host, number


def _master(text: str) -> str:
    if not _MASTER_RE.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Spark master URL; use local[N] (N >= 1), local[*], "
            "spark://HOST:PORT, yarn, k8s://HOST:PORT or sc://HOST:PORT (Spark Connect)"
        )
    return text.strip()


def _seconds(text: str) -> float:
    value = math.nan
    if plain_number_text(text):
        with contextlib.suppress(ValueError):
            value = float(text)
    if not 0 <= value <= MAX_INTERVAL_SECONDS:  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds from 0 to {MAX_INTERVAL_SECONDS:g} (a day) written "
            f"with ASCII digits, got {text!r}"
        )
    return value


def _positive_int(text: str) -> int:
    value = integer_text(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def check_master(master: str | None, environ: Mapping[str, str] | None = None) -> None:
    """Refuse, in one line and within seconds, a master Spark would spend a minute on before a
    long trace that does not name it: a spark:// master nobody answers at (every host of an
    HA list tried), yarn without the Hadoop configuration that says where YARN is."""
    if master is None:
        return
    env = os.environ if environ is None else environ
    if master == "yarn" and not (env.get("HADOOP_CONF_DIR") or env.get("YARN_CONF_DIR")):
        raise ConfigError(
            "--master yarn needs HADOOP_CONF_DIR or YARN_CONF_DIR (the directory of the "
            "cluster's yarn-site.xml); neither is set: set one, or give another --master"
        )
    if master.startswith("sc://"):
        server, server_port = connect_address(master)
        try:
            socket.create_connection((server, server_port), MASTER_PROBE_SECONDS).close()
        except OSError as exc:
            raise ConnectionFailedError(
                f"cannot reach the Spark Connect server {master} ({server}:{server_port}: "
                f"{exc.strerror or exc}); start it (make spark-connect-up), or check --remote"
            ) from None
        return
    if not master.startswith("spark://"):
        return
    errors = []
    for address in master[len("spark://") :].split(","):
        host, _, port = address.rpartition(":")
        number = integer_text(port)
        if not host or number is None or not 1 <= number <= 65535:
            raise ConfigError(f"--master {master!r}: {address!r} is not HOST:PORT")
        try:
            socket.create_connection((host.strip("[]"), number), MASTER_PROBE_SECONDS).close()
            return
        except OSError as exc:
            errors.append(f"{address}: {exc.strerror or exc}")
    raise ConnectionFailedError(
        f"cannot reach Spark master {master} ({'; '.join(errors)}); start it, or check "
        "--master (local[2] runs the job in this process)"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cassieq-repair",
        description="Repair cassieq queues: republish skipped messages, count lost "
        "reservations, drop finished buckets. Prints one JSON report per queue and pass.",
        epilog="exit statuses: 0 ok, 1 error, 2 bad arguments, 4 unknown queue. Connection "
        "flags fall back to CASSIEQ_CONTACT_POINTS, CASSIEQ_PORT, CASSIEQ_KEYSPACE, "
        "CASSIEQ_LOCAL_DC, CASSIEQ_USERNAME, CASSIEQ_PASSWORD.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--queue", action="append", metavar="NAME", help="a queue to repair (repeatable)"
    )
    which.add_argument("--all-queues", action="store_true", help="repair every queue")
    add_connection_flags(p)
    p.add_argument(
        "--repair-timeout",
        type=_repair_timeout,
        metavar="S",
        help="override the queues' repair timeout: how long a skipped range waits before "
        "repair (> 0 to 86400 s)",
    )
    p.add_argument(
        "--max-buckets",
        type=_positive_int,
        metavar="N",
        help="check at most N buckets per queue and pass (default: all behind the reader)",
    )
    p.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    p.add_argument("--loop", action="store_true", help="repeat passes until interrupted")
    p.add_argument(
        "--interval",
        type=_seconds,
        default=None,
        metavar="S",
        help=f"pause between passes of --loop (default {DEFAULT_INTERVAL_SECONDS:g}, at most "
        f"{MAX_INTERVAL_SECONDS:g})",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--master",
        type=_master,
        help="Spark master when not given by spark-submit (local[2]); sc://HOST:PORT is a "
        "Spark Connect server, as --remote",
    )
    where.add_argument(
        "--remote",
        type=_remote,
        dest="master",
        metavar="sc://HOST:PORT",
        help="run as a Spark Connect client of this server (no SparkContext needed)",
    )
    p.add_argument("--verbose", action="store_true", help="debug logging and tracebacks")
    return p


def _options(args: argparse.Namespace) -> dict[str, str]:
    return options_from_flags(args)


def _spark(master: str | None):
    from pyspark.sql import SparkSession

    if master is not None and master.startswith("sc://"):
        return SparkSession.builder.remote(master).getOrCreate()
    from pyspark import SparkConf

    builder = SparkSession.builder.appName("cassieq-repair")
    if master is not None:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):  # spark-submit sets it; python does not
        builder = builder.master("local[2]")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _Stop:
    """SIGTERM/SIGINT end a --loop after the current pass (a second one ends it at once)."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum, frame) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.info("stopping after this pass")


def run(args: argparse.Namespace) -> int:
    from ..engine.store.session import shared_connection
    from .repair_job import RepairSettings, resolve_queues, run_pass

    config = connection_from_options(_options(args))
    check_master(args.master)
    names = None if args.all_queues else [validate_queue_name(n) for n in dict.fromkeys(args.queue)]
    # Fail fast, before Spark starts: unreachable cluster, missing schema, unknown queue.
    resolve_queues(shared_connection(config), names)
    settings = RepairSettings(args.repair_timeout, args.dry_run, args.max_buckets)
    spark = _spark(args.master)
    stop = _Stop()
    if args.loop:
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    try:
        n = 0
        while True:
            n += 1
            started = time.monotonic()
            reports = run_pass(spark, config, names, settings)
            log.info(
                "pass %d over %d queues done in %.1f s", n, len(reports), time.monotonic() - started
            )
            # Logged before, not after: spark-submit merges the driver's stderr into stdout.
            sys.stderr.flush()
            for report in reports:
                print(json.dumps({**report.as_dict(), "pass": n}, sort_keys=True), flush=True)
            if not args.loop or stop.requested:
                return EXIT_OK
            deadline = time.monotonic() + args.interval
            while time.monotonic() < deadline and not stop.requested:
                time.sleep(min(0.5, deadline - time.monotonic()))
            if stop.requested:
                return EXIT_OK
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.interval is not None and not args.loop:
        parser.error(
            "--interval goes with --loop (the pause between passes): add --loop or drop it"
        )
    if args.interval is None:
        args.interval = DEFAULT_INTERVAL_SECONDS
    if args.interval <= 0 and args.loop:
        parser.error("--interval must be > 0 seconds with --loop")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,  # spark-submit's Python may have set up a handler on stdout already
    )
    if not args.verbose:
        # The driver logs connection trouble as warnings; our one-line error says it better.
        logging.getLogger("cassandra").setLevel(logging.CRITICAL + 1)
        logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("repair: interrupted", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:
        if args.verbose:
            raise
        print(f"repair: error: {one_line(exc)[:2000]}", file=sys.stderr)
        return exit_status(exc)


if __name__ == "__main__":
    sys.exit(main())
