"""The batch API v2 under ``/api/v2/accounts/{account}/queues/{queue}``: batch put (with
deduplication ids), batch receive with long polling, batch ack and batch visibility change with
a result per entry, a change of the queue's settings, stats, redrive, purge; the same accounts
and auth as v1. :func:`openapi` describes these routes; :mod:`.openapi` makes them part of the
service's one API document.
"""

from __future__ import annotations

import base64
import logging
import time
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import validate
from ..client import PutEntry
from ..engine.consume.batch import POLL_FIRST, POLL_MAX
from ..engine.consume.batch_ack import ReceiptResult
from ..engine.core.messages import Message
from ..engine.core.queues import UNSET, QueueInfo
from ..errors import ConfigError, QueueNotFoundError
from ..validate import MAX_BATCH, MAX_WAIT_SECONDS
from . import auth, inputs, names
from .responses import ApiError, invalid, json_response, not_found_queue
from .state import Service
from .v1 import MAX_SECONDS, authorize, client_left, message_tag, queue_info, refuse_head

log = logging.getLogger(__name__)
PREFIX = "/api/v2/accounts/{account}/queues/{queue}"


def message_json(info: QueueInfo, m: Message) -> dict[str, Any]:
    try:
        text, encoding = m.payload.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(m.payload).decode("ascii"), "base64"
    return {
        "id": m.id,
        "popReceipt": m.pop_receipt,
        "message": text,
        "encoding": encoding,
        "deliveryCount": m.delivery_count,
        "messageTag": message_tag(info, m.id),
        "headers": m.headers,
        "group": m.group,
        "enqueuedAt": m.enqueued_at.isoformat() if m.enqueued_at else None,
    }


def result_json(r: ReceiptResult) -> dict[str, Any]:
    out: dict[str, Any] = {"popReceipt": r.receipt, "status": r.status}
    if r.reason:
        out["reason"] = r.reason
    if r.new_receipt:
        out["newPopReceipt"] = r.new_receipt
    return out


async def receive(request: Request) -> Response:
    """Up to ``max`` messages, waiting up to ``waitSeconds`` for a first one.

    The wait holds no engine thread: each look is a short ``get_many`` on a worker thread, and
    between looks the request sleeps on the event loop (pauses doubling from 50 ms to 0.5 s).
    Before each look, and once more before the reply is written, the client is looked at: a
    client that left claims nothing, and what was claimed for one that left meanwhile is given
    back at once (visible again, the delivery not counted), so a consumer whose own timeout is
    shorter than ``waitSeconds`` never moves a message toward its dead-letter queue.
    """
    refuse_head(request)
    service: Service = request.app.state.service
    account = await authorize(request, service, "r", request.path_params["queue"])
    n = inputs.query_int(request, "max", 10, 1, MAX_BATCH) or 10
    wait = inputs.query_int(request, "waitSeconds", 0, 0, int(MAX_WAIT_SECONDS)) or 0
    vt = inputs.query_int(request, "invisibilityTimeSeconds", None, 1, MAX_SECONDS)
    info = await queue_info(service, request, account, "receiveMessages")
    deadline = time.monotonic() + wait
    pause = POLL_FIRST
    while True:
        if await client_left(request):
            return json_response({"messages": []})  # nobody reads it
        got = await service.call(
            lambda c: c.get_many(info.name, n, None if vt is None else float(vt)),
            "receiveMessages",
            info.name,
        )
        left = deadline - time.monotonic()
        if got or left <= 0:
            break
        await anyio.sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX)
    if got and await client_left(request):
        await give_back(service, info.name, got)
        return json_response({"messages": []})
    kept = fit_in_answer(got, service.config.max_response_bytes)
    if len(kept) < len(got):
        await give_back(service, info.name, got[len(kept) :])
    return json_response({"messages": [message_json(info, m) for m in kept]})


async def give_back(service: Service, queue: str, messages: list[Message]) -> None:
    """Give back messages claimed for nobody; a give-back that fails (Cassandra unavailable,
    shed by the bound on waiting calls) is logged and the receive still answers: those messages
    are visible again when their visibility timeout ends (at least once)."""
    try:
        await service.give_back(queue, messages)
    except ApiError as exc:
        log.warning(
            "%d message(s) of %s claimed for nobody could not be given back (%s); they become "
            "visible when their visibility timeout ends",
            len(messages),
            queue,
            exc.body,
        )


def fit_in_answer(messages: list[Message], max_bytes: int) -> list[Message]:
    """The first messages whose payloads fit in ``max_bytes`` together (always the first one):
    the answer of a receive is built in memory, so its size is bounded; the rest are given
    back (visible again at once, the delivery not counted)."""
    total = 0
    for i, m in enumerate(messages):
        total += len(m.payload)
        if i > 0 and total > max_bytes:
            return messages[:i]
    return messages


def _list(body: dict[str, Any], name: str) -> list:
    value = body.get(name)
    if not isinstance(value, list):
        raise invalid(f"{name} must be a list, got {type(value).__name__}", 422)
    if not 1 <= len(value) <= MAX_BATCH:
        raise invalid(f"{name} must have 1 to {MAX_BATCH} entries, got {len(value)}", 422)
    return value


async def ack(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "a", request.path_params["queue"])
    body = inputs.object_body(await inputs.body(request, service.config.max_body_bytes), "the acks")
    receipts = _list(body, "popReceipts")
    if not all(isinstance(r, str) for r in receipts):
        raise invalid("popReceipts must be strings", 422)
    info = await queue_info(service, request, account, "ackMessages")
    results = await service.call(
        lambda c: c.ack_many(info.name, receipts), "ackMessages", info.name
    )
    return json_response({"results": [result_json(r) for r in results]})


async def visibility(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "u", request.path_params["queue"])
    body = inputs.object_body(
        await inputs.body(request, service.config.max_body_bytes), "the visibility changes"
    )
    pairs = []
    for i, entry in enumerate(_list(body, "entries")):
        if not isinstance(entry, dict) or not isinstance(entry.get("popReceipt"), str):
            raise invalid(f"entries[{i}] must be {{popReceipt, invisibilitySeconds}}", 422)
        seconds = inputs.field_int(entry, "invisibilitySeconds", 0, 0, MAX_SECONDS)
        pairs.append((entry["popReceipt"], float(seconds or 0)))
    info = await queue_info(service, request, account, "changeVisibility")
    results = await service.call(
        lambda c: c.change_visibility_many(info.name, pairs), "changeVisibility", info.name
    )
    return json_response({"results": [result_json(r) for r in results]})


def _put_entry(i: int, entry: Any) -> PutEntry:
    where = f"messages[{i}]"
    if not isinstance(entry, dict) or not isinstance(entry.get("message"), str):
        raise invalid(
            f"{where} must be {{message, encoding?, headers?, delaySeconds?, dedupId?, group?}}",
            422,
        )
    unknown = sorted(
        set(entry) - {"message", "encoding", "headers", "delaySeconds", "dedupId", "group"}
    )
    if unknown:
        raise invalid(f"{where} has an unknown field {inputs.echo(unknown[0])}", 422)
    encoding = entry.get("encoding", "utf-8")
    payload: bytes | str = entry["message"]
    if encoding == "base64":
        try:
            payload = base64.b64decode(entry["message"], validate=True)
        except ValueError:
            raise invalid(f"{where}.message is not base64", 422) from None
    elif encoding != "utf-8":
        raise invalid(
            f"{where}.encoding must be 'utf-8' or 'base64', got {inputs.echo(encoding)}", 422
        )
    delay = inputs.field_int(entry, "delaySeconds", 0, 0, MAX_SECONDS) or 0
    dedup = entry.get("dedupId")
    if dedup is not None:
        try:
            dedup = validate.dedup_id(dedup, f"{where}.dedupId")
        except ConfigError as exc:
            raise invalid(str(exc), 422) from None
    group = entry.get("group")
    if group is not None:
        try:
            group = validate.group(group, f"{where}.group")
        except ConfigError as exc:
            raise invalid(str(exc), 422) from None
    return PutEntry(payload, entry.get("headers"), float(delay), dedup, group)


async def put(request: Request) -> Response:
    """Put many messages, each with optional headers, delay, deduplication id (a put of an id
    within 5 minutes of the first returns the first put's id and enqueues nothing) and message
    group, in one write; answered once every message is written."""
    service: Service = request.app.state.service
    account = await authorize(request, service, "p", request.path_params["queue"])
    body = inputs.object_body(
        await inputs.body(request, service.config.max_body_bytes), "the messages"
    )
    entries = [_put_entry(i, e) for i, e in enumerate(_list(body, "messages"))]
    info = await queue_info(service, request, account, "putMessages")
    ids = await service.call(lambda c: c.put_batch(info.name, entries), "putMessages", info.name)
    return json_response({"ids": ids, "messageTags": [message_tag(info, i) for i in ids]})


# The body fields of a settings change and the update_queue argument each one sets.
SETTING_FIELDS = {
    "visibilityTimeoutSeconds": "visibility_timeout",
    "maxDeliveryCount": "max_delivery_count",
    "dlqName": "dead_letter_queue",
    "messageTtlSeconds": "message_ttl",
    "maxPayloadBytes": "max_payload_bytes",
}


def settings_json(account: str, queue: str, info: QueueInfo) -> dict[str, Any]:
    dlq = info.dead_letter_queue
    if dlq is not None:
        owner = names.split(dlq)
        dlq = owner[1] if owner is not None and owner[0] == account else dlq
    return {
        "queueName": queue,
        "bucketSize": info.bucket_size,
        "visibilityTimeoutSeconds": info.visibility_timeout,
        "maxDeliveryCount": info.max_delivery_count,
        "dlqName": dlq,
        "messageTtlSeconds": info.message_ttl,
        "maxPayloadBytes": info.max_payload_bytes,
        "settingsVersion": info.settings_version,
        "updatedAt": info.updated_at.isoformat() if info.updated_at else None,
    }


async def update_settings(request: Request) -> Response:
    """Change settings of the queue while it is in use (``update_queue``): fields left out are
    kept, ``dlqName``/``messageTtlSeconds`` null remove them; from each message's next delivery
    on (a new TTL and payload limit: for messages put from then on)."""
    service: Service = request.app.state.service
    account = await authorize(request, service, "c", request.path_params["queue"])
    body = inputs.object_body(
        await inputs.body(request, service.config.max_body_bytes), "the settings"
    )
    unknown = sorted(set(body) - set(SETTING_FIELDS))
    if unknown:
        raise invalid(
            f"setting {inputs.echo(unknown[0])} cannot be changed; the fields are {', '.join(SETTING_FIELDS)}",
            422,
        )
    changes: dict[str, Any] = {}
    for field, arg in SETTING_FIELDS.items():
        if field not in body:
            continue
        value = body[field]
        if field == "dlqName" and value is not None:
            if not isinstance(value, str):
                raise invalid(f"dlqName must be a string or null, got {inputs.echo(value)}", 422)
            inputs.check_queue(account, value, "dlqName")
            auth.require_target(
                request.state.levels, request.state.claim, value, "the dead-letter queue"
            )
            value = names.engine_name(account, value)
        if isinstance(value, bool) or not (value is None or isinstance(value, (int, float, str))):
            raise invalid(f"{field} must be a number, got {inputs.echo(value)}", 422)
        changes[arg] = value
    info = await queue_info(service, request, account, "updateQueue")

    def update(c) -> QueueInfo:
        try:
            return c.update_queue(
                info.name, **{k: changes.get(k, UNSET) for k in SETTING_FIELDS.values()}
            )
        except QueueNotFoundError:
            if "dead_letter_queue" in changes:
                raise invalid(
                    f"dlqName {body['dlqName']!r}: no such queue in account {account!r}; "
                    "create it first",
                    422,
                ) from None
            raise
        except ConfigError as exc:
            raise invalid(str(exc).replace(info.name, request.path_params["queue"]), 422) from None

    updated = await service.call(update, "updateQueue", info.name)
    return json_response(settings_json(account, request.path_params["queue"], updated))


async def stats(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "g", request.path_params["queue"])
    info = await queue_info(service, request, account, "getStats")
    s = await service.call(lambda c: c.stats(info.name), "getStats", info.name)
    return json_response(
        {
            "queueName": request.path_params["queue"],
            "backlog": s["backlog"],
            "inFlight": s["in_flight"],
            "delayed": s["delayed"],
            "oldestAgeSeconds": s["oldest_age_seconds"],
            "enqueued": s["enqueued"],
            "acked": s["acked"],
            "deadLettered": s["dead_lettered"],
            "dropped": s["dropped"],
            "lost": s["lost"],
        }
    )


async def redrive(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "r", request.path_params["queue"])
    # Taking the dead letters out of this queue acks them here; putting them into ``to``
    # writes there.
    auth.require(request.state.levels, "a")
    body = inputs.object_body(await inputs.body(request, 64 * 1024), "the redrive")
    to = inputs.field_str(body, "to")
    if not to:
        raise invalid("to (the queue to move the dead letters to) may not be null", 422)
    inputs.check_queue(account, to, "to")
    auth.require_target(request.state.levels, request.state.claim, to)
    most = inputs.field_int(body, "max", None, 1, 10_000_000)
    info = await queue_info(service, request, account, "redrive")
    target = names.engine_name(account, to)

    def move(c) -> dict:
        try:
            c.get_queue(target)
        except QueueNotFoundError:
            raise not_found_queue("redrive", to) from None
        report = c.redrive(info.name, target, max_messages=most).as_dict()
        return {"from": request.path_params["queue"], "to": to, "moved": report["moved"]}

    return json_response(await service.call(move, "redrive", info.name))


async def purge(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "d", request.path_params["queue"])
    info = await queue_info(service, request, account, "purge")
    report = await service.call(lambda c: c.purge(info.name).as_dict(), "purge", info.name)
    return json_response({"queueName": request.path_params["queue"], "purged": report["purged"]})


def openapi() -> dict[str, Any]:
    """The OpenAPI 3.1 description of v2 (and of the v1 routes it builds on)."""
    q = [
        {"name": "account", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "queue", "in": "path", "required": True, "schema": {"type": "string"}},
    ]
    result = {
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["popReceipt", "status"],
                    "properties": {
                        "popReceipt": {"type": "string"},
                        "status": {"enum": ["ok", "stale", "invalid"]},
                        "reason": {"type": "string"},
                        "newPopReceipt": {"type": "string"},
                    },
                },
            }
        },
    }
    errors = {
        "400": {"description": "a query value out of range: {errors: [...]}"},
        "401": {"description": "no valid credentials: {code, message}"},
        "403": {"description": "a signed URL without the level: {code, message}"},
        "404": {"description": "no such queue: {reason, operation, message, queueName}"},
        "422": {"description": "a body value out of range: {errors: [...]}"},
    }

    def op(summary: str, level: str, ok: dict, **extra: Any) -> dict:
        return {
            "summary": summary,
            "description": f"Auth level `{level}` (Key and Signed headers hold every level).",
            "parameters": q + extra.pop("query", []),
            "responses": {"200": ok, **errors},
            **extra,
        }

    def body(schema: dict) -> dict:
        return {"required": True, "content": {"application/json": {"schema": schema}}}

    def num(name: str, low: int, high: int, default: int | None, what: str) -> dict:
        schema: dict[str, Any] = {"type": "integer", "minimum": low, "maximum": high}
        if default is not None:
            schema["default"] = default
        return {"name": name, "in": "query", "schema": schema, "description": what}

    json_ok = {"description": "OK", "content": {"application/json": {}}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cassieq HTTP API v2",
            "version": "2",
            "description": "Batch operations over the CassieQ v1 API (docs/service.md).",
        },
        "components": {
            "securitySchemes": {
                "key": {"type": "apiKey", "in": "header", "name": "Authorization"},
            }
        },
        "security": [{"key": []}],
        "paths": {
            PREFIX: {
                "patch": op(
                    "Change the queue's settings while in use; fields left out are kept, "
                    "null dlqName/messageTtlSeconds remove them (a new dlqName also needs level "
                    "p, and a signed URL's q must name it)",
                    "c",
                    json_ok,
                    requestBody=body(
                        {
                            "type": "object",
                            "properties": {
                                "visibilityTimeoutSeconds": {"type": "number"},
                                "maxDeliveryCount": {"type": "integer"},
                                "dlqName": {"type": ["string", "null"]},
                                "messageTtlSeconds": {"type": ["integer", "null"]},
                                "maxPayloadBytes": {"type": "integer"},
                            },
                        }
                    ),
                )
            },
            PREFIX + "/messages": {
                "post": op(
                    "Put up to 1,000 messages; a dedupId put again within 5 minutes returns "
                    "the first put's id and enqueues nothing",
                    "p",
                    json_ok,
                    requestBody=body(
                        {
                            "type": "object",
                            "required": ["messages"],
                            "properties": {
                                "messages": {
                                    "type": "array",
                                    "maxItems": MAX_BATCH,
                                    "items": {
                                        "type": "object",
                                        "required": ["message"],
                                        "properties": {
                                            "message": {"type": "string"},
                                            "encoding": {"enum": ["utf-8", "base64"]},
                                            "headers": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                            "delaySeconds": {"type": "integer", "minimum": 0},
                                            "dedupId": {"type": "string"},
                                            "group": {"type": "string"},
                                        },
                                    },
                                }
                            },
                        }
                    ),
                ),
                "get": op(
                    "Receive up to max messages, waiting up to waitSeconds for a first one",
                    "r",
                    json_ok,
                    query=[
                        num("max", 1, MAX_BATCH, 10, "messages at most"),
                        num("waitSeconds", 0, int(MAX_WAIT_SECONDS), 0, "long polling"),
                        num(
                            "invisibilityTimeSeconds", 1, MAX_SECONDS, None, "default: the queue's"
                        ),
                    ],
                ),
            },
            PREFIX + "/messages/ack": {
                "post": op(
                    "Ack many receipts; one result per receipt, in order",
                    "a",
                    {"description": "OK", "content": {"application/json": {"schema": result}}},
                    requestBody=body(
                        {
                            "type": "object",
                            "required": ["popReceipts"],
                            "properties": {
                                "popReceipts": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                    "maxItems": MAX_BATCH,
                                }
                            },
                        }
                    ),
                )
            },
            PREFIX + "/messages/visibility": {
                "post": op(
                    "Change the visibility of many deliveries; one result per entry",
                    "u",
                    {"description": "OK", "content": {"application/json": {"schema": result}}},
                    requestBody=body(
                        {
                            "type": "object",
                            "required": ["entries"],
                            "properties": {
                                "entries": {
                                    "type": "array",
                                    "maxItems": MAX_BATCH,
                                    "items": {
                                        "type": "object",
                                        "required": ["popReceipt"],
                                        "properties": {
                                            "popReceipt": {"type": "string"},
                                            "invisibilitySeconds": {
                                                "type": "integer",
                                                "minimum": 0,
                                                "maximum": MAX_SECONDS,
                                            },
                                        },
                                    },
                                }
                            },
                        }
                    ),
                )
            },
            PREFIX + "/stats": {
                "get": op("Backlog, in flight, delayed, oldest age and totals", "g", json_ok)
            },
            PREFIX + "/redrive": {
                "post": op(
                    "Move this (dead-letter) queue's messages to another queue of the account "
                    "(levels r and a here, p for the target, which a signed URL's q must name)",
                    "rap",
                    json_ok,
                    requestBody=body(
                        {
                            "type": "object",
                            "required": ["to"],
                            "properties": {"to": {"type": "string"}, "max": {"type": "integer"}},
                        }
                    ),
                )
            },
            PREFIX + "/purge": {"post": op("Drop every message written so far", "d", json_ok)},
        },
    }


ROUTES = [
    Route(PREFIX, update_settings, methods=["PATCH"]),
    Route(PREFIX + "/messages", receive, methods=["GET"]),
    Route(PREFIX + "/messages", put, methods=["POST"]),
    Route(PREFIX + "/messages/ack", ack, methods=["POST"]),
    Route(PREFIX + "/messages/visibility", visibility, methods=["POST"]),
    Route(PREFIX + "/stats", stats, methods=["GET"]),
    Route(PREFIX + "/redrive", redrive, methods=["POST"]),
    Route(PREFIX + "/purge", purge, methods=["POST"]),
]
