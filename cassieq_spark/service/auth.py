"""Who a request is and what it may do: the original's three schemes, and the admin key.

Per request, as the original: an ``Authorization`` header with a known scheme (``Key`` or
``Signed``, any case) is used alone; otherwise a non-empty ``sig`` query parameter means a
signed URL; otherwise 401. Every key of the account in the path is tried, and only that
account's keys: a key of one account never opens another's queues. A failed check is 401; a
valid signed URL without the route's level is 403.

Every 401 of these schemes has one body, whatever failed (an account that does not exist, a
key or signature that does not match, a stale time): the answer tells no one whether an
account exists. Why it failed goes to the log (logger ``cassieq_spark.service.auth``).

A signed URL must end (``et``) within the service's longest signed-URL lifetime
(``--signed-url-max-seconds``) from now: a URL without an end, or one that ends later, is
refused, so a leaked URL stops working by itself.

Signed requests are fresh when ``now - skew < request_time < now + skew``: a captured
request can be replayed for at most ``2 * skew`` (default skew 60 s), with any body and query
string, as in the original (docs/service.md, "Replay window").
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping

from . import signing
from .accounts import Account
from .responses import ApiError, forbidden, unauthorized

TIME_HEADER = "x-cassieq-request-time"
log = logging.getLogger(__name__)


def refused(account: str, why: str) -> ApiError:
    """The one 401 of the account schemes; ``why`` goes to the log only."""
    log.info("401 for account %r: %s", account, why)
    return unauthorized()


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


def url_claim(headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The queue a request's signed URL is limited to (``q``), or None: no claim, or not a
    signed URL (a ``Key`` or ``Signed`` header is used alone)."""
    if scheme(headers) is not None or not query.get("sig", ""):
        return None
    return query.get("q")


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
    max_url_seconds: float | None = None,
) -> frozenset[str]:
    """The levels this request holds on ``account_name``; raises 401 when it holds none.
    ``max_url_seconds``: a signed URL must end within that many seconds from ``now``."""
    found = scheme(headers)
    keys = list(account.keys.values()) if account is not None else []
    if found is not None:
        kind, credential = found
        if not keys:
            raise refused(account_name, "no such account (or it has no key)")
        if not credential:
            raise refused(account_name, f"an empty {kind} credential")
        if kind == "key":
            if any(signing.same(credential, k) for k in keys):
                return signing.ALL_LEVELS
            raise refused(account_name, "no key of the account matches")
        stamp = signing.parse_time(headers.get(TIME_HEADER, ""))
        if stamp is None:
            raise refused(
                account_name,
                "X-Cassieq-Request-Time must be yyyy-MM-ddTHH:mm:ssZ (UTC, no milliseconds)",
            )
        window = dt.timedelta(seconds=skew)
        if not (now - window < stamp < now + window):
            raise refused(
                account_name, f"request time is more than {skew:g} s from the server's clock"
            )
        text = signing.request_string(account_name, method, path, stamp)
        if any(signing.same(credential, signing.sign(k, text)) for k in keys):
            return signing.ALL_LEVELS
        raise refused(account_name, "the signature does not match")
    sig = query.get("sig", "")
    if not sig:
        raise refused(account_name, "no credential (no Authorization header, no sig)")
    if not keys:
        raise refused(account_name, "no such account (or it has no key)")
    levels = signing.parse_levels(query.get("auth", ""))
    times: list[dt.datetime | None] = []
    for name in ("st", "et"):
        raw = query.get(name)
        stamp = None if raw is None else signing.parse_time(raw)
        if raw is not None and stamp is None:
            raise refused(account_name, f"{name} must be yyyy-MM-ddTHH:mm:ssZ")
        times.append(stamp)
    start, end = times
    claim_queue = query.get("q")
    text = signing.url_string(account_name, levels, start, end, claim_queue)
    if not any(signing.same(sig, signing.sign(k, text)) for k in keys):
        raise refused(account_name, "the signature does not match")
    if start is not None and not now > start:
        raise refused(account_name, "the signed URL is not valid yet (st)")
    if end is not None and not now < end:
        raise refused(account_name, "the signed URL has expired (et)")
    if max_url_seconds is not None:
        if end is None:
            raise refused(account_name, "the signed URL has no end time (et)")
        if end > now + dt.timedelta(seconds=max_url_seconds):
            raise refused(
                account_name,
                f"the signed URL ends more than {max_url_seconds:g} s from now "
                "(--signed-url-max-seconds)",
            )
    if claim_queue is not None and claim_queue != queue:
        raise refused(account_name, "the signed URL is for another queue (q)")
    return levels


def require_target(
    levels: frozenset[str], claim: str | None, target: str, what: str = "the target queue"
) -> None:
    """A route that writes into ``target``, another queue than the path's (a redrive's
    destination, a new dead-letter queue), needs the put level, and a signed URL limited to
    one queue (``q``) reaches no other: 403 otherwise."""
    if "p" not in levels:
        raise forbidden(
            f"{what} {target!r} is written to: this needs level 'p' ({signing.LEVEL_NAMES['p']})"
        )
    if claim is not None and claim != target:
        raise forbidden(
            f"this signed URL is for queue {claim!r} only (q); it cannot reach {what} {target!r}"
        )


def require(levels: frozenset[str], level: str) -> None:
    if level not in levels:
        raise forbidden(f"this route needs level {level!r} ({signing.LEVEL_NAMES[level]})")
