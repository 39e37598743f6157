"""One OpenAPI 3.1 document for the whole service: the v1 routes, v2, the admin API, health,
readiness, metrics and the dashboard; ``GET /openapi.json`` serves it and ``GET /docs`` renders
it as a page (``/api/v2/openapi.json`` and ``/api/v2/docs`` are the same).

The document is built from the route table: each route's methods are looked up in
:data:`OPERATIONS` (v1, admin, the rest) or in v2's own description, and a route without a
description, or a description without a route, is an error when the document is built. So the
document cannot drift from what the service serves (``tests/unit`` builds it from the app's
routes).

Every operation documents its error answers as ``default``: one of the three error shapes of
:mod:`.responses`, so a client (or a fuzzer) can check any error body against the document.
"""

from __future__ import annotations

import html
import json
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from ..validate import MAX_DELIVERY_COUNT
from . import v2
from .responses import json_response

V1 = "/api/v1/accounts/{account}/queues"
ADMIN = "/admin/api/v1"
ACCOUNT_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_\\-]{0,63}$"
QUEUE_PATTERN = "^[a-zA-Z_\\-0-9.]+$"

FRAMEWORK_ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "integer"},
        "message": {"type": "string"},
        "detail": {"type": "string"},
    },
}
RESOURCE_ERROR = {
    "type": "object",
    "required": ["reason", "operation", "message"],
    "properties": {
        "reason": {"enum": ["NotFound", "Conflict", "Error"]},
        "operation": {"type": "string"},
        "message": {"type": "string"},
        "queueName": {"type": "string"},
    },
}
VALIDATION_ERROR = {
    "type": "object",
    "required": ["errors"],
    "properties": {"errors": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
    "additionalProperties": False,
}
ERROR = {
    "description": "an error: {code, message, detail?} (401, 403, unknown route 404, 405, 408, "
    "413, 429 after failed admin or metrics keys, 431, 500 naming its log id, 503 with "
    "Retry-After), {reason, operation, message, "
    "queueName?} (a missing queue 404, 409) or {errors: [...]} (400 path/query, 422 body)",
    "content": {
        "application/json": {
            "schema": {"anyOf": [FRAMEWORK_ERROR, RESOURCE_ERROR, VALIDATION_ERROR]}
        }
    },
}


def _json(schema: dict[str, Any] | None = None, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema or {}}}}


def _empty(description: str) -> dict[str, Any]:
    return {"description": description}


def _path(name: str, pattern: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "schema": {"type": "string", "pattern": pattern},
    }


def _query(name: str, schema: dict[str, Any], what: str, required: bool = False) -> dict:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": what,
    }


def _seconds(name: str, low: int, high: int, what: str) -> dict:
    return _query(name, {"type": "integer", "minimum": low, "maximum": high}, what)


def _body(schema: dict[str, Any], media: str = "application/json") -> dict[str, Any]:
    return {"required": True, "content": {media: {"schema": schema}}}


ACCOUNT = _path("account", ACCOUNT_PATTERN)
QUEUE = _path("queue", QUEUE_PATTERN)
RECEIPT = _query("popReceipt", {"type": "string"}, "the pop receipt of the delivery", True)
MAX_SECONDS = 12 * 3600
DEFINITION = {
    "type": "object",
    "required": ["accountName", "queueName", "bucketSize", "maxDeliveryCount"],
    "properties": {
        "accountName": {"type": "string"},
        "queueName": {"type": "string"},
        "bucketSize": {"type": "integer"},
        "maxDeliveryCount": {"type": "integer"},
        "dlqName": {"type": ["string", "null"]},
    },
}
ACCOUNT_KEYS = {
    "type": "object",
    "required": ["accountName", "keys"],
    "properties": {
        "accountName": {"type": "string"},
        "keys": {"type": "object", "additionalProperties": {"type": "string"}},
    },
}
ACCOUNT_LISTED = {
    "type": "object",
    "required": ["accountName", "keyNames"],
    "properties": {
        "accountName": {"type": "string"},
        "keyNames": {"type": "array", "items": {"type": "string"}},
    },
}
V1_MESSAGE = {
    "type": "object",
    "required": ["popReceipt", "message", "deliveryCount", "messageTag"],
    "properties": {
        "popReceipt": {"type": "string"},
        "message": {"type": "string"},
        "deliveryCount": {"type": "integer", "minimum": 0},
        "messageTag": {"type": "string"},
        "group": {"type": "string"},
    },
}

# (method, path) -> (summary, auth level or who may call it, operation fields)
OPERATIONS: dict[tuple[str, str], tuple[str, str, dict[str, Any]]] = {
    ("get", "/health"): ("Alive: the process answers (no Cassandra call)", "none", {}),
    ("get", "/ready"): (
        "Ready for traffic: 503 while draining or when Cassandra does not answer",
        "none",
        {"responses": {"200": _json(), "503": _json(description="not ready")}},
    ),
    ("get", "/metrics"): (
        "Prometheus metrics of this instance (queue stats from a background snapshot)",
        "none",
        {"responses": {"200": {"description": "OK", "content": {"text/plain": {}}}}},
    ),
    ("get", "/openapi.json"): ("This document", "none", {}),
    ("get", "/docs"): (
        "This document as a page",
        "none",
        {"responses": {"200": {"description": "OK", "content": {"text/html": {}}}}},
    ),
    ("get", "/api/v2/openapi.json"): ("This document (its v2 address)", "none", {}),
    ("get", "/api/v2/docs"): (
        "This document as a page (its v2 address)",
        "none",
        {"responses": {"200": {"description": "OK", "content": {"text/html": {}}}}},
    ),
    ("get", "/dashboard"): (
        "The queue dashboard page (it asks for the admin key)",
        "none",
        {"responses": {"200": {"description": "OK", "content": {"text/html": {}}}}},
    ),
    ("get", "/dashboard/queues"): ("Every queue's stats (the dashboard's data)", "admin", {}),
    ("get", V1): (
        "The account's queues",
        "g",
        {
            "parameters": [ACCOUNT],
            "responses": {"200": _json({"type": "array", "items": DEFINITION})},
        },
    ),
    ("post", V1): (
        "Create a queue (200: it exists; 409 with errorIfExists=true)",
        "c",
        {
            "parameters": [
                ACCOUNT,
                _query("errorIfExists", {"type": "string"}, "true: 409 when it exists"),
            ],
            "requestBody": _body(
                {
                    "type": "object",
                    "required": ["queueName"],
                    "properties": {
                        "queueName": {"type": "string"},
                        "bucketSize": {"type": "integer", "minimum": 1, "maximum": 100_000},
                        "maxDeliveryCount": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": MAX_DELIVERY_COUNT,
                        },
                        "repairWorkerPollSeconds": {"type": "integer"},
                        "repairWorkerBucketFinalizeTimeSeconds": {"type": "integer"},
                        "deleteBucketsAfterFinalize": {"type": "boolean"},
                        "dlqName": {"type": "string"},
                    },
                }
            ),
            "responses": {"200": _empty("it exists"), "201": _empty("created")},
        },
    ),
    ("get", V1 + "/{queue}"): (
        "The queue's definition",
        "g",
        {"parameters": [ACCOUNT, QUEUE], "responses": {"200": _json(DEFINITION)}},
    ),
    ("delete", V1 + "/{queue}"): (
        "Delete the queue and its messages",
        "d",
        {"parameters": [ACCOUNT, QUEUE], "responses": {"200": _empty("deleted")}},
    ),
    ("get", V1 + "/{queue}/statistics"): (
        "The number of unacked messages",
        "g",
        {
            "parameters": [ACCOUNT, QUEUE],
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "required": ["size"],
                        "properties": {"size": {"type": "integer"}},
                    }
                )
            },
        },
    ),
    ("post", V1 + "/{queue}/messages"): (
        "Put one message: the body, any content type, is the message",
        "p",
        {
            "parameters": [
                ACCOUNT,
                QUEUE,
                _seconds("initialInvisibilitySeconds", 0, MAX_SECONDS, "a delay"),
                _query("group", {"type": "string"}, "its message group (no delay with it)"),
            ],
            "requestBody": _body({"type": "string"}, "text/plain"),
            "responses": {"201": _empty("written")},
        },
    ),
    ("put", V1 + "/{queue}/messages"): (
        "Change a delivery's visibility (and message)",
        "u",
        {
            "parameters": [ACCOUNT, QUEUE, RECEIPT],
            "requestBody": _body(
                {
                    "type": "object",
                    "properties": {
                        "message": {"type": "string"},
                        "newInvisibilitySeconds": {
                            "type": "integer",
                            "minimum": 0,
                            "maximum": MAX_SECONDS,
                        },
                    },
                }
            ),
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "required": ["popReceipt", "messageTag"],
                        "properties": {
                            "popReceipt": {"type": "string"},
                            "messageTag": {"type": "string"},
                        },
                    }
                )
            },
        },
    ),
    ("delete", V1 + "/{queue}/messages"): (
        "Ack a delivery (409: already redelivered or acked)",
        "a",
        {"parameters": [ACCOUNT, QUEUE, RECEIPT], "responses": {"204": _empty("acked")}},
    ),
    ("get", V1 + "/{queue}/messages/next"): (
        "Claim the next message (204: none visible); HEAD is 405",
        "r",
        {
            "parameters": [
                ACCOUNT,
                QUEUE,
                _seconds("invisibilityTimeSeconds", 1, MAX_SECONDS, "default 30"),
            ],
            "responses": {"200": _json(V1_MESSAGE), "204": _empty("no message visible")},
        },
    ),
    ("post", ADMIN + "/accounts"): (
        "Create an account (body: its name, or {accountName, adoptQueues?}); its keys are "
        "shown here only; 409 while queues of the name remain, unless adoptQueues",
        "admin",
        {
            "requestBody": _body(
                {
                    "anyOf": [
                        {"type": "string"},
                        {
                            "type": "object",
                            "properties": {
                                "accountName": {"type": "string"},
                                "adoptQueues": {"type": "boolean"},
                            },
                        },
                    ]
                }
            ),
            "responses": {"201": _json(ACCOUNT_KEYS)},
        },
    ),
    ("get", ADMIN + "/accounts"): (
        "Every account with its key names (keys are shown once, when made)",
        "admin",
        {"responses": {"200": _json({"type": "array", "items": ACCOUNT_LISTED})}},
    ),
    ("get", ADMIN + "/accounts/{account}"): (
        "An account with its key names",
        "admin",
        {"parameters": [ACCOUNT], "responses": {"200": _json(ACCOUNT_LISTED)}},
    ),
    ("delete", ADMIN + "/accounts/{account}"): (
        "Delete an account: its keys, its queues, then the account (or the queues a deleted "
        "account of the name left)",
        "admin",
        {"parameters": [ACCOUNT], "responses": {"204": _empty("deleted")}},
    ),
    ("post", ADMIN + "/accounts/{account}/keys"): (
        "Add a key to an account",
        "admin",
        {
            "parameters": [ACCOUNT],
            "requestBody": _body(
                {
                    "type": "object",
                    "required": ["keyName"],
                    "properties": {"keyName": {"type": "string"}},
                }
            ),
            "responses": {"201": _json(description="the new key")},
        },
    ),
    ("delete", ADMIN + "/accounts/{account}/keys/{key}"): (
        "Delete a key of an account",
        "admin",
        {
            "parameters": [ACCOUNT, _path("key", "^[a-zA-Z_\\-0-9.]{1,64}$")],
            "responses": {"204": _empty("deleted")},
        },
    ),
    ("get", ADMIN + "/permissions/supportedAuthorizationLevels"): (
        "The levels a signed URL can hold",
        "admin",
        {"responses": {"200": _json({"type": "array"})}},
    ),
    ("post", ADMIN + "/permissions"): (
        "Sign a query string granting levels (optionally one queue, a time window)",
        "admin",
        {
            "requestBody": _body(
                {
                    "type": "object",
                    "properties": {
                        "accountName": {"type": "string"},
                        "keyName": {"type": "string"},
                        "levels": {"type": "array", "items": {"type": "string"}},
                        "startTime": {"type": "string"},
                        "endTime": {"type": "string"},
                        "queueName": {"type": "string"},
                    },
                }
            ),
            "responses": {
                "201": _json(
                    {
                        "type": "object",
                        "required": ["queryParam"],
                        "properties": {"queryParam": {"type": "string"}},
                    }
                )
            },
        },
    ),
}

LEVELS = {
    "none": "No credentials.",
    "admin": "The admin key: `Authorization: Key <admin key>`.",
}


def operation_id(method: str, path: str) -> str:
    """A stable id of an operation, from its method and path template."""
    words = [w.strip("{}") for w in path.strip("/").split("/") if w]
    return "_".join([method, *words]).replace(".", "_").replace("-", "_")


V2 = "/api/v2/accounts/{account}/queues/{queue}"
SAME_QUEUE = {"account": "$request.path.account", "queue": "$request.path.queue"}
# What a client does next with a delivery: links from the routes that claim to those that take
# a pop receipt (a stateful fuzzer follows them).
LINKS: dict[tuple[str, str], dict[str, Any]] = {
    ("get", V1 + "/{queue}/messages/next"): {
        "Ack": {
            "operationId": operation_id("delete", V1 + "/{queue}/messages"),
            "parameters": {**SAME_QUEUE, "popReceipt": "$response.body#/popReceipt"},
        },
        "Update": {
            "operationId": operation_id("put", V1 + "/{queue}/messages"),
            "parameters": {**SAME_QUEUE, "popReceipt": "$response.body#/popReceipt"},
        },
    },
    ("get", V2 + "/messages"): {
        "AckAll": {
            "operationId": operation_id("post", V2 + "/messages/ack"),
            "parameters": SAME_QUEUE,
            "requestBody": {"popReceipts": ["$response.body#/messages/0/popReceipt"]},
        },
        "Release": {
            "operationId": operation_id("post", V2 + "/messages/visibility"),
            "parameters": SAME_QUEUE,
            "requestBody": {
                "entries": [
                    {
                        "popReceipt": "$response.body#/messages/0/popReceipt",
                        "invisibilitySeconds": 0,
                    }
                ]
            },
        },
    },
}


def _operation(method: str, path: str) -> dict[str, Any]:
    op = _described(method, path)
    op["operationId"] = operation_id(method, path)
    links = LINKS.get((method, path))
    if links:
        op["responses"]["200"] = {**op["responses"]["200"], "links": links}
    return op


def _described(method: str, path: str) -> dict[str, Any]:
    if (method, path) in OPERATIONS:
        summary, level, fields = OPERATIONS[(method, path)]
        op: dict[str, Any] = {
            "summary": summary,
            "description": LEVELS.get(
                level, f"Auth level `{level}` (Key and Signed headers hold every level)."
            ),
            **{k: v for k, v in fields.items() if k != "responses"},
        }
        op["responses"] = {**fields.get("responses", {"200": _json()}), "default": ERROR}
        if level == "none":
            op["security"] = []
        elif level == "admin":
            op["security"] = [{"adminKey": []}]
        return op
    v2_ops = v2.openapi()["paths"].get(path, {})
    if method not in v2_ops:
        raise LookupError(f"route {method.upper()} {path} has no description in the API document")
    op = dict(v2_ops[method])
    op["parameters"] = [ACCOUNT, QUEUE] + [p for p in op["parameters"] if p["in"] != "path"]
    op["responses"] = {
        **{k: v for k, v in op["responses"].items() if k[0] == "2"},
        "default": ERROR,
    }
    return op


def document(routes: list[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI document of ``routes`` (the app's route table); ``LookupError`` when a route
    has no description or a description names no route."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted(m.lower() for m in route.methods or () if m != "HEAD"):
            paths.setdefault(route.path, {})[method] = _operation(method, route.path)
    served = {(m, p) for p, ops in paths.items() for m in ops}
    described = set(OPERATIONS) | {(m, p) for p, ops in v2.openapi()["paths"].items() for m in ops}
    unserved = sorted(described - served)
    if unserved:
        raise LookupError(f"described in the API document but not served: {unserved}")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "cassieq HTTP API",
            "version": "2",
            "description": "The CassieQ REST API v1, the batch API v2 and the admin API "
            "(docs/service.md, docs/service-api-v2.md).",
        },
        "components": {
            "securitySchemes": {
                "key": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`Key <account key>` or `Signed <signature>` with "
                    "X-Cassieq-Request-Time",
                },
                "signedUrl": {
                    "type": "apiKey",
                    "in": "query",
                    "name": "sig",
                    "description": "a signed URL: auth, sig, optional st, et, q",
                },
                "adminKey": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "`Key <admin key>`",
                },
            }
        },
        "security": [{"key": []}, {"signedUrl": []}],
        "paths": paths,
    }


async def openapi_json(request: Request) -> Response:
    return json_response(document(request.app.routes))


async def docs(request: Request) -> Response:
    doc = document(request.app.routes)
    rows = []
    for path, ops in doc["paths"].items():
        for method, spec in ops.items():
            params = ", ".join(p["name"] for p in spec.get("parameters", []) if p["in"] == "query")
            rows.append(
                f"<tr><td>{method.upper()}</td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(spec['summary'])}</td>"
                f"<td>{html.escape(spec['description'])}</td><td>{html.escape(params)}</td></tr>"
            )
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>cassieq API</title>"
        "</head><body><h1>cassieq HTTP API</h1><p>The machine-readable description: "
        "<a href='/openapi.json'>/openapi.json</a> (OpenAPI 3.1).</p>"
        "<table border='1' cellpadding='4'><tr><th>method</th><th>path</th><th>what</th>"
        "<th>auth</th><th>query</th></tr>"
        + "".join(rows)
        + "</table><pre id='openapi' hidden>"
        + html.escape(json.dumps(doc))
        + "</pre></body></html>"
    )
    return HTMLResponse(page)


ROUTES = [
    Route("/openapi.json", openapi_json, methods=["GET"]),
    Route("/docs", docs, methods=["GET"]),
    Route("/api/v2/openapi.json", openapi_json, methods=["GET"]),
    Route("/api/v2/docs", docs, methods=["GET"]),
]
