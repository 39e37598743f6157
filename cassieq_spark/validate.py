"""The one place where every kind of user-given value is checked.

The client, the CLI, the Spark options and the repair job all call these, so a value has the
same limits, and a refusal the same wording, wherever it comes from. Each refusal is a
:class:`~cassieq_spark.errors.ConfigError` of one line that names the value (or option) and
says what is allowed. The limits themselves are written down in docs/client.md ("Limits").
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping

from .errors import ConfigError

# -- limits ----------------------------------------------------------------------------------------

QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,199}")
KEYSPACE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,47}")
ROLE_RE = re.compile(r"[A-Za-z0-9_]{1,48}")
# Upper bounds of the durations that become timers. A timer outlives its due time by the
# timers table's retention (14 days, see engine/core/timers.py), so these only keep values sane and
# tested; the same limits as SQS's visibility timeout, for delays too.
MAX_DELAY_SECONDS = 12 * 3600.0
MAX_VISIBILITY_SECONDS = 12 * 3600.0
# A receive claims its messages, counts the delivery, then hands out only the claims still
# running: a claim shorter than the round trip would be counted and never handed out, and
# after max_delivery_count such receives the message is dead-lettered or dropped unseen.
MIN_VISIBILITY_SECONDS = 0.5
# An open reservation row lives 14 days (engine/monoton.OPEN_TTL): readers must see it as
# abandoned long before it expires, or they would take it for closed.
MAX_REPAIR_TIMEOUT_SECONDS = 24 * 3600.0
# Cassandra refuses TTLs above 20 years.
MAX_MESSAGE_TTL_SECONDS = 20 * 365 * 24 * 3600
# SQS's limit of receives before a message goes to its dead-letter queue; also far below the
# int column that stores it.
MAX_DELIVERY_COUNT = 1000
# Headers are one frozen map cell next to the payload: their bytes count towards the 16 MiB a
# mutation may have (see engine/queues.MAX_PAYLOAD_LIMIT); the count keeps the map small to
# decode on every get.
MAX_HEADERS_BYTES = 64 * 1024
MAX_HEADERS_COUNT = 1000
# Message groups: the group travels as this reserved header (every path that copies a message
# copies its headers) and is also stored in the row's own column for the scans.
HEADER_GROUP = "cassieq-group"
MAX_GROUP_CHARS = 128
# Ids, versions, slots: bigint/int columns.
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
MAX_REPLICATION_FACTOR = 10
# Each refresh of `cassieq stats --watch` scans the queue's live buckets: faster than a person can
# read would only load the cluster. An hour is the longest wait that still reads as "watching".
MIN_WATCH_INTERVAL_SECONDS = 0.1
MAX_WATCH_INTERVAL_SECONDS = 3600.0
MAX_PORT = 65535
# Batch receive and acknowledgement (``get_many``, ``ack_many``, ...), as in SQS: at most this
# many messages or receipts per call, and a long poll of at most this many seconds.
MAX_BATCH = 1000
MAX_WAIT_SECONDS = 20.0
# A producer's deduplication id, as SQS's MessageDeduplicationId: 1-128 printable ASCII
# characters (letters, digits, punctuation; no spaces).
DEDUP_ID_RE = re.compile(r"[\x21-\x7e]{1,128}")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- names -----------------------------------------------------------------------------------------


def queue_name(name: object, what: str = "queue name") -> str:
    """1-200 of ``[A-Za-z0-9_.-]``, starting with a letter or digit: the whole string (a
    trailing newline is not let through, as ``re.match(...$)`` would)."""
    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        raise ConfigError(
            f"invalid {what} {_show(name)}: use 1-200 characters from letters, digits, '_', '-', "
            "'.', starting with a letter or digit"
        )
    return name


def dedup_id(value: object, what: str = "deduplication id") -> str:
    """A producer's deduplication id: 1-128 printable ASCII characters without spaces."""
    if not isinstance(value, str) or not DEDUP_ID_RE.fullmatch(value):
        raise ConfigError(
            f"{what} must be 1-128 printable ASCII characters (letters, digits, punctuation; no "
            f"spaces), got {_show(value)}"
        )
    return value


def keyspace_name(name: object) -> str:
    if not isinstance(name, str) or not KEYSPACE_RE.fullmatch(name):
        raise ConfigError(
            f"keyspace {_show(name)} is not valid: 1-48 letters, digits and '_', starting with "
            "a letter"
        )
    return name


def role_name(name: object, what: str = "app role") -> str:
    """1-48 ASCII letters, digits and '_' (``str.isalnum`` would let 'rôle' through, which the
    server then refuses after the schema step)."""
    if not isinstance(name, str) or not ROLE_RE.fullmatch(name):
        raise ConfigError(
            f"{what} {_show(name)} is not valid: 1-48 of the ASCII letters, digits and '_' "
            "(it is quoted in CQL)"
        )
    return name


def text(value: str, what: str) -> bytes:
    """A str as UTF-8; a lone surrogate (e.g. from undecodable command-line bytes) is refused."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(
            f"{what} is not valid text: character {exc.object[exc.start : exc.end]!r} at "
            f"position {exc.start} cannot be written as UTF-8; pass bytes, or text that is "
            "valid Unicode"
        ) from None


# -- numbers ---------------------------------------------------------------------------------------


def _duration(limit: float) -> str:
    hours = limit / 3600
    return f"{limit:g} seconds ({hours:g} hours)" if hours >= 1 else f"{limit:g} seconds"


def plain_number_text(value: object) -> bool:
    """False for text that ``float``/``int`` read but a person does not mean as a number:
    digit grouping with '_' ('1_5' is 15) and non-ASCII digits ('١٥', '²'). Not text: True."""
    return not isinstance(value, str) or (value.isascii() and "_" not in value)


_PLAIN = "written with ASCII digits (no '_')"


def seconds(
    value: object, what: str, maximum: float | None = None, positive: bool = False
) -> float:
    """A finite number of seconds >= 0 (> 0 with ``positive``), at most ``maximum``. Numeric
    strings are read ('10', ASCII digits only: '1_5' is refused, not 15); booleans are not
    numbers."""
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be a number of seconds, got {value!r}")
    if not plain_number_text(value):
        raise ConfigError(f"{what} must be a number of seconds {_PLAIN}, got {_show(value)}")
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{what} must be a number of seconds, got {_show(value)}") from None
    if not math.isfinite(v) or v < 0:
        raise ConfigError(f"{what} must be a finite number of seconds >= 0, got {_show(value)}")
    if positive and v <= 0:
        raise ConfigError(f"{what} must be > 0 seconds, got {_show(value)}")
    if maximum is not None and v > maximum:
        raise ConfigError(
            f"{what} must be at most {_duration(maximum)}, got {_show(value)} seconds"
        )
    return v


def number(value: object, what: str) -> float:
    """A number argument of the Python API: an int or a float. A bool or a numeric string is
    refused here (the command line and Spark options read text through :func:`seconds`);
    the range is the caller's to check."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} must be a number (int or float), got {_show(value)}")
    return value


def delay_seconds(value: object, what: str = "delay") -> float:
    """A message's initial invisibility: 0 to :data:`MAX_DELAY_SECONDS`."""
    return seconds(value, what, MAX_DELAY_SECONDS)


def visibility_seconds(
    value: object, what: str = "visibility timeout", zero: bool = False
) -> float:
    """How long a delivery hides its message: :data:`MIN_VISIBILITY_SECONDS` to
    :data:`MAX_VISIBILITY_SECONDS`; with ``zero`` (a change of visibility, not a receive), 0
    to the maximum, 0 meaning "release now"."""
    v = seconds(value, what, MAX_VISIBILITY_SECONDS, positive=not zero)
    if not zero and v < MIN_VISIBILITY_SECONDS:
        raise ConfigError(
            f"{what} must be at least {MIN_VISIBILITY_SECONDS:g} seconds, got {_show(value)}: "
            "a shorter claim can end before its message is handed out, and the delivery would "
            "count all the same"
        )
    return v


def repair_timeout_seconds(value: object, what: str = "repair timeout") -> float:
    """How old an open reservation must be to count as abandoned: > 0 (at 0 every writer in
    flight would count as abandoned at once) and at most :data:`MAX_REPAIR_TIMEOUT_SECONDS`."""
    return seconds(value, what, MAX_REPAIR_TIMEOUT_SECONDS, positive=True)


def watch_interval(value: object, what: str = "--interval") -> float:
    """Seconds between two refreshes of a watch: :data:`MIN_WATCH_INTERVAL_SECONDS` to
    :data:`MAX_WATCH_INTERVAL_SECONDS`; numeric strings are read, booleans are not numbers."""
    allowed = (
        f"a number of seconds from {MIN_WATCH_INTERVAL_SECONDS:g} to {MAX_WATCH_INTERVAL_SECONDS:g}"
    )
    raw = value.strip() if isinstance(value, str) else value
    try:
        v = float(raw) if not isinstance(raw, bool) else math.nan  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        v = math.nan
    if not plain_number_text(raw):
        allowed += f" {_PLAIN}"
        v = math.nan
    if not (MIN_WATCH_INTERVAL_SECONDS <= v <= MAX_WATCH_INTERVAL_SECONDS):  # NaN fails too
        raise ConfigError(f"{what} must be {allowed}, got {_show(value)}")
    return v


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """A JSON object whose keys are all different (json keeps the last of a repeated key)."""
    out: dict[str, object] = {}
    for key, item in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = item
    return out


def integer_text(text: str) -> int | None:
    """The integer an optional '-' and ASCII digits spell, else None. ``str.isdigit`` also
    takes '²' and other Unicode digits that ``int`` refuses (a raw ValueError later)."""
    text = text.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(text)


def watch_count(value: object, what: str = "--count") -> int:
    """How many refreshes a watch draws before it stops: a whole number >= 1."""
    raw = value.strip() if isinstance(value, str) else value
    if isinstance(raw, str) and integer_text(raw) is not None:
        raw = integer_text(raw)
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 1:
        raise ConfigError(f"{what} must be a whole number of refreshes >= 1, got {_show(value)}")
    return raw


def count(value: object, what: str, minimum: int = 1, maximum: int | None = None) -> int:
    """A whole number from ``minimum`` to ``maximum`` (no bool, no float, no str)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(
            f"{what} must be an integer{_range(minimum, maximum)}, got {_show(value)}"
        )
    if value < minimum or (maximum is not None and value > maximum):
        raise ConfigError(
            f"{what} must be an integer{_range(minimum, maximum)}, got {_show(value)}"
        )
    return value


def max_messages(value: object, what: str = "max_messages") -> int:
    """How many messages one batch receive returns at most: 1 to :data:`MAX_BATCH`."""
    return count(value, what, 1, MAX_BATCH)


def wait_seconds(value: object, what: str = "wait_seconds") -> float:
    """How long a batch receive waits for a first message: 0 to :data:`MAX_WAIT_SECONDS`."""
    return seconds(value, what, MAX_WAIT_SECONDS)


def _range(minimum: int, maximum: int | None) -> str:
    return f" >= {minimum}" if maximum is None else f" from {minimum} to {maximum}"


def port(value: object, what: str = "port") -> int:
    if isinstance(value, str) and integer_text(value) is not None:
        value = integer_text(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_PORT:
        raise ConfigError(f"{what} must be from 1 to {MAX_PORT}, got {_show(value)}")
    return value


def replication_factor(value: object) -> int:
    return count(value, "replication factor", 1, MAX_REPLICATION_FACTOR)


DATACENTER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}")
_STRATEGIES = ("SimpleStrategy", "NetworkTopologyStrategy")


def replication(value: object) -> dict[str | None, int]:
    """A keyspace replication map, as CQL writes it (a dict, or its JSON text):
    ``{"class": "SimpleStrategy", "replication_factor": 3}`` or
    ``{"class": "NetworkTopologyStrategy", "dc1": 3, "dc2": 3}``.

    Returns replicas per data center, ``{None: n}`` for SimpleStrategy (the form the schema
    module compares with the cluster's metadata)."""
    what = "replication"
    if isinstance(value, str):
        try:
            value = json.loads(value, object_pairs_hook=_unique_keys)
        except _DuplicateKey as exc:
            raise ConfigError(
                f"{what} names {exc.args[0]!r} more than once; give each key once"
            ) from None
        except (ValueError, RecursionError):
            raise ConfigError(
                f"{what} must be a JSON object such as "
                '\'{"class": "NetworkTopologyStrategy", "datacenter1": 3}\', got '
                f"{_show(value)}"
            ) from None
    if not isinstance(value, Mapping):
        raise ConfigError(f"{what} must be a map with a 'class' key, got {_show(value)}")
    rest = dict(value)
    cls = rest.pop("class", None)
    short = cls.rsplit(".", 1)[-1] if isinstance(cls, str) else None
    if short not in _STRATEGIES or (
        isinstance(cls, str) and "." in cls and not cls.startswith("org.apache.cassandra.locator.")
    ):
        raise ConfigError(
            f"{what}: 'class' must be SimpleStrategy or NetworkTopologyStrategy, got {_show(cls)}"
        )
    if short == "SimpleStrategy":
        if set(rest) != {"replication_factor"}:
            raise ConfigError(
                f"{what}: SimpleStrategy takes exactly one key, 'replication_factor', got "
                f"{_show(sorted(map(str, rest)))}"
            )
        return {None: _factor(rest["replication_factor"], "replication_factor")}
    if not rest:
        raise ConfigError(
            f"{what}: NetworkTopologyStrategy needs at least one data center with its replica "
            'count, e.g. {"class": "NetworkTopologyStrategy", "datacenter1": 3}'
        )
    if "replication_factor" in rest:
        raise ConfigError(
            f"{what}: NetworkTopologyStrategy's 'replication_factor' (the same count in every "
            "data center) is not taken here: name each data center with its replica count, "
            'e.g. {"class": "NetworkTopologyStrategy", "datacenter1": 3}'
        )
    out: dict[str | None, int] = {}
    for dc, n in rest.items():
        if not isinstance(dc, str) or not DATACENTER_RE.fullmatch(dc):
            raise ConfigError(
                f"{what}: data center name {_show(dc)} must be 1-100 of letters, digits, "
                "'_', '.', '-', starting with a letter or digit"
            )
        out[dc] = _factor(n, f"replicas in data center {dc!r}")
    return out


def _factor(value: object, what: str) -> int:
    if isinstance(value, str) and integer_text(value) is not None:
        value = integer_text(value)
    return count(value, what, 1, MAX_REPLICATION_FACTOR)


# -- headers ---------------------------------------------------------------------------------------


def headers(value: object, position: int | None = None) -> dict[str, str] | None:
    """A dict of str to str, at most :data:`MAX_HEADERS_COUNT` entries and
    :data:`MAX_HEADERS_BYTES` bytes of keys and values (UTF-8)."""
    from .errors import PayloadTooLargeError

    if value is None:
        return None
    where = f" at position {position}" if position is not None else ""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"headers{where} must be a dict of str to str")
    if len(value) > MAX_HEADERS_COUNT:
        raise PayloadTooLargeError(
            f"headers{where} have {len(value)} entries; at most {MAX_HEADERS_COUNT} are allowed"
        )
    size = sum(
        len(text(k, "a header key")) + len(text(v, "a header value")) for k, v in value.items()
    )
    if size > MAX_HEADERS_BYTES:
        raise PayloadTooLargeError(
            f"headers{where} take {size} bytes; at most {MAX_HEADERS_BYTES} are allowed"
        )
    return dict(value) or None


def group(value: object, what: str = "group") -> str:
    """A message group: 1 to :data:`MAX_GROUP_CHARS` characters of valid Unicode, not blank
    and without control characters (a key nobody could tell from another when shown)."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= MAX_GROUP_CHARS:
        raise ConfigError(
            f"{what} has {len(value)} characters; a group is 1 to {MAX_GROUP_CHARS} characters"
        )
    text(value, what)
    if value.isspace():
        raise ConfigError(f"{what} {_show(value)} is blank; a group needs a visible character")
    control = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise ConfigError(
            f"{what} {_show(value)} has the control character {control!r}; a group has none"
        )
    return value


def grouped_headers(
    headers: dict[str, str] | None, group_key: object, delay: float, position: int | None = None
) -> dict[str, str] | None:
    """``headers`` (already checked) with ``group_key`` as the :data:`HEADER_GROUP` header; the
    group checked, whichever way it came. A grouped message cannot be delayed: the reader
    pointer passes a delayed row, and its group's later messages would overtake it."""
    where = f" at position {position}" if position is not None else ""
    given = (headers or {}).get(HEADER_GROUP)
    if group_key is not None:
        g = group(group_key, f"group{where}")
        if given is not None and given != g:
            raise ConfigError(
                f"group{where} is {g!r} but header {HEADER_GROUP!r} says {given!r}; give one"
            )
        headers = {**(headers or {}), HEADER_GROUP: g}
    elif given is not None:
        group(given, f"header {HEADER_GROUP!r}{where}")
    if headers and HEADER_GROUP in headers and delay:
        raise ConfigError(
            f"a grouped message cannot be delayed (group {headers[HEADER_GROUP]!r}{where}, "
            f"delay {delay:g} s): a delay would let the group's later messages overtake it; "
            "put it without the delay, or without the group"
        )
    return headers


def headers_bytes(value: Mapping[str, str] | None) -> int:
    """What a checked header map adds to a message's row, for sizing write batches."""
    if not value:
        return 0
    return sum(len(k.encode("utf-8")) + len(v.encode("utf-8")) + 8 for k, v in value.items())


# -- options ---------------------------------------------------------------------------------------


def known_options(given: Iterable[str], allowed: Mapping[str, str], role: str) -> None:
    """Fail on the first option name (case-insensitive) that ``role`` does not take, naming the
    closest allowed spelling and every allowed one. ``allowed``: lower-cased -> shown."""
    for key in sorted({str(k).lower() for k in given}):
        if key not in allowed:
            close = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.75)
            hint = f" (did you mean {allowed[close[0]]!r}?)" if close else ""
            names = ", ".join(sorted(allowed.values(), key=str.lower))
            raise ConfigError(
                f"unknown option {key!r} for the cassieq {role}{hint}; allowed: {names}"
            )


def boolean(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {what!r} must be true or false, got {_show(value)}")


def int_option(
    value: object, what: str, minimum: int | None = None, maximum: int | None = None
) -> int:
    """An option given as text ('10'); a bool is not a number."""
    raw = value.strip() if isinstance(value, str) else value
    if isinstance(raw, bool):
        raise ConfigError(f"option {what!r} must be an integer, got {raw!r}")
    if not plain_number_text(raw):
        raise ConfigError(f"option {what!r} must be an integer {_PLAIN}, got {_show(raw)}")
    try:
        out = int(raw) if isinstance(raw, (int, str)) else int(str(raw))
    except ValueError:
        raise ConfigError(f"option {what!r} must be an integer, got {_show(raw)}") from None
    if minimum is not None and out < minimum:
        raise ConfigError(f"option {what!r} must be >= {minimum}, got {out}")
    if maximum is not None and out > maximum:
        raise ConfigError(f"option {what!r} must be at most {maximum}, got {out}")
    return out


def float_option(
    value: object, what: str, minimum: float | None = None, maximum: float | None = None
) -> float:
    raw = value.strip() if isinstance(value, str) else value
    if isinstance(raw, bool):
        raise ConfigError(f"option {what!r} must be a number, got {raw!r}")
    if not plain_number_text(raw):
        raise ConfigError(f"option {what!r} must be a number {_PLAIN}, got {_show(raw)}")
    try:
        out = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"option {what!r} must be a number, got {_show(raw)}") from None
    if not math.isfinite(out):
        raise ConfigError(f"option {what!r} must be a finite number, got {_show(raw)}")
    if minimum is not None and out < minimum:
        raise ConfigError(f"option {what!r} must be >= {minimum}, got {raw}")
    if maximum is not None and out > maximum:
        raise ConfigError(f"option {what!r} must be at most {maximum:g}, got {raw}")
    return out
