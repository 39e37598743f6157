# PYTHON_ARGCOMPLETE_OK
"""The ``cassieq`` command: a thin shell over :class:`cassieq_spark.QueueClient`.

Machine-readable output (JSON) for everything a script reads; errors are one line on stderr.
Shell completion comes from argcomplete when it is installed (the ``[cli]`` extra):
``eval "$(register-python-argcomplete cassieq)"``.

One parser (:mod:`.parser`: the program's flags) to which each command group adds its
subcommands: :mod:`.queues` (bootstrap and the queues' settings), :mod:`.messages` (put, get,
ack, ...), :mod:`.operations` (stats, redrive, move, purge, repair, exporter), :mod:`.accounts`
(the HTTP service's accounts); ``serve``'s flags live with the service
(:func:`cassieq_spark.service.server.add_serve_flags`). A group module has ``COMMANDS``,
``add_parsers(sub)``, ``check(args)`` (before connecting) and ``run(args, client)``.
"""

from ..config.flags import (
    EXIT_EMPTY,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STALE,
    EXIT_USAGE,
)
from .main import check_args, main
from .messages import header_flags, read_ndjson
from .parser import build_parser

__all__ = [
    "EXIT_EMPTY",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_STALE",
    "EXIT_USAGE",
    "build_parser",
    "check_args",
    "header_flags",
    "main",
    "read_ndjson",
]
