"""Checking the source options that need more than a number: ``startingPosition`` and
``maxTriggerDelay`` (the parsers of their rows in ``option_table.py``), and the checks that span
several options (pacing; what only one queue, or named queues, allow), called from
``options.parse_source_settings``. Which queues (``queue``, ``queues``, ``queuePattern``):
``selection.py``. Each error names the option, what it got and what is allowed."""

from __future__ import annotations

import datetime as dt
import json
import re
import time

from ..engine.stream.start import AT_ID, AT_TIMESTAMP, EARLIEST, LATEST, StartingPosition
from ..errors import ConfigError
from .selection import QueueSelection

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
    if not selection.may_create and create_queue:
        raise ConfigError(
            "option 'createQueue' cannot create the queues of a 'queuePattern' (which names "
            "would it create?); create them first, or list them with option 'queues'"
        )
