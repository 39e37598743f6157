"""``cassieq`` commands of operating queues: stats (and its live view), redrive, move, purge,
repair, and the Prometheus exporter."""

from __future__ import annotations

import argparse
import contextlib
import json

from ..client import QueueClient
from ..config.flags import EXIT_OK
from ..errors import ConfigError
from ..extras import require
from ..observability.exporter import DEFAULT_HOST, DEFAULT_PORT
from ..observability.operator_flags import add_move_flags, check_move_flags, progress_of
from ..observability.queue_metrics import DEFAULT_MAX_QUEUES, DEFAULT_REFRESH_SECONDS
from ..validate import watch_count, watch_interval
from .common import DEFAULT_WATCH_INTERVAL, dump, integer_flag, number_flag

COMMANDS = frozenset({"stats", "redrive", "move", "purge", "repair", "exporter"})


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "stats", help="counters and current state of a queue (JSON); --watch for a live view"
    )
    s.add_argument("queue")
    s.add_argument(
        "--watch",
        action="store_true",
        help="redraw a live view (backlog, in flight, rates, consumer, pointers); Ctrl-C stops",
    )
    # Strings, checked by validate.py, so a bad value gets the same one-line wording as elsewhere.
    s.add_argument(
        "--interval",
        default=None,
        metavar="S",
        help=f"seconds between refreshes of --watch (default {DEFAULT_WATCH_INTERVAL:g})",
    )
    s.add_argument("--count", default=None, metavar="N", help="stop --watch after N refreshes")

    for name, what in (
        ("redrive", "move dead letters back to --to, each exactly once (JSON counts)"),
        ("move", "move visible messages to --to, each exactly once (JSON counts)"),
    ):
        s = sub.add_parser(name, help=what)
        s.add_argument("queue")
        s.add_argument("--to", required=True, metavar="QUEUE")
        s.add_argument(
            "--max", type=integer_flag, default=None, metavar="N", help="at most N (default all)"
        )
        s.add_argument("--visibility-timeout", type=number_flag, default=300.0, metavar="S")
        add_move_flags(s)

    s = sub.add_parser("purge", help="drop every message written so far (JSON counts)")
    s.add_argument("queue")

    s = sub.add_parser(
        "exporter",
        help="serve every queue's metrics to Prometheus on /metrics (needs the [metrics] extra)",
    )
    s.add_argument("--listen-host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    s.add_argument(
        "--listen-port",
        type=integer_flag,
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT})",
    )
    s.add_argument(
        "--refresh-seconds",
        type=float,
        default=DEFAULT_REFRESH_SECONDS,
        help="at most one stats pass over the queues per this many seconds, whatever the "
        f"scrapes (default {DEFAULT_REFRESH_SECONDS:g})",
    )
    s.add_argument(
        "--max-queues",
        type=integer_flag,
        default=DEFAULT_MAX_QUEUES,
        help=f"queues a stats pass covers at most (default {DEFAULT_MAX_QUEUES})",
    )

    s = sub.add_parser("repair", help="one repair pass over a queue (JSON report)")
    s.add_argument("queue")
    s.add_argument("--dry-run", action="store_true")


def check(args: argparse.Namespace) -> None:
    """The exporter's and stats --watch's values, before connecting."""
    if args.command == "exporter":
        if not 0 <= args.listen_port <= 65535:
            raise ConfigError(f"--listen-port must be 0 to 65535, got {args.listen_port}")
        if not 0.5 <= args.refresh_seconds <= 3600:
            raise ConfigError(
                f"--refresh-seconds must be 0.5 to 3600 seconds, got {args.refresh_seconds:g}"
            )
        if not 1 <= args.max_queues <= 100_000:
            raise ConfigError(f"--max-queues must be 1 to 100000, got {args.max_queues}")
        return
    if args.command in ("redrive", "move"):
        check_move_flags(args)
        return
    if args.command != "stats":
        return
    if not args.watch:
        if args.interval is not None or args.count is not None:
            raise ConfigError("--interval and --count go with --watch: add --watch or drop them")
        return
    args.interval = watch_interval(
        DEFAULT_WATCH_INTERVAL if args.interval is None else args.interval
    )
    args.count = None if args.count is None else watch_count(args.count)


def _watch(args: argparse.Namespace, client: QueueClient) -> None:
    require("cassieq stats --watch")
    from .. import watch

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch is meant to end
        watch.watch(lambda: client.stats(args.queue), args.interval, args.count)


def _export(args: argparse.Namespace, client: QueueClient) -> int:
    """Serve the queues' metrics until interrupted (Ctrl-C, SIGTERM)."""
    require("Prometheus metrics")
    import signal
    import threading

    from ..observability.client_metrics import enable_client_metrics
    from ..observability.exporter import start_exporter

    enable_client_metrics()  # the exporter's own stats calls: what a scrape costs the cluster
    client.list_queues()  # the schema is there and readable: fail now, not on the first scrape
    try:
        exporter = start_exporter(
            args.listen_port,
            args.listen_host,
            client=client,
            refresh_seconds=args.refresh_seconds,
            max_queues=args.max_queues,
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {args.listen_host}:{args.listen_port} ({exc.strerror or exc}); "
            "choose another --listen-port or --listen-host"
        ) from None
    print(json.dumps({"metrics": f"http://{exporter.host}:{exporter.port}/metrics"}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    exporter.stop()
    return EXIT_OK


def run(args: argparse.Namespace, client: QueueClient) -> int:
    cmd = args.command
    if cmd == "exporter":
        return _export(args, client)
    if cmd == "stats":
        if args.watch:
            _watch(args, client)
        else:
            dump(client.stats(args.queue))
    elif cmd in ("redrive", "move"):
        mover = client.redrive if cmd == "redrive" else client.move
        report = mover(
            args.queue,
            args.to,
            args.max,
            args.visibility_timeout,
            batch_size=args.batch_size,
            rate=args.rate,
            progress=progress_of(args),
            one_at_a_time=args.one_at_a_time,
        )
        dump(report.as_dict())
    elif cmd == "purge":
        dump(client.purge(args.queue, progress=progress_of(args)).as_dict())
    elif cmd == "repair":
        dump(client.repair(args.queue, dry_run=args.dry_run, progress=progress_of(args)).as_dict())
    return EXIT_OK
