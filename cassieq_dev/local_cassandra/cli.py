"""``python -m cassieq_dev.local_cassandra up|down|status`` (used by the Makefile and CI)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from .cluster import recorded_nodes, stop_recorded
from .config import (
    DEFAULT_BASE_DIR,
    DEFAULT_PORT,
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STORAGE_PORT,
    STATE_DIR,
    CassandraError,
)
from .endpoint import ensure_cassandra
from .probe import query_release_version
from .process import live_pid


def _out(message: object, error: bool = False) -> None:
    print(message, file=sys.stderr if error else sys.stdout, flush=True)  # noqa: T201


def debug() -> bool:
    """True when the user asked for tracebacks and log tails (``DEBUG=1``)."""
    return os.environ.get("DEBUG", "").strip() not in ("", "0")


def failure_line(what: str, exc: BaseException) -> str:
    """One line for a failure: what failed, the error, and how to see more."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, CassandraError):
        text = f"{type(exc).__name__}: {text}"
    more = "" if debug() else " (DEBUG=1 shows the traceback and log tails)"
    return f"{what}: {text}{more}"


def report_failure(what: str, exc: BaseException) -> None:
    """Print ``failure_line`` on stderr; with DEBUG=1 also the traceback and any log tails."""
    if debug():
        traceback.print_exception(type(exc), exc, exc.__traceback__)
        detail = getattr(exc, "detail", "")
        if detail:
            _out(detail, error=True)
    _out(failure_line(what, exc), error=True)


def _base_dirs(args: argparse.Namespace) -> list[Path]:
    if getattr(args, "all", False):
        return sorted(p for p in STATE_DIR.iterdir() if p.is_dir() and p.name != "lib")
    return [Path(args.base_dir).resolve()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m cassieq_dev.local_cassandra")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N nodes (idempotent) and wait until they answer CQL")
    up.add_argument("--nodes", type=int, default=1)
    up.add_argument("--port", type=int, default=DEFAULT_PORT, help="native (CQL) port")
    up.add_argument("--storage-port", type=int, default=DEFAULT_STORAGE_PORT)
    up.add_argument(
        "--heap", default=None, help="per node, e.g. 1G (default 1G, 512M per node if N>1)"
    )
    up.add_argument("--timeout", type=float, default=DEFAULT_STARTUP_TIMEOUT, help="seconds")
    up.set_defaults(fast=False)
    mode = up.add_mutually_exclusive_group()
    mode.add_argument(
        "--durable",
        dest="fast",
        action="store_false",
        help="sync the commitlog before acknowledging (the default: survives a SIGKILL or OOM)",
    )
    mode.add_argument(
        "--fast",
        dest="fast",
        action="store_true",
        help="skip syncing the commitlog (faster starts and writes; a crash loses what the node "
        "acknowledged, schema included): for throwaway test nodes only",
    )
    up.add_argument(
        "--auth",
        action="store_true",
        help="password authentication (superuser cassandra/cassandra)",
    )
    up.add_argument(
        "--tls",
        choices=("on", "mutual"),
        default=None,
        help="require TLS on the CQL port (mutual: clients need the client certificate too)",
    )
    for name in ("up", "down", "status"):
        p = up if name == "up" else sub.add_parser(name)
        p.add_argument("--base-dir", default=str(DEFAULT_BASE_DIR))
    sub.choices["down"].add_argument(
        "--all", action="store_true", help="every node directory under .cassandra/"
    )
    sub.choices["down"].description = "stop the nodes recorded in pid files"
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("cassandra").setLevel(logging.CRITICAL)

    if args.command == "up":
        try:
            endpoint = ensure_cassandra(
                port=args.port,
                storage_port=args.storage_port,
                nodes=args.nodes,
                heap=args.heap,
                base_dir=args.base_dir,
                startup_timeout=args.timeout,
                say=_out,
                durable=not args.fast,
                auth=args.auth,
                tls=args.tls,
            )
        except Exception as exc:  # every failure is one line unless DEBUG=1
            report_failure("cassandra-up failed", exc)
            return 1
        for ready in endpoint.ready:
            _out(ready.describe())
        launcher = endpoint.launcher
        if launcher is not None and launcher.auth:
            _out("password authentication on: superuser cassandra/cassandra (local use only)")
        if launcher is not None and launcher.tls:
            _out(
                f"TLS ({launcher.tls}) required; ca.pem, client.pem, client.key in {launcher.tls_dir}"
            )
        return 0

    if args.command == "down":
        stopped = sum(stop_recorded(base) for base in _base_dirs(args))
        _out(f"stopped {stopped} Cassandra node(s)")
        return 0

    running = 0
    nodes = recorded_nodes(Path(args.base_dir).resolve())
    if not nodes:
        _out(f"no Cassandra node recorded under {args.base_dir}")
    for node in nodes:
        pid = live_pid(node)
        version = query_release_version(node.address, node.port) if pid else None
        running += pid is not None
        state = "stopped"
        if pid is not None:
            state = f"running (pid {pid}), " + (
                f"answering CQL, release {version}" if version else "not answering CQL"
            )
        moved = f" (for port {node.requested_port})" if node.requested_port else ""
        mode = " durable" if node.durable else ""
        _out(f"node {node.index} {node.address}:{node.port}{moved}{mode}: {state}")
    return 0 if running else 1
