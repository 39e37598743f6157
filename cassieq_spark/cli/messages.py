"""``cassieq`` commands of messages: put, get, ack, ack-many, change-visibility, peek."""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Sequence

from ..client import PutEntry, QueueClient
from ..config.flags import EXIT_EMPTY, EXIT_STALE
from ..engine.core.messages import to_bytes
from ..engine.core.progress import start_task
from ..engine.core.queues import QueueInfo
from ..errors import ConfigError
from ..observability.operator_flags import progress_of
from ..validate import (
    MAX_BATCH,
    MAX_WAIT_SECONDS,
    dedup_id,
    delay_seconds,
    grouped_headers,
    integer_text,
    max_messages,
    wait_seconds,
)
from ..validate import group as validate_group
from ..validate import headers as validate_headers
from .common import CommandExit, dump, integer_flag, number_flag

COMMANDS = frozenset({"put", "get", "ack", "ack-many", "change-visibility", "peek"})


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "put",
        help="enqueue MESSAGE (use - to read it from stdin); prints the id. --ndjson: one "
        "message per line of stdin, one id per line out",
    )
    s.add_argument("queue")
    s.add_argument("message", nargs="?")
    s.add_argument("--delay", type=number_flag, default=None, metavar="S")
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
    s.add_argument("--visibility-timeout", type=number_flag, default=None, metavar="S")
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
    s.add_argument("seconds", type=number_flag)

    s = sub.add_parser("peek", help="messages a get could return now, without side effects")
    s.add_argument("queue")
    s.add_argument("--limit", type=integer_flag, default=10, metavar="N")


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


def check(args: argparse.Namespace) -> None:
    """put's and get's values, before connecting: a typo costs no connection."""
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
    elif args.command == "get":
        if args.max is not None:
            raw = args.max.strip()
            number = integer_text(raw)
            args.max = max_messages(raw if number is None else number, "--max")
        if args.wait is not None:
            args.wait = wait_seconds(args.wait, "--wait")


def run(args: argparse.Namespace, client: QueueClient) -> None:
    cmd = args.command
    if cmd == "put" and args.ndjson:
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
            dump({"receipt": r.receipt, "status": r.status, "reason": r.reason})
        if not all(r.ok for r in results):
            raise CommandExit(EXIT_STALE)
    elif cmd == "get" and (args.max is not None or args.wait is not None):
        batch = client.get_many(
            args.queue,
            1 if args.max is None else args.max,
            visibility_timeout=args.visibility_timeout,
            wait_seconds=args.wait or 0.0,
        )
        if not batch:
            raise CommandExit(EXIT_EMPTY)
        for m in batch:
            dump(m.as_dict())
    elif cmd == "get":
        msg = client.get(args.queue, visibility_timeout=args.visibility_timeout)
        if msg is None:
            raise CommandExit(EXIT_EMPTY)
        dump(msg.as_dict())
    elif cmd == "ack":
        if not client.ack(args.queue, args.receipt):
            raise CommandExit(
                EXIT_STALE, "receipt is stale: the message was acked or redelivered since"
            )
    elif cmd == "change-visibility":
        print(client.change_visibility(args.queue, args.receipt, args.seconds))
    elif cmd == "peek":
        dump([m.as_dict() for m in client.peek(args.queue, args.limit)])
