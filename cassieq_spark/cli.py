# PYTHON_ARGCOMPLETE_OK
"""The ``cassieq`` command: a thin shell over :class:`cassieq_spark.QueueClient`.

Machine-readable output (JSON) for everything a script reads; errors are one line on stderr.
Shell completion comes from argcomplete when it is installed (the ``[cli]`` extra):
``eval "$(register-python-argcomplete cassieq)"``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import sys
from collections.abc import Sequence

from . import __version__
from .client import PutEntry, QueueClient, check_app_role
from .config import (
    ConnectionConfig,
    add_connection_flags,
    connection_from_options,
    options_from_flags,
    read_password_file,
)
from .config.flags import (
    EXIT_EMPTY,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STALE,
    EXIT_USAGE,
    exit_status,
)
from .engine.core.buckets import MAX_BUCKET_SIZE
from .engine.core.messages import to_bytes
from .engine.core.progress import start_task
from .engine.core.queues import DEFAULT_SETTINGS, UPDATABLE_SETTINGS, QueueInfo
from .errors import ConfigError, one_line
from .extras import require
from .observability.exporter import DEFAULT_HOST, DEFAULT_PORT
from .observability.operator_flags import (
    add_move_flags,
    add_operator_flags,
    check_move_flags,
    progress_of,
    set_up_logging,
)
from .observability.queue_metrics import DEFAULT_MAX_QUEUES, DEFAULT_REFRESH_SECONDS
from .service.server import add_serve_flags, serve
from .validate import (
    MAX_BATCH,
    MAX_DELAY_SECONDS,
    MAX_DELIVERY_COUNT,
    MAX_HEADERS_BYTES,
    MAX_HEADERS_COUNT,
    MAX_MESSAGE_TTL_SECONDS,
    MAX_REPAIR_TIMEOUT_SECONDS,
    MAX_REPLICATION_FACTOR,
    MAX_VISIBILITY_SECONDS,
    MAX_WAIT_SECONDS,
    MAX_WATCH_INTERVAL_SECONDS,
    MIN_VISIBILITY_SECONDS,
    MIN_WATCH_INTERVAL_SECONDS,
    dedup_id,
    delay_seconds,
    grouped_headers,
    integer_text,
    max_messages,
    plain_number_text,
    wait_seconds,
    watch_count,
    watch_interval,
)
from .validate import group as validate_group
from .validate import headers as validate_headers

log = logging.getLogger(__name__)


DEFAULT_WATCH_INTERVAL = 2.0

EPILOG = f"""\
exit statuses:
  {EXIT_OK}  success
  {EXIT_ERROR}  error (connection, schema not bootstrapped, ...); one line on stderr
  {EXIT_USAGE}  bad command line or value (out of the limits below, not a receipt, ...)
  {EXIT_EMPTY}  get: the queue has no visible message (nothing is printed on stdout)
  {EXIT_NOT_FOUND}  the queue does not exist
  {EXIT_STALE}  ack/change-visibility: the receipt is stale (acked or redelivered since)
  Ctrl-C ends `stats --watch` with {EXIT_OK}; anything else it interrupts ends with {EXIT_INTERRUPTED}

limits (the same in the Python client, the Spark options and the repair job):
  queue names   1-200 of letters, digits, '_', '-', '.', starting with a letter or digit
  keyspace      1-48 of letters, digits, '_', starting with a letter
  --delay       0 to {MAX_DELAY_SECONDS:g} s (12 h)     --visibility-timeout  {MIN_VISIBILITY_SECONDS:g} to {MAX_VISIBILITY_SECONDS:g} s (12 h)
  --repair-timeout  > 0 to {MAX_REPAIR_TIMEOUT_SECONDS:g} s (24 h)   --message-ttl  1 to {MAX_MESSAGE_TTL_SECONDS} s (20 years)
  get --max  1 to {MAX_BATCH}     get --wait  0 to {MAX_WAIT_SECONDS:g} s
  --max-delivery-count  1 to {MAX_DELIVERY_COUNT}        --bucket-size  1 to {MAX_BUCKET_SIZE}
  payload       up to the queue's max_payload_bytes (default 1 MiB, at most 15 MiB)
  headers       at most {MAX_HEADERS_COUNT} entries and {MAX_HEADERS_BYTES} bytes (put --header, Python client, Spark sink)
  --dedup-id    1-128 printable ASCII characters, no spaces; the same id within 5 minutes enqueues once
  --url         cassieq://[user@]host[,host...][:port]/keyspace (no password: --password-file)
  --replication-factor  1 to {MAX_REPLICATION_FACTOR}, and no more than the cluster's nodes can serve
  stats --interval  {MIN_WATCH_INTERVAL_SECONDS:g} to {MAX_WATCH_INTERVAL_SECONDS:g} s (default {DEFAULT_WATCH_INTERVAL:g})   stats --count  >= 1
  --replication  JSON map: SimpleStrategy + replication_factor, or NetworkTopologyStrategy + replicas per data center (1 to {MAX_REPLICATION_FACTOR} each)

connection flags fall back to CASSIEQ_URL, CASSIEQ_CONTACT_POINTS, CASSIEQ_PORT, CASSIEQ_KEYSPACE,
CASSIEQ_LOCAL_DC, CASSIEQ_USERNAME, CASSIEQ_PASSWORD (or CASSIEQ_PASSWORD_FILE), CASSIEQ_SSL,
CASSIEQ_SSL_CA_FILE, CASSIEQ_SSL_CERT_FILE, CASSIEQ_SSL_KEY_FILE, CASSIEQ_SSL_VERIFY, CASSIEQ_CONSISTENCY.
"""


class _Exit(Exception):
    """A non-error outcome that still ends with a non-zero status (empty queue, stale receipt)."""

    def __init__(self, status: int, message: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message


def _number(text: str) -> float:
    """A number flag: what ``float`` reads, from ASCII digits only ('1_5' is not 15)."""
    try:
        if plain_number_text(text):
            return float(text)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(
        f"expected a number written with ASCII digits (no '_'), got {text!r}"
    )


def _integer(text: str) -> int:
    """A whole-number flag, from ASCII digits only ('1_000' and '²' are refused)."""
    number = integer_text(text)
    if number is None:
        raise argparse.ArgumentTypeError(
            f"expected a whole number written with ASCII digits, got {text!r}"
        )
    return number


def _dump(obj: object) -> None:
    print(json.dumps(obj, default=str, sort_keys=True))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cassieq",
        description="A durable message queue stored in Apache Cassandra.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"cassieq {__version__}")
    add_connection_flags(p)
    p.add_argument("--debug", action="store_true", help="log verbosely and show tracebacks")
    add_operator_flags(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    s = sub.add_parser("bootstrap", help="create or migrate the schema (idempotent)")
    s.add_argument("--create-keyspace", action="store_true")
    s.add_argument(
        "--no-create",
        action="store_true",
        help="tables only, in an existing keyspace: no CREATE KEYSPACE or ROLE (managed services)",
    )
    s.add_argument(
        "--replication-factor",
        type=_integer,
        default=None,
        metavar="N",
        help="of a new keyspace (default 1); an existing keyspace with another is an error",
    )
    s.add_argument(
        "--replication",
        default=None,
        metavar="JSON",
        help="a new keyspace's whole replication map instead, as CQL writes it, e.g. "
        '\'{"class": "NetworkTopologyStrategy", "datacenter1": 3}\'',
    )
    s.add_argument("--app-role", metavar="NAME", help="also create this role: SELECT, MODIFY only")
    s.add_argument("--app-password-file", metavar="FILE", help="the app role's password (line 1)")

    s = sub.add_parser(
        "create-queue",
        help="create a queue; a setting left out gets its default (--exist-ok: an existing "
        "queue must have every setting given)",
    )
    s.add_argument("name")
    d = DEFAULT_SETTINGS
    s.add_argument("--bucket-size", type=_integer, metavar="N", help=f"default {d.bucket_size}")
    s.add_argument(
        "--max-delivery-count", type=_integer, metavar="N", help=f"default {d.max_delivery_count}"
    )
    s.add_argument(
        "--visibility-timeout", type=_number, metavar="S", help=f"default {d.visibility_timeout:g}"
    )
    s.add_argument(
        "--repair-timeout", type=_number, metavar="S", help=f"default {d.repair_timeout:g}"
    )
    s.add_argument("--dead-letter-queue", metavar="Q", help="default none")
    s.add_argument("--message-ttl", type=_integer, metavar="S", help="default none (kept)")
    s.add_argument(
        "--max-payload-bytes", type=_integer, metavar="N", help=f"default {d.max_payload_bytes}"
    )
    s.add_argument("--exist-ok", action="store_true", help="succeed if the queue exists")

    s = sub.add_parser(
        "update-queue",
        help="change settings of a queue in use; they apply from each message's next delivery "
        "(a new TTL and payload limit: to messages put from then on)",
    )
    s.add_argument("name")
    s.add_argument("--visibility-timeout", type=_number, metavar="S")
    s.add_argument("--max-delivery-count", type=_integer, metavar="N")
    dlq = s.add_mutually_exclusive_group()
    dlq.add_argument("--dead-letter-queue", metavar="Q")
    dlq.add_argument(
        "--no-dead-letter-queue", action="store_true", help="remove the dead-letter queue"
    )
    ttl = s.add_mutually_exclusive_group()
    ttl.add_argument("--message-ttl", type=_integer, metavar="S")
    ttl.add_argument("--no-message-ttl", action="store_true", help="keep messages until acked")
    s.add_argument("--max-payload-bytes", type=_integer, metavar="N")
    # Settings fixed when a queue is created: taken only to say so (argparse's "unrecognized
    # arguments" would not).
    for fixed in ("--bucket-size", "--repair-timeout"):
        s.add_argument(fixed, default=None, help=argparse.SUPPRESS)

    sub.add_parser("list-queues", help="the queues and their settings (JSON)")

    s = sub.add_parser("delete-queue", help="delete a queue and its messages")
    s.add_argument("name")

    s = sub.add_parser(
        "put",
        help="enqueue MESSAGE (use - to read it from stdin); prints the id. --ndjson: one "
        "message per line of stdin, one id per line out",
    )
    s.add_argument("queue")
    s.add_argument("message", nargs="?")
    s.add_argument("--delay", type=_number, default=None, metavar="S")
    s.add_argument(
        "--header",
        action="append",
        default=None,
        metavar="K=V",
        help="a header of the message; repeat for more",
    )
    s.add_argument(
        "--dedup-id",
        metavar="ID",
        help="deduplication id: a put of the same id within 5 minutes enqueues nothing and "
        "prints the first put's id",
    )
    s.add_argument(
        "--ndjson",
        action="store_true",
        help='read messages from stdin, one JSON object a line: {"payload": "...", '
        '"encoding": "utf-8" or "base64", "headers": {...}, "delay": S, "dedup_id": "...", '
        '"group": "..."} '
        "(all but payload optional); every line is checked before any is put",
    )
    s.add_argument(
        "--group",
        default=None,
        metavar="KEY",
        help="message group: delivered after the group's earlier messages, one at a time "
        "(docs/groups.md)",
    )

    s = sub.add_parser(
        "get",
        help=f"receive one message (JSON); --max/--wait: a batch, one JSON line each; exit "
        f"{EXIT_EMPTY} when empty",
    )
    s.add_argument("queue")
    s.add_argument("--visibility-timeout", type=_number, default=None, metavar="S")
    # Strings, checked by validate.py, so a bad value gets the same one-line wording as elsewhere.
    s.add_argument(
        "--max",
        default=None,
        metavar="N",
        help=f"receive up to N messages (1 to {MAX_BATCH}), one JSON object per line",
    )
    s.add_argument(
        "--wait",
        default=None,
        metavar="S",
        help=f"wait up to S seconds (0 to {MAX_WAIT_SECONDS:g}) for a first message (long polling)",
    )

    s = sub.add_parser("ack", help="acknowledge a received message")
    s.add_argument("queue")
    s.add_argument("receipt")

    s = sub.add_parser(
        "ack-many",
        help=f"acknowledge up to {MAX_BATCH} receipts (arguments, or one a line on stdin); one "
        f"JSON result a line; exit {EXIT_STALE} when any was stale or invalid",
    )
    s.add_argument("queue")
    s.add_argument("receipts", nargs="*", metavar="RECEIPT")

    s = sub.add_parser("change-visibility", help="hide a message longer (0 releases it)")
    s.add_argument("queue")
    s.add_argument("receipt")
    s.add_argument("seconds", type=_number)

    s = sub.add_parser("peek", help="messages a get could return now, without side effects")
    s.add_argument("queue")
    s.add_argument("--limit", type=_integer, default=10, metavar="N")

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
            "--max", type=_integer, default=None, metavar="N", help="at most N (default all)"
        )
        s.add_argument("--visibility-timeout", type=_number, default=300.0, metavar="S")
        add_move_flags(s)

    s = sub.add_parser("purge", help="drop every message written so far (JSON counts)")
    s.add_argument("queue")

    add_serve_flags(sub)

    s = sub.add_parser(
        "exporter",
        help="serve every queue's metrics to Prometheus on /metrics (needs the [metrics] extra)",
    )
    s.add_argument("--listen-host", default=DEFAULT_HOST, help=f"address (default {DEFAULT_HOST})")
    s.add_argument(
        "--listen-port", type=_integer, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
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
        type=_integer,
        default=DEFAULT_MAX_QUEUES,
        help=f"queues a stats pass covers at most (default {DEFAULT_MAX_QUEUES})",
    )

    s = sub.add_parser("repair", help="one repair pass over a queue (JSON report)")
    s.add_argument("queue")
    s.add_argument("--dry-run", action="store_true")
    return p


def _options(args: argparse.Namespace) -> dict[str, str]:
    return options_from_flags(args)


CREATE_FLAGS = (
    "bucket_size",
    "max_delivery_count",
    "visibility_timeout",
    "repair_timeout",
    "dead_letter_queue",
    "message_ttl",
    "max_payload_bytes",
)
UPDATE_FLAGS = (
    "visibility_timeout",
    "max_delivery_count",
    "dead_letter_queue",
    "message_ttl",
    "max_payload_bytes",
)


def _flags(settings: Sequence[str]) -> str:
    """Setting names as the command's flags: ``visibility_timeout`` -> ``--visibility-timeout``."""
    return ", ".join("--" + name.replace("_", "-") for name in settings)


def header_flags(values: Sequence[str] | None) -> dict[str, str] | None:
    """``--header k=v`` flags as headers; a repeated key is an error, not a silent overwrite."""
    if not values:
        return None
    out: dict[str, str] = {}
    for text in values:
        key, eq, value = text.partition("=")
        if not eq or not key:
            raise ConfigError(f"--header {text!r} is not KEY=VALUE (e.g. --header trace=abc)")
        if key in out:
            raise ConfigError(f"--header {key!r} is given twice; give each header once")
        out[key] = value
    return out


def _no_repeated_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are all distinct: a repeated key is an error, not "the last
    one wins"."""
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} is given twice in one object; give each key once")
        out[key] = value
    return out


def read_ndjson(stream, queue: QueueInfo | None = None) -> list[PutEntry]:
    """Messages of ``put --ndjson``: one JSON object a line (blank lines skipped), every line
    checked before anything is put (with ``queue``: against its payload limit too, as
    ``put_batch`` would); a bad line is an error naming its number."""
    entries: list[PutEntry] = []
    allowed = {"payload", "encoding", "headers", "delay", "dedup_id", "group"}
    for number, raw in enumerate(stream, 1):
        if not raw.strip():
            continue

        def bad(why: str, number: int = number) -> str:
            return (
                f"stdin line {number}: {why}; each line is one JSON object like "
                '{"payload": "text", "headers": {"k": "v"}, "delay": 5, "dedup_id": "id-1"} '
                "(nothing was put)"
            )

        if isinstance(raw, bytes):
            try:
                # Text is UTF-8 (a byte-order mark on a line is skipped); json.loads would guess
                # UTF-16 or UTF-32 from the bytes.
                raw = raw.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise ConfigError(bad(f"not UTF-8 text ({exc})")) from None
        try:
            obj = json.loads(raw, object_pairs_hook=_no_repeated_keys)
        except RecursionError:
            raise ConfigError(bad("not JSON (arrays or objects nested too deeply)")) from None
        except ValueError as exc:
            raise ConfigError(bad(f"not JSON ({exc})")) from None
        if not isinstance(obj, dict):
            raise ConfigError(bad(f"a JSON {type(obj).__name__}, not an object"))
        unknown = sorted(set(obj) - allowed)
        if unknown:
            raise ConfigError(
                bad(f"unknown field {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
            )
        payload = obj.get("payload")
        encoding = obj.get("encoding", "utf-8")
        if not isinstance(payload, str):
            raise ConfigError(bad(f"'payload' must be a string, got {payload!r}"[:200]))
        if encoding == "base64":
            try:
                data: bytes | str = base64.b64decode(payload, validate=True)
            except ValueError:
                raise ConfigError(bad("'payload' is not base64 (encoding 'base64')")) from None
        elif encoding == "utf-8":
            data = payload
        else:
            raise ConfigError(bad(f"'encoding' must be 'utf-8' or 'base64', got {encoding!r}"))
        try:
            delay = delay_seconds(obj.get("delay", 0.0))
            headers = validate_headers(obj.get("headers"))
            grp = obj.get("group")
            # The checks put_batch makes, here for every line before the first put: the group,
            # a group given twice, a group with a delay, the queue's payload limit.
            grouped_headers(headers, grp, delay)
            did = obj.get("dedup_id")
            if did is not None:
                did = dedup_id(did)
            if grp is not None:
                grp = validate_group(grp, "'group'")
            if queue is not None:
                data = to_bytes(data, queue)
        except ConfigError as exc:
            raise type(exc)(bad(str(exc))) from None
        entries.append(PutEntry(data, headers, delay, did, grp))
    return entries


def check_args(args: argparse.Namespace) -> None:
    """Values argparse takes as text, checked before connecting: a typo costs no connection."""
    if args.command == "put":
        if args.ndjson:
            extra = [
                flag
                for flag, value in (
                    ("MESSAGE", args.message),
                    ("--delay", args.delay),
                    ("--header", args.header),
                    ("--dedup-id", args.dedup_id),
                    ("--group", args.group),
                )
                if value is not None
            ]
            if extra:
                raise ConfigError(
                    f"put --ndjson takes each message's fields from its stdin line: drop "
                    f"{', '.join(extra)} (or drop --ndjson)"
                )
        elif args.message is None:
            raise ConfigError(
                "put needs MESSAGE (or - to read it from stdin), or --ndjson for one message a "
                "line of stdin"
            )
        args.headers = header_flags(args.header)
        if args.dedup_id is not None:
            dedup_id(args.dedup_id, "--dedup-id")
        return
    if args.command == "update-queue":
        for flag in ("--bucket-size", "--repair-timeout"):
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise ConfigError(
                    f"update-queue cannot change {flag}: it is fixed when the queue is created; "
                    f"update-queue changes {_flags(UPDATABLE_SETTINGS)} (for another {flag}, "
                    "create a new queue and `cassieq move` the messages to it)"
                )
        if not any(getattr(args, k) is not None for k in UPDATE_FLAGS) and not (
            args.no_dead_letter_queue or args.no_message_ttl
        ):
            raise ConfigError(
                "update-queue was given no setting to change: give one or more of "
                "--visibility-timeout, --max-delivery-count, --dead-letter-queue, "
                "--no-dead-letter-queue, --message-ttl, --no-message-ttl, --max-payload-bytes"
            )
        return
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
    if args.command == "get":
        if args.max is not None:
            raw = args.max.strip()
            number = integer_text(raw)
            args.max = max_messages(raw if number is None else number, "--max")
        if args.wait is not None:
            args.wait = wait_seconds(args.wait, "--wait")
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


def _check_bootstrap(args: argparse.Namespace, config: ConnectionConfig) -> None:
    """The app role's name, password file and what it needs of the connection, checked before
    connecting: nothing is created when the role cannot be."""
    if args.no_create:
        given = [
            flag
            for flag, value in (
                ("--create-keyspace", args.create_keyspace),
                ("--replication-factor", args.replication_factor is not None),
                ("--replication", args.replication is not None),
                ("--app-role", args.app_role is not None),
            )
            if value
        ]
        if given:
            raise ConfigError(
                f"--no-create creates tables only, in an existing keyspace: drop {given[0]}, or "
                "drop --no-create"
            )
    if (args.app_role is None) != (args.app_password_file is None):
        raise ConfigError("--app-role and --app-password-file go together: give both")
    args.app_password = (
        read_password_file(args.app_password_file, "--app-password-file")
        if args.app_password_file
        else None
    )
    check_app_role(config, args.app_role, args.app_password)


def _watch(args: argparse.Namespace, client: QueueClient) -> None:
    require("cassieq stats --watch")
    from . import watch

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how a watch is meant to end
        watch.watch(lambda: client.stats(args.queue), args.interval, args.count)


def _export(args: argparse.Namespace, client: QueueClient) -> int:
    """Serve the queues' metrics until interrupted (Ctrl-C, SIGTERM)."""
    require("Prometheus metrics")
    import signal
    import threading

    from .observability.client_metrics import enable_client_metrics
    from .observability.exporter import start_exporter

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


def _run(args: argparse.Namespace, client: QueueClient) -> int:
    cmd = args.command
    if cmd == "exporter":
        return _export(args, client)
    if cmd == "bootstrap":
        version = client.bootstrap(
            args.create_keyspace,
            args.replication_factor,
            args.app_role,
            args.app_password,
            replication=args.replication,
            tables_only=args.no_create,
            progress=progress_of(args),
        )
        _dump({"keyspace": client.config.keyspace, "schema_version": version})
    elif cmd == "create-queue":
        given = {k: getattr(args, k) for k in CREATE_FLAGS if getattr(args, k) is not None}
        _dump(client.create_queue(args.name, exist_ok=args.exist_ok, **given).as_dict())
    elif cmd == "update-queue":
        changes = {k: getattr(args, k) for k in UPDATE_FLAGS if getattr(args, k) is not None}
        if args.no_dead_letter_queue:
            changes["dead_letter_queue"] = None
        if args.no_message_ttl:
            changes["message_ttl"] = None
        _dump(client.update_queue(args.name, **changes).as_dict())
    elif cmd == "list-queues":
        _dump([q.as_dict() for q in client.list_queues()])
    elif cmd == "delete-queue":
        client.delete_queue(args.name)
    elif cmd == "put" and args.ndjson:
        entries = read_ndjson(sys.stdin.buffer, client.get_queue(args.queue))
        task = start_task(progress_of(args), "put", args.queue, len(entries))
        for start in range(0, len(entries), MAX_BATCH):
            ids = client.put_batch(args.queue, entries[start : start + MAX_BATCH])
            for mid in ids:
                print(mid)
            task.advance(len(ids))
        task.finish()
    elif cmd == "put":
        payload = sys.stdin.buffer.read() if args.message == "-" else args.message
        print(
            client.put(
                args.queue,
                payload,
                delay=args.delay or 0.0,
                headers=args.headers,
                dedup_id=args.dedup_id,
                group=args.group,
            )
        )
    elif cmd == "ack-many":
        receipts = args.receipts or [
            line.strip() for line in sys.stdin.read().splitlines() if line.strip()
        ]
        results = client.ack_many(args.queue, receipts)
        for r in results:
            _dump({"receipt": r.receipt, "status": r.status, "reason": r.reason})
        if not all(r.ok for r in results):
            raise _Exit(EXIT_STALE)
    elif cmd == "get" and (args.max is not None or args.wait is not None):
        batch = client.get_many(
            args.queue,
            1 if args.max is None else args.max,
            visibility_timeout=args.visibility_timeout,
            wait_seconds=args.wait or 0.0,
        )
        if not batch:
            raise _Exit(EXIT_EMPTY)
        for m in batch:
            _dump(m.as_dict())
    elif cmd == "get":
        msg = client.get(args.queue, visibility_timeout=args.visibility_timeout)
        if msg is None:
            raise _Exit(EXIT_EMPTY)
        _dump(msg.as_dict())
    elif cmd == "ack":
        if not client.ack(args.queue, args.receipt):
            raise _Exit(EXIT_STALE, "receipt is stale: the message was acked or redelivered since")
    elif cmd == "change-visibility":
        print(client.change_visibility(args.queue, args.receipt, args.seconds))
    elif cmd == "peek":
        _dump([m.as_dict() for m in client.peek(args.queue, args.limit)])
    elif cmd == "stats":
        if args.watch:
            _watch(args, client)
        else:
            _dump(client.stats(args.queue))
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
        _dump(report.as_dict())
    elif cmd == "purge":
        _dump(client.purge(args.queue, progress=progress_of(args)).as_dict())
    elif cmd == "repair":
        _dump(client.repair(args.queue, dry_run=args.dry_run, progress=progress_of(args)).as_dict())
    return EXIT_OK


def _complete(parser: argparse.ArgumentParser) -> None:
    """Shell completion when argcomplete is installed (the ``[cli]`` extra); without it the
    command runs as ever. Free unless the shell's completion hook is asking."""
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    _complete(parser)
    args = parser.parse_args(argv)
    try:
        set_up_logging(args)
        if args.command == "serve":
            require("cassieq serve")
            logging.getLogger("cassieq_spark").setLevel(logging.INFO)
            return serve(args)
        check_args(args)
        config = connection_from_options(_options(args))
        if args.command == "bootstrap":
            _check_bootstrap(args, config)
        with QueueClient(config) as client:
            status = _run(args, client)
        sys.stdout.flush()
        return status
    except _Exit as e:
        if e.message:
            print(f"cassieq: {e.message}", file=sys.stderr)
        return e.status
    except BrokenPipeError:
        return EXIT_ERROR
    except KeyboardInterrupt:  # while connecting or closing; a watch itself ends in _watch
        return EXIT_OK if getattr(args, "watch", False) else EXIT_INTERRUPTED
    except Exception as exc:
        if args.debug:
            raise
        print(f"cassieq: error: {one_line(exc)}", file=sys.stderr)
        return exit_status(exc)


if __name__ == "__main__":
    sys.exit(main())
