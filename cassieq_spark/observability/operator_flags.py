"""The command line's flags for what an operator sees while a command runs: ``--log-format``
and ``--progress`` (every command), ``--batch-size``, ``--rate`` and ``--one-at-a-time``
(``redrive``, ``move``), and what they set up. Kept here so the command line only calls in.
"""

from __future__ import annotations

import argparse
import logging
import os

from ..engine.core.progress import ProgressSink
from ..engine.upkeep.batch_moves import DEFAULT_BATCH, MAX_BATCH
from ..errors import ConfigError
from .logs import LOG_FORMAT_ENV, LOG_FORMATS, configure_logging, log_format
from .progress_view import PROGRESS_MODES, progress_sink

__all__ = [
    "PROGRESS_ENV",
    "add_move_flags",
    "add_operator_flags",
    "check_move_flags",
    "progress_of",
    "set_up_logging",
]

PROGRESS_ENV = "CASSIEQ_PROGRESS"
CLI_TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


def add_operator_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=None,
        help=f"text, or json: one object a line with timestamp, level, logger, request id and "
        f"account (default: ${LOG_FORMAT_ENV}, else text)",
    )
    parser.add_argument(
        "--progress",
        choices=PROGRESS_MODES,
        default=None,
        help="progress of redrive, move, purge, repair, bootstrap and put --ndjson on stderr: "
        "a bar on a terminal, JSON lines otherwise (auto, the default), or bar, json, off "
        f"(default: ${PROGRESS_ENV}, else auto)",
    )


def add_move_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH,
        metavar="N",
        help=f"messages received, written and acked together (1 to {MAX_BATCH}, default "
        f"{DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--rate", type=float, default=None, metavar="N", help="at most N messages a second"
    )
    parser.add_argument(
        "--one-at-a-time",
        action="store_true",
        help="claim, write and ack each message on its own (slower; for comparison)",
    )


def check_move_flags(args: argparse.Namespace) -> None:
    if not 1 <= args.batch_size <= MAX_BATCH:
        raise ConfigError(f"--batch-size must be 1 to {MAX_BATCH}, got {args.batch_size}")
    if args.rate is not None and not args.rate > 0:
        raise ConfigError(
            f"--rate must be a positive number of messages a second, got {args.rate:g}"
        )


def set_up_logging(args: argparse.Namespace) -> str:
    """Logging for a command: ``--debug`` logs everything; a service logs at INFO with
    timestamps and keeps the driver's warnings; other commands log warnings, the driver's
    only in JSON (a one-line error says the same for people). Returns the format."""
    fmt = log_format(getattr(args, "log_format", None))
    serving = getattr(args, "command", None) == "serve"
    level = logging.DEBUG if args.debug else logging.WARNING
    text = None if serving else CLI_TEXT_FORMAT
    configure_logging(
        fmt,
        level,
        quiet_driver=not (args.debug or serving or fmt == "json"),
        text_format=text,
    )
    return fmt


def progress_of(args: argparse.Namespace) -> ProgressSink | None:
    """The progress sink ``--progress`` (or ``CASSIEQ_PROGRESS``) asks for."""
    given = getattr(args, "progress", None)
    mode = given if given is not None else os.environ.get(PROGRESS_ENV, "auto")
    return progress_sink(mode)
