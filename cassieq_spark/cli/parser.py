"""The one parser of ``cassieq``: the program's flags (connection, ``--debug``, ``--version``)
and every command group's subcommands, added by the group's own module."""

from __future__ import annotations

import argparse

from .. import __version__
from ..config import add_connection_flags
from ..observability.operator_flags import add_operator_flags
from ..service.server import add_serve_flags
from . import messages, operations, queues
from .accounts import add_account_parser
from .common import EPILOG

# The groups whose commands run on a QueueClient, in the order the help lists them.
CLIENT_GROUPS = (queues, messages, operations)


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
    for group in CLIENT_GROUPS:
        group.add_parsers(sub)
    add_serve_flags(sub)
    add_account_parser(sub)
    return p


def complete(parser: argparse.ArgumentParser) -> None:
    """Shell completion when argcomplete is installed (the ``[cli]`` extra); without it the
    command runs as ever. Free unless the shell's completion hook is asking."""
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)
