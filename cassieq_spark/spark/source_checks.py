"""Checking the source options that need more than a number: which queues (``queue``,
``queues``, ``queuePattern``), ``startingPosition`` and ``maxTriggerDelay`` (the parsers of
their rows in ``option_table.py``), and the checks that span several options (called from
``options.parse_source_settings``). Each error names the option, what it got and what is
allowed."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

import re2

from ..engine.stream.start import AT_ID, AT_TIMESTAMP, EARLIEST, LATEST, StartingPosition
from ..errors import ConfigError
from ..validate import queue_name

ONE = "queue"  # option queue: one queue, the offset of one queue (the format since 0.1)
LISTED = "queues"  # option queues: the listed queues, one offset per queue
MATCHING = "queuePattern"  # option queuePattern: every queue whose name matches, as they come


@dataclass(frozen=True)
class QueueSelection:
    """Which queues a source reads. ``names``: the queue (``ONE``) or the listed ones
    (``LISTED``); ``pattern``: the regular expression a name must match whole (``MATCHING``)."""

    kind: str
    names: tuple[str, ...] = ()
    pattern: str | None = None

    @property
    def several(self) -> bool:
        """Offsets name each queue (``{"queues": {...}}``), even for a list of one."""
        return self.kind != ONE

    def matches(self, name: str) -> bool:
        if self.kind == MATCHING:
            return compile_queue_pattern(self.pattern or "").fullmatch(name) is not None
        return name in self.names

    def describe(self) -> str:
        if self.kind == MATCHING:
            return f"queues matching {self.pattern!r}"
        return ", ".join(repr(n) for n in self.names)


def queue_selection(queue: str, raw: dict[str, str]) -> QueueSelection:
    """Exactly one of option ``queue`` (already checked, ``""`` when absent), ``queues``
    (comma-separated names) and ``queuePattern`` (a regular expression)."""
    listed, pattern = raw.get("queues"), raw.get("queuepattern")
    given = [
        name
        for name, value in (("queue", queue), ("queues", listed), ("queuePattern", pattern))
        if value is not None and str(value).strip()
    ]
    if len(given) != 1:
        raise ConfigError(
            "the cassieq source reads option 'queue' (one queue), 'queues' (comma-separated "
            "names) or 'queuePattern' (a regular expression over queue names): set exactly one"
            + (f", got {', '.join(given)}" if given else "")
        )
    if queue:
        return QueueSelection(ONE, (queue,))
    if listed is not None and str(listed).strip():
        names = [n.strip() for n in str(listed).split(",")]
        for n in names:
            queue_name(n, "queue name in option 'queues'")
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ConfigError(f"option 'queues' names {', '.join(doubled)} more than once")
        return QueueSelection(LISTED, tuple(names))
    compile_queue_pattern(str(pattern))
    return QueueSelection(MATCHING, (), str(pattern))


@functools.lru_cache(maxsize=64)
def compile_queue_pattern(pattern: str) -> Any:
    """``pattern`` compiled by RE2, whose matching takes time linear in the name, whatever the
    pattern (a backtracking matcher takes a minute on ``(a+)+`` against 31 characters, at every
    trigger). RE2's dialect is Python's without backreferences, lookaround and possessive
    quantifiers; it has POSIX classes (``[[:alpha:]]``) and repetition counts up to 1,000.
    Compiled once per pattern and process."""
    options = re2.Options()
    options.log_errors = False  # the ConfigError below says it, once
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            re.compile(pattern)  # Python's parser too: RE2 reads 'x{99999999999}' as text
        return re2.compile(pattern, options=options)
    except (re.error, re2.error, TypeError, ValueError, OverflowError, RecursionError) as exc:
        text = exc.args[0] if exc.args else exc
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        raise ConfigError(
            f"option 'queuePattern' must be a regular expression in RE2 syntax (Python's without "
            f"backreferences or lookaround, matched against whole queue names): {text}; "
            f"got {pattern!r}"
        ) from None


DEFAULT_MAX_TRIGGER_DELAY = 15 * 60.0  # seconds, as Kafka's maxTriggerDelay
MAX_TRIGGER_DELAY = 24 * 3600.0  # a trigger waits for minMessagesPerTrigger one day at most

# Half the bigint range: far above any id a queue allots, with room for planning windows
# (from_id + window) that must stay a bigint.
MAX_START_ID = 2**62
# A start time further ahead than this is a unit mistake (microseconds for milliseconds).
MAX_START_AHEAD_SECONDS = 24 * 3600.0

_STARTING_HELP = (
    "option 'startingPosition' must be earliest, latest, "
    '{"id": N} (N an id >= 0) or {"timestamp": T} (T epoch milliseconds >= 0)'
)
_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.ASCII)


def starting_position(raw: object) -> StartingPosition:
    """``earliest`` (None too), ``latest``, ``{"id": N}`` or ``{"timestamp": T}``."""
    if raw is None:
        return StartingPosition(EARLIEST)
    text = str(raw).strip()
    if text.lower() in (EARLIEST, LATEST):
        return StartingPosition(text.lower())
    try:
        parsed = json.loads(text)
    except ValueError:
        raise ConfigError(f"{_STARTING_HELP}; got {raw!r}") from None
    if not isinstance(parsed, dict) or len(parsed) != 1:
        raise ConfigError(f"{_STARTING_HELP}; got {raw!r}")
    ((key, value),) = parsed.items()
    if key not in (AT_ID, AT_TIMESTAMP) or not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{_STARTING_HELP}; got {raw!r}")
    if value < 0:
        raise ConfigError(f"{_STARTING_HELP}; got {raw!r} (negative)")
    if key == AT_ID and value > MAX_START_ID:
        raise ConfigError(
            f"option 'startingPosition' {{\"id\": N}} must be from 0 to {MAX_START_ID} (ids "
            f"are allotted from 0 up; larger ones leave no room to plan batches); got {raw!r}"
        )
    latest = (time.time() + MAX_START_AHEAD_SECONDS) * 1000
    if key == AT_TIMESTAMP and value > latest:
        try:
            when = f"year {dt.datetime.fromtimestamp(value / 1000, dt.timezone.utc).year}"
        except (ValueError, OverflowError, OSError):
            when = "after year 9999"
        raise ConfigError(
            f"option 'startingPosition' {{\"timestamp\": T}} is {when}: T is epoch "
            f"milliseconds (not microseconds), at most a day from now ({int(latest)}); "
            f"got {raw!r}"
        )
    return StartingPosition(key, value)


def duration(raw: object, label: str, default: float, maximum: float | None = None) -> float:
    """Seconds from ``'15s'``, ``'500ms'``, ``'2 minutes'``, ``'1h'`` or a plain number of
    seconds; must be > 0 and at most ``maximum``."""
    if raw is None:
        return default
    m = _DURATION.match(str(raw).lower())
    if m is None or m.group(2) not in ("", *_UNITS):
        raise ConfigError(
            f"option {label!r} must be a duration such as '15s', '500ms', '5m' or '1h' (a plain "
            f"number means seconds); got {raw!r}"
        )
    seconds = float(m.group(1)) * _UNITS.get(m.group(2), 1.0)
    if seconds <= 0:
        raise ConfigError(f"option {label!r} must be longer than 0, got {raw!r}")
    if maximum is not None and seconds > maximum:
        raise ConfigError(
            f"option {label!r} must be at most {maximum:g} seconds ({maximum / 3600:g} h), "
            f"got {raw!r}"
        )
    return seconds


def check_pacing(min_messages: int | None, max_messages: int | None, delay_given: bool) -> None:
    """``minMessagesPerTrigger`` must not exceed ``maxMessagesPerTrigger``, and
    ``maxTriggerDelay`` means nothing without it."""
    if min_messages is not None and max_messages is not None and min_messages > max_messages:
        raise ConfigError(
            f"option 'minMessagesPerTrigger' ({min_messages}) must not exceed "
            f"'maxMessagesPerTrigger' ({max_messages})"
        )
    if delay_given and min_messages is None:
        raise ConfigError(
            "option 'maxTriggerDelay' only applies with 'minMessagesPerTrigger' (how long a "
            "trigger may wait for that many messages); set both or neither"
        )


def check_several(
    selection: QueueSelection, start: StartingPosition | None, create_queue: bool
) -> None:
    """What only makes sense for one queue, or for named ones."""
    if selection.several and start is not None and start.kind == AT_ID:
        raise ConfigError(
            f"option 'startingPosition' {{\"id\": N}} names an id of one queue, but option "
            f"'{selection.kind}' reads several; use earliest, latest or "
            '{"timestamp": T}, which mean the same in every queue'
        )
    if selection.kind == MATCHING and create_queue:
        raise ConfigError(
            "option 'createQueue' cannot create the queues of a 'queuePattern' (which names "
            "would it create?); create them first, or list them with option 'queues'"
        )
