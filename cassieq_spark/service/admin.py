"""The original's admin API (accounts, keys, signed-URL permissions) under ``/admin/api/v1``,
authenticated: every request needs ``Authorization: Key <admin key>``, the key the service
was started with (``--admin-key-file``); without one the admin API refuses everything.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import auth, inputs, names, signing
from .accounts import AccountExists, KeyExists
from .responses import ApiError, conflict, empty, error, invalid, json_response, unauthorized
from .state import Service

PREFIX = "/admin/api/v1"


def check_admin(request: Request, service: Service) -> None:
    admin = service.config.admin_key
    if not admin:
        raise unauthorized("the admin API is off: start the service with --admin-key-file")
    found = auth.scheme(request.headers)
    if found is None or found[0] != "key" or not signing.same(found[1], admin):
        raise unauthorized("the admin API needs Authorization: Key <admin key>")


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
    if isinstance(value, dict):  # also {"accountName": "..."}
        value = value.get("accountName")
    if not isinstance(value, str) or not names.account_ok(value.strip()):
        raise invalid(
            f'createAccount.arg0  value "{str(value)[:80]}" doesn\'t match the expected '
            'pattern. "[A-Za-z0-9][A-Za-z0-9_\\-]{0,63}"'
        )
    name = value.strip()
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
    return json_response([a.as_dict() for a in accounts])


async def get_account(request: Request) -> Response:
    service: Service = request.app.state.service
    check_admin(request, service)
    account = await _account(service, request.path_params["account"], "GetAccount")
    return json_response(account.as_dict())


async def delete_account(request: Request) -> Response:
    """Deletes the account and its queues (only its own: names with its prefix)."""
    service: Service = request.app.state.service
    check_admin(request, service)
    account = await _account(service, request.path_params["account"], "DeleteAccount")
    mine = names.prefix(account.name)

    def delete(c) -> None:
        service.accounts.delete(account.name)
        for info in c.list_queues():
            if info.name.startswith(mine):
                with contextlib.suppress(KeyError):  # deleted meanwhile
                    c.delete_queue(info.name)

    await service.call(delete, "DeleteAccount")
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
