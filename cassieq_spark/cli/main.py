"""``cassieq``'s entry point: parse, check what can be checked without a connection, then run
the command on a QueueClient (or, for ``serve`` and ``account``, without one)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ..client import QueueClient
from ..config import connection_from_options, options_from_flags
from ..config.flags import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, exit_status
from ..errors import one_line
from ..extras import require
from ..observability.operator_flags import set_up_logging
from ..service.server import serve
from .accounts import run_account
from .common import CommandExit
from .parser import CLIENT_GROUPS, build_parser, complete
from .queues import check_bootstrap


def check_args(args: argparse.Namespace) -> None:
    """Values argparse takes as text, checked before connecting: a typo costs no connection."""
    for group in CLIENT_GROUPS:
        if args.command in group.COMMANDS:
            group.check(args)


def _run(args: argparse.Namespace, client: QueueClient) -> int:
    for group in CLIENT_GROUPS:
        if args.command in group.COMMANDS:
            return group.run(args, client) or EXIT_OK
    raise AssertionError(f"no command group runs {args.command!r}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    complete(parser)
    args = parser.parse_args(argv)
    try:
        set_up_logging(args)
        if args.command == "account":  # the service's admin API, not Cassandra
            return run_account(args)
        if args.command == "serve":
            require("cassieq serve")
            logging.getLogger("cassieq_spark").setLevel(logging.INFO)
            return serve(args)
        check_args(args)
        config = connection_from_options(options_from_flags(args))
        if args.command == "bootstrap":
            check_bootstrap(args, config)
        with QueueClient(config) as client:
            status = _run(args, client)
        sys.stdout.flush()
        return status
    except CommandExit as e:
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
