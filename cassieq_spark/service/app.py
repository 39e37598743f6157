"""The ASGI application: the routes of v1, v2 and the admin API, health and readiness,
``/metrics``, and one middleware that gives every request an id, an access-log line, its
metrics, bounded headers and an error answer of the documented shapes for anything that goes
wrong (an unexpected exception is a 500 whose body names the id it was logged under, never a
traceback).
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from contextlib import asynccontextmanager

import anyio
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Message, Receive, Scope, Send

from ..engine.store.schema import require_schema
from ..errors import QueueNotFoundError
from ..observability.logs import request_context
from ..observability.tracing import server_span, set_status_code
from . import admin, dashboard, openapi, v1, v2
from .responses import ApiError, framework, json_response, not_found_queue
from .state import Service, unavailable

log = logging.getLogger(__name__)
access = logging.getLogger("cassieq_spark.service.access")

ACCOUNT_IN_PATH = re.compile(r"/api/v\d+/accounts/([^/]+)")

MAX_HEADERS = 100
MAX_HEADER_BYTES = 32 * 1024
REQUEST_ID_RE = re.compile(r"[A-Za-z0-9._\-]{1,64}")
REQUEST_ID_KEY = "cassieq.request_id"  # the scope key of the request's id


async def health(request: Request) -> Response:
    """Alive: the process answers (no Cassandra call)."""
    return json_response({"status": "ok", "instance": request.app.state.service.instance})


async def ready(request: Request) -> Response:
    """Ready for traffic: not draining, and Cassandra answers with the schema in place."""
    service: Service = request.app.state.service
    if service.draining:
        return json_response({"status": "draining"}, 503)
    try:
        await service.blocking(require_schema, service.conn)
    except ApiError as exc:
        return json_response({"status": "unavailable", "detail": exc.body.get("detail")}, 503)
    return json_response({"status": "ready", "instance": service.instance})


async def metrics(request: Request) -> Response:
    """The registry rendered from memory (the queue stats are a background snapshot): on a
    thread of its own, never an engine thread or a pooled client. Needs the metrics or the
    admin key (``Authorization: Bearer <key>``), unless the service was started with
    ``--public-metrics``: the queue series name every account's queues."""
    service: Service = request.app.state.service
    if not service.config.public_metrics:
        admin.check_metrics(request, service)
    body = await anyio.to_thread.run_sync(service.metrics.render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


def _account_of(path: str) -> str | None:
    """The account a request's path names (for its log lines), before routing."""
    found = ACCOUNT_IN_PATH.match(path)
    return found.group(1) if found else None


def _http_error(request: Request, exc: Exception) -> Response:
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    return framework(status).response()


def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return exc.response()


def _queue_gone(request: Request, exc: Exception) -> Response:
    """A queue deleted under an engine call no route maps itself: that queue's 404."""
    queue = request.path_params.get("queue", "")
    return not_found_queue(getattr(request.scope.get("endpoint"), "__name__", ""), queue).response()


def internal_error(request: Request, exc: Exception) -> Response:
    """Any other exception: the documented JSON 500 naming the id the request is logged under
    (Starlette's outermost error middleware sends this answer, then re-raises to the
    :class:`Guard`, which logs the traceback under that id)."""
    return internal_error_response(request.scope.get(REQUEST_ID_KEY, "-"))


def internal_error_response(rid: str) -> Response:
    body = {
        "code": 500,
        "message": f"There was an error processing your request. It has been logged (ID {rid}).",
    }
    return json_response(body, 500)


def route_table() -> list[Route]:
    """Every route the service serves (the API document is built from this table)."""
    return [
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        *v1.ROUTES,
        *v2.ROUTES,
        *admin.ROUTES,
        *dashboard.ROUTES,
        *openapi.ROUTES,
    ]


def build_app(service: Service) -> Guard:
    routes = route_table()

    @asynccontextmanager
    async def lifespan(app: Starlette):
        service.start_stats()
        yield
        service.draining = True
        service.stop_stats()

    app = Starlette(
        routes=routes,
        exception_handlers={
            HTTPException: _http_error,
            ApiError: _api_error,
            QueueNotFoundError: _queue_gone,
            Exception: internal_error,
        },
        lifespan=lifespan,
    )
    app.state.service = service
    return Guard(app, service)


_UNPRINTABLE = re.compile(r"[^\x21-\x7e]")


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    return "\\x20" if ch == " " else ch.encode("unicode_escape").decode("ascii")


def printable(value: object) -> str:
    """``value`` for a log line: every character outside printable ASCII (a percent-decoded
    newline, a control character, a space) written as its escape, so what a client sends can
    never start a line or add a field."""
    return _UNPRINTABLE.sub(_escape, "-" if value is None else str(value))


# Probes are answered even past the bound on requests in progress: they are cheap and an
# orchestrator must be able to tell a busy instance from a dead one.
PROBES = frozenset({"/health", "/ready"})


class Guard:
    """The outermost layer: request id, header limits, the bound on requests in progress,
    access log, metrics, last-resort 500."""

    def __init__(self, app: Starlette, service: Service):
        self.app = app
        self.service = service
        self.state = app.state
        self.in_progress = 0

    def template(self, scope: Scope) -> str:
        for route in self.app.routes:
            match, _ = route.matches(scope)
            if match != Match.NONE:
                return getattr(route, "path", "other")
        return "unmatched"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path = scope.get("path", "")
        if len(path) > 1 and path.endswith("/"):
            # Jersey matched a route with a trailing slash too (and the signature ignores it)
            scope = {**scope, "path": path.rstrip("/") or "/"}
        headers = scope.get("headers") or []
        given = dict(headers).get(b"x-request-id", b"").decode("latin-1")
        rid = given if REQUEST_ID_RE.fullmatch(given) else secrets.token_hex(8)
        scope = {**scope, REQUEST_ID_KEY: rid}
        status = 500
        sent = False

        async def send_wrapped(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
                sent = True
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        limit = self.service.config.max_requests
        counted = scope.get("path") not in PROBES
        try:
            if counted and self.in_progress >= limit:
                self.service.metrics.shed.labels("requests").inc()
                err = unavailable(f"{limit} requests are in progress on this instance; retry")
                await err.response()(scope, receive, send_wrapped)
                counted = False
            elif (
                len(headers) > MAX_HEADERS
                or sum(len(k) + len(v) for k, v in headers) > MAX_HEADER_BYTES
            ):
                err = framework(
                    431, f"at most {MAX_HEADERS} headers and {MAX_HEADER_BYTES} bytes of them"
                )
                await err.response()(scope, receive, send_wrapped)
            else:
                if counted:
                    self.in_progress += 1
                try:
                    # The request's span and log fields, current for everything it calls.
                    with (
                        server_span(
                            scope.get("method", ""),
                            self.template(scope),
                            scope.get("path", ""),
                            {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in headers},
                        ) as span,
                        request_context(rid, _account_of(scope.get("path", ""))),
                    ):
                        try:
                            await self.app(scope, receive, send_wrapped)
                        finally:
                            set_status_code(span, status)
                finally:
                    if counted:
                        self.in_progress -= 1
        except Exception:
            log.exception(
                "request %s %s failed (ID %s)",
                printable(scope.get("method")),
                printable(scope.get("path")),
                rid,
            )
            if not sent:
                await internal_error_response(rid)(scope, receive, send_wrapped)
        finally:
            took = time.perf_counter() - started
            route = self.template(scope)
            self.service.metrics.observe(route, scope.get("method", ""), status, took)
            account = scope.get("path_params", {}).get("account", "-")
            access.info(
                "%s %s %s %d %.1fms account=%s id=%s",
                (scope.get("client") or ("-",))[0],
                printable(scope.get("method")),
                printable(scope.get("path")),
                status,
                took * 1000,
                printable(account),
                rid,
                extra={"request_id": rid, "account": account},
            )
