"""The original's admin API (accounts, keys, signed-URL permissions) under ``/admin/api/v1``,
authenticated: every request needs ``Authorization: Key <admin key>``, the key the service
was started with (``--admin-key-file``, at least 32 characters); without one the admin API
refuses everything.

Failed attempts are limited per client address: after :data:`MAX_FAILURES` within
:data:`FAILURE_WINDOW_SECONDS`, every admin (and metrics) request from that address is 429
until the window has passed, a right key included (so the answer tells a guesser nothing).
Keys are shown once, in the answer that makes them; listing accounts shows key names only.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import time
from collections import OrderedDict
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import inputs, names, signing
from .accounts import AccountExists, KeyExists
from .config import DEFAULT_SIGNED_URL_SECONDS
from .responses import (
    ApiError,
    conflict,
    empty,
    error,
    framework,
    invalid,
    json_response,
    unauthorized,
)
from .state import Service

PREFIX = "/admin/api/v1"
MAX_FAILURES = 20
FAILURE_WINDOW_SECONDS = 60.0
MAX_ADDRESSES = 10_000


class FailedAttempts:
    """Failed operator-key attempts per client address, in a sliding window; bounded (the
    oldest address out first). Thread-safe."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> list[float]:
        times = [t for t in self._seen.get(address, []) if now - t < FAILURE_WINDOW_SECONDS]
        if times:
            self._seen[address] = times
        else:
            self._seen.pop(address, None)
        return times

    def wait_seconds(self, address: str) -> float:
        """0 when ``address`` may try; else how long until it may."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(address, now)
            if len(times) < MAX_FAILURES:
                return 0.0
            return FAILURE_WINDOW_SECONDS - (now - times[-MAX_FAILURES])

    def failed(self, address: str) -> None:
        now = time.monotonic()
        with self._lock:
            self._recent(address, now)
            self._seen.setdefault(address, []).append(now)
            self._seen.move_to_end(address)
            while len(self._seen) > MAX_ADDRESSES:
                self._seen.popitem(last=False)


FAILED = FailedAttempts()


def _operator_credential(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    kind, _, credential = value.strip().partition(" ")
    if kind.strip().lower() not in ("key", "bearer") or not credential.strip():
        return None
    return credential.strip()


def _check(request: Request, keys: list[str], needs: str) -> None:
    address = request.client.host if request.client else "-"
    wait = FAILED.wait_seconds(address)
    if wait > 0:
        err = framework(429, f"too many failed attempts from {address}; wait {wait:.0f} s")
        raise ApiError(429, err.body, {"Retry-After": str(max(1, int(wait) + 1))})
    given = _operator_credential(request)
    if given is None or not any(signing.same(given, k) for k in keys):
        FAILED.failed(address)
        raise unauthorized(needs)


def check_admin(request: Request, service: Service) -> None:
    admin = service.config.admin_key
    if not admin:
        raise unauthorized("the admin API is off: start the service with --admin-key-file")
    _check(request, [admin], "the admin API needs Authorization: Key <admin key>")


def check_metrics(request: Request, service: Service) -> None:
    """``/metrics`` and the dashboard's data: the admin key or the metrics key. They show
    every account's queue names and depths."""
    keys = [k for k in (service.config.admin_key, service.config.metrics_key) if k]
    if not keys:
        raise unauthorized(
            "queue metrics need the admin or the metrics key: start the service with "
            "--metrics-key-file or --admin-key-file (or --public-metrics)"
        )
    _check(
        request, keys, "queue metrics need Authorization: Bearer <metrics key> (or the admin key)"
    )


def account_missing(name: str, operation: str) -> ApiError:
    return error(404, operation, f"The requested account '{name}' was not found.", account=name)


async def _account(service: Service, name: str, operation: str):
    if not names.account_ok(name):
        raise account_missing(name, operation)
    found = await service.blocking(lambda: service.accounts.get(name, fresh=True))
    if found is None:
        raise account_missing(name, operation)
    return found


async def create_account(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    raw = await inputs.body(request, 64 * 1024)
    value: Any = inputs.json_body(raw)
    body_value = value
    if isinstance(value, dict):  # also {"accountName": "..."}
        value = value.get("accountName")
    if not isinstance(value, str) or not names.account_ok(value.strip()):
        raise invalid(
            f'createAccount.arg0  value "{str(value)[:80]}" doesn\'t match the expected '
            'pattern. "[A-Za-z0-9][A-Za-z0-9_\\-]{0,63}"'
        )
    name = value.strip()
    adopt = isinstance(body_value, dict) and body_value.get("adoptQueues") is True
    if not adopt:
        left = await service.call(lambda c: _queues_of(c, name), "CreateAccount")
        if left:
            listed = ", ".join(n.partition(names.SEPARATOR)[2] for n in left[:5])
            raise conflict(
                "CreateAccount",
                f"Queues of the name '{name}' remain ({listed}{', ...' if len(left) > 5 else ''}"
                f"): delete them first (DELETE {PREFIX}/accounts/{name} deletes them), or "
                'create the account with {"accountName": ..., "adoptQueues": true} to give '
                "them to it.",
                account=name,
            )
    try:
        account = await service.blocking(service.accounts.create, name)
    except AccountExists:
        raise conflict(
            "CreateAccount", f"An account named '{name}' already exists.", account=name
        ) from None
    return json_response(account.as_dict(), 201)


async def list_accounts(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    accounts = await service.blocking(service.accounts.list)
    return json_response([a.listed() for a in accounts])


async def get_account(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    account = await _account(service, request.path_params["account"], "GetAccount")
    return json_response(account.listed())


def _queues_of(c, account: str) -> list[str]:
    mine = names.prefix(account)
    return [info.name for info in c.list_queues() if info.name.startswith(mine)]


async def delete_account(request: Request) -> Response:
    """Deletes the account's keys (no request opens it from then on), then its queues (only
    its own: names with its prefix), then the account: a delete that fails midway leaves the
    account to delete again, and a name stays taken while queues of it remain. A name whose
    account is gone but whose queues remain (a delete that failed, a queue made through
    another instance's cache or the Python client) has them deleted too."""
    service: Service = request.app.state.service
    check_admin(request, service)
    name = request.path_params["account"]
    if not names.account_ok(name):
        raise account_missing(name, "DeleteAccount")

    def delete(c) -> bool:
        found = service.accounts.exists(name)
        if found:
            service.accounts.delete_keys(name)
        queues = _queues_of(c, name)
        if not found and not queues:
            return False
        for queue in queues:
            with contextlib.suppress(KeyError):  # deleted meanwhile
                c.delete_queue(queue)
        service.accounts.delete(name)
        return True

    if not await service.call(delete, "DeleteAccount"):
        raise account_missing(name, "DeleteAccount")
    return empty(204)


async def add_key(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    account = await _account(service, request.path_params["account"], "AddKey")
    body = inputs.object_body(await inputs.body(request, 64 * 1024), "the key request")
    key_name = inputs.field_str(body, "keyName")
    if not key_name or names.KEY_NAME_RE.fullmatch(key_name) is None:
        raise invalid(
            f"keyName must match [a-zA-Z_\\-0-9.]{{1,64}}, got {inputs.echo(key_name)}", 422
        )
    try:
        key = await service.blocking(service.accounts.add_key, account.name, key_name)
    except KeyExists:
        raise conflict(
            "AddKey", f"A key named '{key_name}' already exists.", key=key_name
        ) from None
    return json_response(key, 201)


async def delete_key(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    account = await _account(service, request.path_params["account"], "DeleteKey")
    await service.blocking(service.accounts.delete_key, account.name, request.path_params["key"])
    return empty(204)


async def supported_levels(request: Request) -> Response:
    check_admin(request, request.app.state.service)
    levels = [{"level": "None", "shortForm": "n"}] + [
        {"level": name, "shortForm": short} for short, name in signing.LEVEL_NAMES.items()
    ]
    return json_response(levels)


def _levels(value: Any) -> frozenset[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise invalid("levels must be a list of levels (short forms or names)", 422)
    by_name = {n.lower(): s for s, n in signing.LEVEL_NAMES.items()}
    out: set[str] = set()
    for item in value:
        if not isinstance(item, str):
            raise invalid(f"levels: {inputs.echo(item)} is not a level", 422)
        text = item.strip()
        if text in signing.NONE_LEVEL:
            continue
        short = text if text in signing.ALL_LEVELS else by_name.get(text.lower())
        if short is None:
            raise invalid(
                f"levels: {inputs.echo(text)} is not a level; use one of {', '.join(signing.LEVELS)} "
                "or their names (GET .../permissions/supportedAuthorizationLevels)",
                422,
            )
        out.add(short)
    return frozenset(out)


def _time(body: dict[str, Any], name: str) -> dt.datetime | None:
    raw = inputs.field_str(body, name)
    if not raw:
        return None
    when = signing.parse_time(raw)
    if when is None:
        raise invalid(f"{name} must be yyyy-MM-ddTHH:mm:ssZ, got {inputs.echo(raw)}", 422)
    return when


async def permissions(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    body = inputs.object_body(await inputs.body(request, 64 * 1024), "the permission request")
    name = inputs.field_str(body, "accountName") or ""
    key_name = inputs.field_str(body, "keyName") or "primary"
    levels = _levels(body.get("levels"))
    start, end = _time(body, "startTime"), _time(body, "endTime")
    queue = inputs.field_str(body, "queueName") or None
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    longest = dt.timedelta(seconds=service.config.signed_url_max_seconds)
    if end is None:
        end = max(start or now, now) + min(
            longest, dt.timedelta(seconds=DEFAULT_SIGNED_URL_SECONDS)
        )
    if end > now + longest:
        raise invalid(
            f"endTime {signing.utc_text(end)} is more than {longest.total_seconds():g} s from "
            "now; a signed URL lives at most that long (--signed-url-max-seconds)",
            422,
        )
    account = await _account(service, name, "CreateSignedAuthQuery")
    if queue is not None:
        inputs.check_queue(account.name, queue, "queueName")
    key = account.keys.get(key_name)
    if key is None:
        raise error(
            404,
            "GenerateQueryAuth",
            f"The requested account key of '{key_name}' was not found.",
            key=key_name,
        )
    query = signing.signed_query(key, account.name, levels, start, end, queue)
    return json_response({"queryParam": query}, 201)


ROUTES = [
    Route(PREFIX + "/accounts", create_account, methods=["POST"]),
    Route(PREFIX + "/accounts", list_accounts, methods=["GET"]),
    Route(PREFIX + "/accounts/{account}", get_account, methods=["GET"]),
    Route(PREFIX + "/accounts/{account}", delete_account, methods=["DELETE"]),
    Route(PREFIX + "/accounts/{account}/keys", add_key, methods=["POST"]),
    Route(PREFIX + "/accounts/{account}/keys/{key}", delete_key, methods=["DELETE"]),
    Route(PREFIX + "/permissions/supportedAuthorizationLevels", supported_levels, methods=["GET"]),
    Route(PREFIX + "/permissions", permissions, methods=["POST"]),
]
