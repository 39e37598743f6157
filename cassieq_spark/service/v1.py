"""The CassieQ REST API v1 under ``/api/v1/accounts/{account}/queues``: the original's routes,
query parameters, JSON field names and status codes (docs/service.md lists where it deviates).
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .. import validate
from ..engine.core.messages import Message, to_bytes
from ..engine.core.queues import DEFAULT_SETTINGS, QueueInfo
from ..engine.core.receipts import PopReceipt
from ..errors import (
    ConfigError,
    InvalidReceiptError,
    PayloadTooLargeError,
    QueueExistsError,
    QueueNotFoundError,
    StaleReceiptError,
)
from ..validate import MAX_DELIVERY_COUNT
from . import auth, inputs, names
from .responses import ApiError, conflict, empty, framework, invalid, json_response, not_found_queue
from .state import Service

PREFIX = "/api/v1/accounts/{account}/queues"
MAX_SECONDS = 12 * 3600
DEFAULT_INVISIBILITY = 30


async def authorize(
    request: Request, service: Service, level: str, queue: str | None = None
) -> str:
    """The account of the path once the request may act at ``level`` on it (and ``queue``)."""
    account = request.path_params["account"]
    found = None
    if names.account_ok(account):
        hit, found = service.accounts.cached(account)
        if not hit:
            found = await service.blocking(service.accounts.get, account)
    levels = auth.levels_of(
        found,
        account,
        request.method,
        request.url.path,
        request.headers,
        request.query_params,
        queue,
        service.config.skew_seconds,
        dt.datetime.now(dt.timezone.utc),
        service.config.signed_url_max_seconds,
    )
    auth.require(levels, level)
    request.state.account = account
    request.state.levels = levels
    request.state.claim = auth.url_claim(request.headers, request.query_params)
    return account


def message_tag(info: QueueInfo, message_id: int) -> str:
    """A message's tag: 6 characters that stay the same across its deliveries and updates."""
    digest = hashlib.sha256(info.queue_id.bytes + message_id.to_bytes(8, "big")).digest()
    return base64.b64encode(digest[:4]).decode("ascii").rstrip("=")


def message_text(payload: bytes) -> str:
    """The message as text; bytes that are not UTF-8 (a Spark producer's) become U+FFFD."""
    return payload.decode("utf-8", errors="replace")


def definition(service: Service, account: str, info: QueueInfo) -> dict[str, Any]:
    _, _, queue = info.name.partition(names.SEPARATOR)
    dlq = info.dead_letter_queue
    if dlq is not None:
        owner = names.split(dlq)
        dlq = owner[1] if owner is not None and owner[0] == account else dlq
    ident = f"{account}:{queue}_v0"
    return {
        "accountName": account,
        "queueName": queue,
        "bucketSize": info.bucket_size,
        "maxDeliveryCount": info.max_delivery_count,
        "status": "Active",
        "version": 0,
        "repairWorkerPollFrequencySeconds": int(round(service.config.repair_interval)),
        "repairWorkerTombstonedBucketTimeoutSeconds": int(round(info.repair_timeout)),
        "deleteBucketsAfterFinalization": True,
        "queueStatsId": f"{info.queue_id}_{ident}",
        "dlqName": dlq,
        "strictFifo": True,
        "id": ident,
    }


def receipt_param(request: Request) -> str:
    value = request.query_params.get("popReceipt")
    if value is None or not value.strip():
        raise invalid("query param popReceipt may not be null")
    return value.strip()


def bad_receipt(receipt: str) -> ApiError:
    return invalid(
        f"query param popReceipt {receipt[:80]!r} is not a pop receipt of this queue; "
        "use the one the get returned"
    )


def refuse_head(request: Request) -> None:
    """A route that claims messages answers ``HEAD`` with 405: a HEAD reply has no body, so
    the receipts of what it claimed could reach nobody (Starlette serves HEAD from every GET
    route)."""
    if request.method == "HEAD":
        err = framework(405, "this route claims messages; use GET")
        err.headers["Allow"] = "GET"
        raise err


async def client_left(request: Request) -> bool:
    """The client of a GET has disconnected. The first look may only take the request's (empty)
    body off the channel; the second sees a disconnect that came before it."""
    return await request.is_disconnected() or await request.is_disconnected()


async def queue_info(service: Service, request: Request, account: str, operation: str) -> QueueInfo:
    queue = request.path_params["queue"]
    inputs.check_queue(account, queue)
    engine = names.engine_name(account, queue)
    try:
        return await service.queue(engine)
    except QueueNotFoundError:
        raise not_found_queue(operation, queue) from None


# -- queues -----------------------------------------------------------------------------------


async def list_queues(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "g")
    inputs.check_account(account)
    mine = names.prefix(account)
    infos = await service.call(lambda c: c.list_queues(), "getAccountQueues")
    return json_response(
        [definition(service, account, i) for i in infos if i.name.startswith(mine)]
    )


async def create_queue(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "c")
    inputs.check_account(account)
    raw = await inputs.body(request, service.config.max_body_bytes)
    body = inputs.object_body(raw, "the queue options")
    name = inputs.field_str(body, "queueName")
    if not name:
        raise invalid("queueName may not be null", 422)
    inputs.check_queue(account, name, "queueName")
    bucket = inputs.field_int(body, "bucketSize", DEFAULT_SETTINGS.bucket_size, 1, 100_000)
    deliveries = inputs.field_int(
        body, "maxDeliveryCount", DEFAULT_SETTINGS.max_delivery_count, 1, MAX_DELIVERY_COUNT
    )
    inputs.field_int(body, "repairWorkerPollSeconds", None, 1, 3600)
    finalize = inputs.field_int(body, "repairWorkerBucketFinalizeTimeSeconds", 15, 1, 24 * 3600)
    keep = body.get("deleteBucketsAfterFinalize")
    if keep is not None and not isinstance(keep, bool):
        raise invalid(
            f"deleteBucketsAfterFinalize must be true or false, got {inputs.echo(keep)}", 422
        )
    dlq = inputs.field_str(body, "dlqName") or None
    if dlq is not None:
        inputs.check_queue(account, dlq, "dlqName")
    engine = names.engine_name(account, name)
    engine_dlq = names.engine_name(account, dlq) if dlq else None
    exist_error = request.query_params.get("errorIfExists", "").strip().lower() == "true"

    def create(c) -> bool:
        try:
            c.create_queue(
                engine,
                bucket_size=bucket,
                max_delivery_count=deliveries,
                repair_timeout=float(finalize or 15),
                dead_letter_queue=engine_dlq,
            )
            return True
        except QueueExistsError:
            return False
        except QueueNotFoundError:
            raise invalid(
                f"dlqName {dlq!r}: no such queue in account {account!r}; create it first", 422
            ) from None
        except ConfigError as exc:
            raise invalid(str(exc).replace(engine, name), 422) from None

    if await service.call(create, "CreateQueue"):
        return empty(201)
    if exist_error:
        raise conflict("CreateQueue", f"A queue named '{name}' already exists.")
    return empty(200)


async def get_queue(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "g", request.path_params["queue"])
    info = await queue_info(service, request, account, "getQueueDefinition")
    return json_response(definition(service, account, info))


def unacked(stats: dict) -> int:
    return int(stats["backlog"]) + int(stats["in_flight"]) + int(stats["delayed"])


async def statistics(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "g", request.path_params["queue"])
    info = await queue_info(service, request, account, "getQueueStatistics")
    stats = await service.call(lambda c: c.stats(info.name), "getQueueStatistics", info.name)
    return json_response({"size": unacked(stats)})


async def delete_queue(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "d", request.path_params["queue"])
    info = await queue_info(service, request, account, "Delete")

    def delete(c) -> None:
        try:
            c.delete_queue(info.name)
        except QueueNotFoundError:
            raise not_found_queue("Delete", request.path_params["queue"]) from None

    await service.call(delete, "Delete", info.name)
    return empty(200)


# -- messages ---------------------------------------------------------------------------------


async def put_message(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "p", request.path_params["queue"])
    if "initialInvisiblityTime" in request.query_params:
        raise ApiError(
            400,
            {
                "reason": "Error",
                "operation": "putMessage",
                "message": "initialInvisiblityTime query param is deprecated; use "
                "initialInvisibilitySeconds",
            },
        )
    delay = inputs.query_int(request, "initialInvisibilitySeconds", 0, 0, MAX_SECONDS)
    group = request.query_params.get("group")
    if group is not None:
        try:
            validate.grouped_headers(None, group, float(delay or 0))
        except ConfigError as exc:
            raise framework(400, f"query parameter 'group': {exc}") from None
    info = await queue_info(service, request, account, "putMessage")
    raw = await inputs.body(request, service.config.max_body_bytes)
    try:
        # Refused here, not in the batch: one message too large must not fail the puts it
        # would be written with.
        to_bytes(raw, info)
    except PayloadTooLargeError as exc:
        raise framework(413, str(exc)) from None
    await service.puts.put(info.name, raw, float(delay or 0), group)
    return empty(201)


def message_body(info: QueueInfo, m: Message) -> dict[str, Any]:
    return {
        "popReceipt": m.pop_receipt,
        "message": message_text(m.payload),
        "deliveryCount": max(m.delivery_count - 1, 0),
        "messageTag": message_tag(info, m.id),
        # Only a grouped message names its group: an ungrouped one keeps the original's shape.
        **({"group": m.group} if m.group is not None else {}),
    }


# How long a delivery with ``invisibilityTimeSeconds=0`` holds its message before releasing it.
MOMENT_SECONDS = 5.0


def visible_at_once(c, queue: str) -> Message | None:
    """A delivery that hides nothing (``invisibilityTimeSeconds=0``), as the original answers
    it: the message is claimed for a moment and released at once (visible to the next get, its
    delivery counted); the receipt handed out is the release's, which acks or updates the
    message while no other consumer has taken it. A release that comes too late (the moment
    ended first) changes nothing: the message was visible again already."""
    m = c.get(queue, MOMENT_SECONDS)
    if m is None or m.pop_receipt is None:
        return m
    with contextlib.suppress(StaleReceiptError):
        m.pop_receipt = c.change_visibility(queue, m.pop_receipt, 0)
    return m


async def next_message(request: Request) -> Response:
    refuse_head(request)
    service: Service = request.app.state.service
    account = await authorize(request, service, "r", request.path_params["queue"])
    vt = inputs.query_int(request, "invisibilityTimeSeconds", DEFAULT_INVISIBILITY, 0, MAX_SECONDS)
    info = await queue_info(service, request, account, "getMessage")
    if vt == 0:
        found = await service.call(lambda c: visible_at_once(c, info.name), "getMessage")
        return empty(204) if found is None else json_response(message_body(info, found))

    async def gone() -> bool:
        return await client_left(request)

    m = await service.gets.get(info.name, float(vt or 1), gone)
    if m is None:
        return empty(204)
    return json_response(message_body(info, m))


async def update_message(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "u", request.path_params["queue"])
    receipt = receipt_param(request)
    info = await queue_info(service, request, account, "updateMessage")
    raw = await inputs.body(request, service.config.max_body_bytes)
    body = inputs.object_body(raw, "the update")
    text = body.get("message")
    if text is not None and not isinstance(text, str):
        raise invalid(f"message must be a string, got {type(text).__name__}", 422)
    seconds = inputs.field_int(body, "newInvisibilitySeconds", 0, 0, MAX_SECONDS)

    def update(c) -> str | None:
        try:
            return c.change_visibility(info.name, receipt, float(seconds or 0), payload=text)
        except InvalidReceiptError:
            raise bad_receipt(receipt) from None
        except StaleReceiptError:
            return None
        except ConfigError as exc:
            raise invalid(str(exc), 422) from None

    new = await service.call(update, "UpdateMessage", info.name)
    if new is None:
        raise conflict("UpdateMessage", "Pop receipt is stale.")
    message_id = PopReceipt.decode(new).message_id
    return json_response({"popReceipt": new, "messageTag": message_tag(info, message_id)})


async def ack_message(request: Request) -> Response:
    service: Service = request.app.state.service
    account = await authorize(request, service, "a", request.path_params["queue"])
    receipt = receipt_param(request)
    info = await queue_info(service, request, account, "ackMessage")

    try:
        # Refused here, not in the batch: a receipt that is not one of this queue's is a 400.
        PopReceipt.decode(receipt).check(info, receipt)
    except InvalidReceiptError:
        raise bad_receipt(receipt) from None
    if not await service.acks.ack(info.name, receipt):
        raise conflict("AckMessage", "The message is already being reprocessed.")
    return empty(204)


ROUTES = [
    Route(PREFIX, list_queues, methods=["GET"]),
    Route(PREFIX, create_queue, methods=["POST"]),
    Route(PREFIX + "/{queue}", get_queue, methods=["GET"]),
    Route(PREFIX + "/{queue}", delete_queue, methods=["DELETE"]),
    Route(PREFIX + "/{queue}/statistics", statistics, methods=["GET"]),
    Route(PREFIX + "/{queue}/messages", put_message, methods=["POST"]),
    Route(PREFIX + "/{queue}/messages", update_message, methods=["PUT"]),
    Route(PREFIX + "/{queue}/messages", ack_message, methods=["DELETE"]),
    Route(PREFIX + "/{queue}/messages/next", next_message, methods=["GET"]),
]
