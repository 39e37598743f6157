"""Reading a request's inputs safely: bounded bodies, JSON, numbers in the query, path names.

Every refusal is an :class:`~.responses.ApiError` of the documented shapes, never a 500.
"""

from __future__ import annotations

import json
import math
from typing import Any

import anyio
from starlette.requests import Request

from . import names
from .responses import ApiError, framework, invalid

ECHO_CHARS = 80  # at most this much of a refused value comes back in an error message


def unparsable_json() -> ApiError:
    """A new error per refusal: an exception raised again keeps every earlier traceback, and
    with it every earlier body."""
    return ApiError(400, {"code": 400, "message": "Unable to process JSON"})


def echo(value: Any) -> str:
    """A refused value as an error message shows it: its ``repr``, cut to :data:`ECHO_CHARS`."""
    text = repr(value)
    return text if len(text) <= ECHO_CHARS else text[:ECHO_CHARS] + "..."


def is_whole_number(text: str) -> bool:
    """ASCII digits with an optional leading minus: what ``int`` reads as a number without
    surprises (``'²'.isdigit()`` is true and ``int('²')`` fails; ``'١٢'`` would be 12)."""
    digits = text[1:] if text.startswith("-") else text
    return digits.isascii() and digits.isdecimal()


async def body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes (read no further than that),
    and with 408 when it has not all arrived within the service's ``body_timeout``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (is_whole_number(declared) and not declared.startswith("-")):
            raise framework(400, "Content-Length is not a number")
        if int(declared) > limit:
            raise framework(413, f"the body has {declared} bytes; at most {limit} are accepted")
    chunks: list[bytes] = []
    size = 0
    timeout = request.app.state.service.config.body_timeout
    try:
        with anyio.fail_after(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise framework(
                        413, f"the body has more than {limit} bytes; at most {limit} are accepted"
                    )
                chunks.append(chunk)
    except TimeoutError:
        err = framework(408, f"the body did not arrive within {timeout:g} s")
        err.headers["Connection"] = "close"
        raise err from None
    return b"".join(chunks)


def json_body(raw: bytes, *, required: bool = True) -> Any:
    """The JSON of a body; an empty body is 422 (as the original), bad JSON 400."""
    if not raw.strip():
        if required:
            raise invalid("The request entity was empty", 422)
        return None
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise unparsable_json() from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def object_body(raw: bytes, what: str) -> dict[str, Any]:
    value = json_body(raw)
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object, got {type(value).__name__}", 422)
    return value


def query_int(request: Request, name: str, default: int | None, low: int, high: int) -> int | None:
    """A whole number from the query, from ``low`` to ``high``; 400 otherwise."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    text = raw.strip()
    if not (is_whole_number(text) and len(text) <= 12):
        raise invalid(
            f"query param {name} must be a whole number from {low} to {high}, got {echo(raw)}"
        )
    value = int(text)
    if not low <= value <= high:
        raise invalid(f"query param {name} must be from {low} to {high}, got {value}")
    return value


def field_int(
    body: dict[str, Any], name: str, default: int | None, low: int, high: int
) -> int | None:
    """A whole number field of a JSON body (``2`` or ``2.0``, not ``true`` or ``"2"``); 422."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise invalid(f"{name} must be a whole number from {low} to {high}, got {echo(value)}", 422)
    return value


def field_str(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string, got {type(value).__name__}", 422)
    return value.strip()


def check_account(name: str) -> None:
    if not names.account_ok(name):
        raise invalid(
            f'path param accountName  value "{name[:80]}" doesn\'t match the expected pattern. '
            '"[A-Za-z0-9][A-Za-z0-9_\\-]{0,63}"'
        )


def check_queue(account: str, name: str, where: str = "path param queueName") -> None:
    if not names.queue_ok(account, name):
        raise invalid(
            f'{where}  value "{name[:80]}" doesn\'t match the expected pattern. '
            f'"{names.ORIGINAL_PATTERN}" (and account + "." + queue at most 200 characters)',
            400 if where.startswith("path") else 422,
        )
