"""Who a request is and what it may do: the original's three schemes, and the admin key.

Per request, as the original: an ``Authorization`` header with a known scheme (``Key`` or
``Signed``, any case) is used alone; otherwise a non-empty ``sig`` query parameter means a
signed URL; otherwise 401. Every key of the account in the path is tried, and only that
account's keys: a key of one account never opens another's queues. A failed check is 401; a
valid signed URL without the route's level is 403.

Signed requests are fresh when ``now - skew < request_time < now + skew``: a captured
request can be replayed for at most ``2 * skew`` (default skew 60 s), with any body and query
string, as in the original (docs/service.md, "Replay window").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from . import signing
from .accounts import Account
from .responses import forbidden, unauthorized

TIME_HEADER = "x-cassieq-request-time"


def scheme(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """(scheme in lower case, credential) of a recognised ``Authorization`` header."""
    value = headers.get("authorization")
    if not value:
        return None
    name, _, credential = value.strip().partition(" ")
    name = name.strip().lower()
    if name not in ("key", "signed"):
        return None
    return name, credential.strip()


def levels_of(
    account: Account | None,
    account_name: str,
    method: str,
    path: str,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    queue: str | None,
    skew: float,
    now: dt.datetime,
) -> frozenset[str]:
    """The levels this request holds on ``account_name``; raises 401 when it holds none."""
    found = scheme(headers)
    keys = list(account.keys.values()) if account is not None else []
    if found is not None:
        kind, credential = found
        if not keys or not credential:
            raise unauthorized()
        if kind == "key":
            if any(signing.same(credential, k) for k in keys):
                return signing.ALL_LEVELS
            raise unauthorized("no key of the account matches")
        stamp = signing.parse_time(headers.get(TIME_HEADER, ""))
        if stamp is None:
            raise unauthorized(
                "X-Cassieq-Request-Time must be yyyy-MM-ddTHH:mm:ssZ (UTC, no milliseconds)"
            )
        window = dt.timedelta(seconds=skew)
        if not (now - window < stamp < now + window):
            raise unauthorized(f"request time is more than {skew:g} s from the server's clock")
        text = signing.request_string(account_name, method, path, stamp)
        if any(signing.same(credential, signing.sign(k, text)) for k in keys):
            return signing.ALL_LEVELS
        raise unauthorized("the signature does not match")
    sig = query.get("sig", "")
    if not sig:
        raise unauthorized()
    if not keys:
        raise unauthorized()
    levels = signing.parse_levels(query.get("auth", ""))
    times: list[dt.datetime | None] = []
    for name in ("st", "et"):
        raw = query.get(name)
        stamp = None if raw is None else signing.parse_time(raw)
        if raw is not None and stamp is None:
            raise unauthorized(f"{name} must be yyyy-MM-ddTHH:mm:ssZ")
        times.append(stamp)
    start, end = times
    claim_queue = query.get("q")
    text = signing.url_string(account_name, levels, start, end, claim_queue)
    if not any(signing.same(sig, signing.sign(k, text)) for k in keys):
        raise unauthorized("the signature does not match")
    if start is not None and not now > start:
        raise unauthorized("the signed URL is not valid yet (st)")
    if end is not None and not now < end:
        raise unauthorized("the signed URL has expired (et)")
    if claim_queue is not None and claim_queue != queue:
        raise unauthorized("the signed URL is for another queue (q)")
    return levels


def require(levels: frozenset[str], level: str) -> None:
    if level not in levels:
        raise forbidden(f"this route needs level {level!r} ({signing.LEVEL_NAMES[level]})")
