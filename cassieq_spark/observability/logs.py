"""Log lines an operator's platform reads: text with a timestamp, or one JSON object a line.

``--log-format json`` (or ``CASSIEQ_LOG_FORMAT=json``) for ``cassieq`` and ``cassieq serve``:
each line is ``{"timestamp", "level", "logger", "message"}`` plus ``request_id`` and
``account`` when the line was logged while the service answered a request (the access line
and anything logged on its behalf, on the worker threads too), and ``exception`` with the
traceback when there is one. Log platforms (Loki, ELK, Cloud Logging) take the fields as they
are, with no pattern to maintain.

The request's id and account travel in a context variable (:func:`request_context`), set by the
service for the time of a request; a line may also carry them as ``extra=``.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import IO

__all__ = [
    "LOG_FORMATS",
    "LOG_FORMAT_ENV",
    "JsonFormatter",
    "configure_logging",
    "current_request",
    "request_context",
]

LOG_FORMATS = ("text", "json")
LOG_FORMAT_ENV = "CASSIEQ_LOG_FORMAT"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_request: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "cassieq_request", default=None
)


@contextlib.contextmanager
def request_context(request_id: str, account: str | None) -> Iterator[None]:
    """Lines logged inside (on this task, and on threads started from it with its context)
    carry ``request_id`` and ``account``."""
    token = _request.set((request_id, account or "-"))
    try:
        yield
    finally:
        _request.reset(token)


def current_request() -> tuple[str, str] | None:
    """(request id, account) of the request being answered here, or None."""
    return _request.get()


class _RequestFields(logging.Filter):
    """Puts the current request's id and account on each record that has none."""

    def filter(self, record: logging.LogRecord) -> bool:
        found = _request.get()
        if found is not None:
            if not hasattr(record, "request_id"):
                record.request_id = found[0]
            if not hasattr(record, "account"):
                record.account = found[1]
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a record; the timestamp in UTC, ISO 8601 with milliseconds."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = dt.datetime.fromtimestamp(record.created, dt.timezone.utc)
        out: dict[str, object] = {
            "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in ("request_id", "account"):
            value = getattr(record, field, None)
            if value is not None:
                out[field] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def log_format(given: str | None) -> str:
    """The format asked for: the flag, else ``CASSIEQ_LOG_FORMAT``, else text."""
    from ..errors import ConfigError

    value = given if given is not None else os.environ.get(LOG_FORMAT_ENV, "text")
    if value not in LOG_FORMATS:
        where = "--log-format" if given is not None else LOG_FORMAT_ENV
        raise ConfigError(f"{where} must be text or json, got {value!r}")
    return value


class _CurrentStderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a record is emitted, not when the handler was
    made: a process that swaps its stderr (a test's capture, a redirect) keeps its log lines
    and never writes to a stream closed since."""

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, value: IO[str]) -> None:
        pass


def configure_logging(
    fmt: str,
    level: int = logging.WARNING,
    *,
    quiet_driver: bool = False,
    stream: IO[str] | None = None,
    text_format: str | None = None,
) -> logging.Handler:
    """One handler on the root logger, in ``fmt`` (text or json), replacing any earlier one of
    ours. ``quiet_driver``: the Cassandra driver's own lines are dropped (a one-shot command
    says the same in its one-line error); a service keeps them. ``text_format``: the text
    layout (default: timestamp, level, logger, message)."""
    handler: logging.Handler = (
        logging.StreamHandler(stream) if stream is not None else _CurrentStderr()
    )
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter(text_format or TEXT_FORMAT)
    )
    handler.addFilter(_RequestFields())
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_cassieq", False)]:
        root.removeHandler(old)
    handler._cassieq = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("cassandra").setLevel(
        logging.CRITICAL + 1 if quiet_driver else logging.NOTSET
    )
    return handler
