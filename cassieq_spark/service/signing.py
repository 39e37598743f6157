"""The signatures of the original's two signed schemes, byte for byte.

Both are ``base64url_nopad(HMAC-SHA256(base64url_decode(account_key), string_to_sign))``:

* a signed request (``Authorization: Signed <sig>`` with ``X-Cassieq-Request-Time``) signs
  ``account \\n METHOD \\n canonical_path \\n request_time_utc``;
* a signed URL (query ``auth``, ``sig``, optional ``st``, ``et``, ``q``) signs
  ``account \\n levels [\\n startTime:st] [\\n endTime:et] [\\n q:queue]`` with the levels in
  the canonical order ``rpuagcd`` and the times re-printed in UTC.

Times are ``yyyy-MM-ddTHH:mm:ss`` with ``Z`` or a ``+HH:MM`` offset, never milliseconds; they
are signed in their UTC ``Z`` form.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import re
import secrets

# One letter per level, in the order the original prints them.
LEVELS = "rpuagcd"
LEVEL_NAMES = {
    "r": "ReadMessage",
    "p": "PutMessage",
    "u": "UpdateMessage",
    "a": "AckMessage",
    "g": "GetQueueInformation",
    "c": "CreateQueue",
    "d": "DeleteQueue",
}
NONE_LEVEL = ("n", "None")
ALL_LEVELS = frozenset(LEVELS)
KEY_BYTES = 64

_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(Z|[+-]\d{2}:?\d{2})", re.ASCII
)


def new_key() -> str:
    """64 random bytes, base64url without padding (86 characters), as the original makes them."""
    return b64url(secrets.token_bytes(KEY_BYTES))


def b64url(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def key_bytes(key: str) -> bytes | None:
    """The bytes of an account key (base64url, padding optional), or None if it is not one."""
    try:
        return base64.urlsafe_b64decode(key + "=" * (-len(key) % 4))
    except (ValueError, TypeError):
        return None


def sign(key: str, text: str) -> str | None:
    """The signature of ``text`` under ``key``; None for a key that is not base64url."""
    raw = key_bytes(key)
    if raw is None:
        return None
    return b64url(hmac.new(raw, text.encode("utf-8"), hashlib.sha256).digest())


def parse_time(value: str) -> dt.datetime | None:
    """A request or claim time, or None when it is not ``yyyy-MM-ddTHH:mm:ss(Z|+HH:MM)``."""
    m = _TIME_RE.fullmatch(value.strip())
    if m is None:
        return None
    zone = m.group(7)
    try:
        offset = dt.timedelta(0)
        if zone != "Z":
            digits = zone[1:].replace(":", "")
            offset = dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            if zone[0] == "-":
                offset = -offset
        y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
        return dt.datetime(y, mo, d, h, mi, sec, tzinfo=dt.timezone(offset)).astimezone(
            dt.timezone.utc
        )
    except (ValueError, OverflowError):  # month 13, an offset of 25 hours, year 9999-23:59
        return None


def utc_text(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def canonical_path(path: str) -> str:
    """``/`` + the decoded path without leading and trailing slashes, as the original signs it."""
    return "/" + path.strip("/")


def request_string(account: str, method: str, path: str, request_time: dt.datetime) -> str:
    return "\n".join([account, method, canonical_path(path), utc_text(request_time)])


def parse_levels(text: str) -> frozenset[str]:
    """The levels of a signed URL's ``auth``: one letter each; an unknown letter or ``n``
    grants nothing (the empty set), as in the original."""
    if any(ch not in ALL_LEVELS for ch in text):
        return frozenset()
    return frozenset(text)


def canonical_levels(levels: frozenset[str]) -> str:
    return "".join(ch for ch in LEVELS if ch in levels)


def url_string(
    account: str,
    levels: frozenset[str],
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    queue: str | None = None,
) -> str:
    parts = [account, canonical_levels(levels)]
    if start is not None:
        parts.append("startTime:" + utc_text(start))
    if end is not None:
        parts.append("endTime:" + utc_text(end))
    if queue is not None:
        parts.append("q:" + queue)
    return "\n".join(parts)


def signed_query(
    key: str,
    account: str,
    levels: frozenset[str],
    start: dt.datetime | None = None,
    end: dt.datetime | None = None,
    queue: str | None = None,
) -> str:
    """The query string of a signed URL, parameters in the original's order (auth, q, st, et,
    sig), not URL-encoded (every character of them is safe in a query)."""
    sig = sign(key, url_string(account, levels, start, end, queue))
    parts = ["auth=" + canonical_levels(levels)]
    if queue is not None:
        parts.append("q=" + queue)
    if start is not None:
        parts.append("st=" + utc_text(start))
    if end is not None:
        parts.append("et=" + utc_text(end))
    parts.append(f"sig={sig}")
    return "&".join(parts)


def same(a: str | None, b: str | None) -> bool:
    """Constant-time equality of two signatures or keys."""
    if a is None or b is None:
        return False
    return hmac.compare_digest(a.encode("utf-8", "replace"), b.encode("utf-8", "replace"))
