"""The response bodies of the API, in the original's three error shapes.

* framework errors: ``{"code": 401, "message": "HTTP 401 Unauthorized"}`` (401, 403, unknown
  route 404, 405, 413, 415, 431, 500);
* resource errors: ``{"reason": "NotFound"|"Conflict"|"Error", "operation": ..., "message":
  ..., "queueName"?: ...}`` (a missing queue, a stale receipt, a queue that exists);
* validation errors: ``{"errors": ["..."]}`` (400 for path and query values, 422 for bodies).

Every error a request can cause is one of these, as JSON; nothing answers with a traceback.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from starlette.responses import Response

JSON = "application/json"


class ApiError(Exception):
    """An error answer; raised anywhere in a handler, turned into its response by the app."""

    def __init__(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        super().__init__(f"{status} {body}")
        self.status = status
        self.body = body
        self.headers = headers or {}

    def response(self) -> Response:
        return json_response(self.body, self.status, self.headers)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
        status_code=status,
        media_type=JSON,
        headers=headers,
    )


def empty(status: int) -> Response:
    """An answer without a body and without a Content-Type, as the original's 200/201/204."""
    return Response(b"", status_code=status)


def framework(status: int, detail: str | None = None) -> ApiError:
    phrase = HTTPStatus(status).phrase
    body: dict[str, Any] = {"code": status, "message": f"HTTP {status} {phrase}"}
    if detail:
        body["detail"] = detail
    return ApiError(status, body)


def unauthorized(detail: str | None = None) -> ApiError:
    return framework(401, detail)


def forbidden(detail: str | None = None) -> ApiError:
    return framework(403, detail)


def invalid(message: str, status: int = 400) -> ApiError:
    return ApiError(status, {"errors": [message]})


def not_found_queue(operation: str, queue: str) -> ApiError:
    return ApiError(
        404,
        {
            "reason": "NotFound",
            "operation": operation,
            "message": f"The requested queue '{queue}' was not found.",
            "queueName": queue,
        },
    )


def conflict(operation: str, message: str, **extra: str) -> ApiError:
    return ApiError(
        409, {"reason": "Conflict", "operation": operation, "message": message, **extra}
    )


def error(status: int, operation: str, message: str, **extra: str) -> ApiError:
    reason = {404: "NotFound", 409: "Conflict"}.get(status, "Error")
    return ApiError(status, {"reason": reason, "operation": operation, "message": message, **extra})
