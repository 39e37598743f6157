"""``cassieq`` commands of the schema and the queues: bootstrap, create-queue, update-queue,
list-queues, delete-queue."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..client import QueueClient, check_app_role
from ..config import ConnectionConfig, read_password_file
from ..engine.core.queues import DEFAULT_SETTINGS, UPDATABLE_SETTINGS
from ..errors import ConfigError
from ..observability.operator_flags import progress_of
from .common import dump, integer_flag, number_flag

COMMANDS = frozenset({"bootstrap", "create-queue", "update-queue", "list-queues", "delete-queue"})

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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("bootstrap", help="create or migrate the schema (idempotent)")
    s.add_argument("--create-keyspace", action="store_true")
    s.add_argument(
        "--no-create",
        action="store_true",
        help="tables only, in an existing keyspace: no CREATE KEYSPACE or ROLE (managed services)",
    )
    s.add_argument(
        "--replication-factor",
        type=integer_flag,
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
    s.add_argument("--bucket-size", type=integer_flag, metavar="N", help=f"default {d.bucket_size}")
    s.add_argument(
        "--max-delivery-count",
        type=integer_flag,
        metavar="N",
        help=f"default {d.max_delivery_count}",
    )
    s.add_argument(
        "--visibility-timeout",
        type=number_flag,
        metavar="S",
        help=f"default {d.visibility_timeout:g}",
    )
    s.add_argument(
        "--repair-timeout", type=number_flag, metavar="S", help=f"default {d.repair_timeout:g}"
    )
    s.add_argument("--dead-letter-queue", metavar="Q", help="default none")
    s.add_argument("--message-ttl", type=integer_flag, metavar="S", help="default none (kept)")
    s.add_argument(
        "--max-payload-bytes",
        type=integer_flag,
        metavar="N",
        help=f"default {d.max_payload_bytes}",
    )
    s.add_argument("--exist-ok", action="store_true", help="succeed if the queue exists")

    s = sub.add_parser(
        "update-queue",
        help="change settings of a queue in use; they apply from each message's next delivery "
        "(a new TTL and payload limit: to messages put from then on)",
    )
    s.add_argument("name")
    s.add_argument("--visibility-timeout", type=number_flag, metavar="S")
    s.add_argument("--max-delivery-count", type=integer_flag, metavar="N")
    dlq = s.add_mutually_exclusive_group()
    dlq.add_argument("--dead-letter-queue", metavar="Q")
    dlq.add_argument(
        "--no-dead-letter-queue", action="store_true", help="remove the dead-letter queue"
    )
    ttl = s.add_mutually_exclusive_group()
    ttl.add_argument("--message-ttl", type=integer_flag, metavar="S")
    ttl.add_argument("--no-message-ttl", action="store_true", help="keep messages until acked")
    s.add_argument("--max-payload-bytes", type=integer_flag, metavar="N")
    # Settings fixed when a queue is created: taken only to say so (argparse's "unrecognized
    # arguments" would not).
    for fixed in ("--bucket-size", "--repair-timeout"):
        s.add_argument(fixed, default=None, help=argparse.SUPPRESS)

    sub.add_parser("list-queues", help="the queues and their settings (JSON)")

    s = sub.add_parser("delete-queue", help="delete a queue and its messages")
    s.add_argument("name")


def _flags(settings: Sequence[str]) -> str:
    """Setting names as the command's flags: ``visibility_timeout`` -> ``--visibility-timeout``."""
    return ", ".join("--" + name.replace("_", "-") for name in settings)


def check(args: argparse.Namespace) -> None:
    """update-queue's flags, before connecting."""
    if args.command != "update-queue":
        return
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


def check_bootstrap(args: argparse.Namespace, config: ConnectionConfig) -> None:
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


def run(args: argparse.Namespace, client: QueueClient) -> None:
    cmd = args.command
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
        dump({"keyspace": client.config.keyspace, "schema_version": version})
    elif cmd == "create-queue":
        given = {k: getattr(args, k) for k in CREATE_FLAGS if getattr(args, k) is not None}
        dump(client.create_queue(args.name, exist_ok=args.exist_ok, **given).as_dict())
    elif cmd == "update-queue":
        changes = {k: getattr(args, k) for k in UPDATE_FLAGS if getattr(args, k) is not None}
        if args.no_dead_letter_queue:
            changes["dead_letter_queue"] = None
        if args.no_message_ttl:
            changes["message_ttl"] = None
        dump(client.update_queue(args.name, **changes).as_dict())
    elif cmd == "list-queues":
        dump([q.as_dict() for q in client.list_queues()])
    elif cmd == "delete-queue":
        client.delete_queue(args.name)
