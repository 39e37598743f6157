"""OpenTelemetry spans of producers, consumers and the service, where the API is installed.

With ``opentelemetry-api`` (extra ``[otel]``) and an SDK configured by the application:

* a put (``put``, ``put_many``, ``put_batch``) is a PRODUCER span ``send <queue>``, and each
  message carries that span's context in its headers (``trace.py``: the global propagator,
  so ``OTEL_PROPAGATORS`` decides the format: W3C trace context and baggage by default, B3 or
  others when configured);
* a receive (``get``, ``get_many``) is a CONSUMER span ``receive <queue>`` with a link to the
  context each message carries: the producer's span, one link a message (the messaging
  conventions link batch receives rather than parent them, a batch having many producers);
* an ack (``ack``, ``ack_many``) is a CLIENT span ``ack <queue>`` (operation type settle);
* every HTTP request to ``cassieq serve`` is a SERVER span ``<METHOD> <route>``, a child of
  the caller's context from the request headers; the engine calls it makes are its children
  (a v2 put's producer span too, so the request's trace goes on in the message).

The attributes are the messaging conventions' (``messaging.system = "cassieq"``,
``messaging.destination.name``, ``messaging.operation.name``/``type``,
``messaging.batch.message_count``) and HTTP's (``http.request.method``, ``http.route``,
``http.response.status_code``). Without the API every function here is a no-op costing a
check of a cached import; with the API and no SDK, the API's no-op spans keep the caller's
context, so a put inside a caller's span still carries it.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = [
    "MESSAGING_SYSTEM",
    "TRACER_NAME",
    "consumer_span",
    "producer_span",
    "server_span",
    "settle_span",
    "traced",
    "use_tracer_provider",
]

TRACER_NAME = "cassieq_spark"
MESSAGING_SYSTEM = "cassieq"

_UNSET = object()
_api: Any = _UNSET
_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Send this library's spans to ``provider`` (an SDK ``TracerProvider``) instead of the
    global one; None: the global one again. For applications that keep several providers,
    and for tests."""
    global _provider
    _provider = provider


def _tracer(api: Any) -> Any:
    return api.get_tracer(TRACER_NAME, tracer_provider=_provider)


def _otel() -> Any:
    """``opentelemetry.trace`` or None without the API."""
    global _api
    if _api is _UNSET:
        try:
            _api = importlib.import_module("opentelemetry.trace")
        except ImportError:
            _api = None
    return _api


def _attributes(queue: str, operation: str, kind: str, count: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.name": operation,
        "messaging.operation.type": kind,
    }
    if count is not None:
        out["messaging.batch.message_count"] = count
    return out


@contextlib.contextmanager
def _messaging_span(
    queue: str, operation: str, kind: str, span_kind: str, count: int | None
) -> Iterator[Any]:
    """The current span ``<operation> <queue>`` of SpanKind ``span_kind`` with the messaging
    attributes; yields None without the API."""
    api = _otel()
    if api is None:
        yield None
        return
    tracer = _tracer(api)
    with tracer.start_as_current_span(
        f"{operation} {queue}",
        kind=getattr(api.SpanKind, span_kind),
        attributes=_attributes(queue, operation, kind, count),
    ) as span:
        yield span


@contextlib.contextmanager
def producer_span(queue: str, count: int | None = None) -> Iterator[Any]:
    """The span of one put of ``count`` messages (None: not known yet; set
    ``messaging.batch.message_count`` on the span yielded)."""
    with _messaging_span(queue, "send", "send", "PRODUCER", count) as span:
        yield span


@contextlib.contextmanager
def settle_span(queue: str, count: int | None = None) -> Iterator[Any]:
    """The span of acking ``count`` messages."""
    with _messaging_span(queue, "ack", "settle", "CLIENT", count) as span:
        yield span


def receive_started() -> int:
    """The start of a receive, for :func:`consumer_span` (nanoseconds since the epoch)."""
    return time.time_ns()


def consumer_span(queue: str, messages: Sequence[Any], started: int) -> None:
    """Record a receive that began at ``started`` (:func:`receive_started`) and returned
    ``messages`` (each with ``headers`` and ``id``): a CONSUMER span linked to each message's
    producer context. Made once the messages are in hand, back-dated to the receive's start;
    the headers are read only when the span is recorded (an SDK is set up)."""
    api = _otel()
    if api is None:
        return
    attributes = _attributes(queue, "receive", "receive", len(messages))
    if len(messages) == 1:
        attributes["messaging.message.id"] = str(messages[0].id)
    span = _tracer(api).start_span(
        f"receive {queue}",
        kind=api.SpanKind.CONSUMER,
        attributes=attributes,
        start_time=started,
    )
    if span.is_recording():  # no headers read for a span nobody records
        from .trace import context_of_headers

        for m in messages:
            ctx = context_of_headers(m.headers)
            if ctx is None:
                continue
            span_context = api.get_current_span(ctx).get_span_context()
            if span_context.is_valid:
                span.add_link(span_context, {"messaging.message.id": str(m.id)})
    span.end()


@contextlib.contextmanager
def server_span(method: str, route: str, path: str, headers: Mapping[str, str]) -> Iterator[Any]:
    """The SERVER span of one HTTP request, a child of the caller's context in ``headers``
    (lower-case names), current while the request is answered."""
    api = _otel()
    if api is None:
        yield None
        return
    from .trace import context_of_headers

    parent = context_of_headers(headers)
    tracer = _tracer(api)
    with tracer.start_as_current_span(
        f"{method} {route}",
        context=parent,
        kind=api.SpanKind.SERVER,
        attributes={"http.request.method": method, "http.route": route, "url.path": path},
    ) as span:
        yield span


def set_status_code(span: Any, status: int) -> None:
    """The response's status on a server span; 5xx marks the span as an error."""
    api = _otel()
    if api is None or span is None:
        return
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(api.Status(api.StatusCode.ERROR))


def traced(operation: str) -> Any:
    """A client method ``(self, queue, ...)`` made a span: ``send`` (a put: PRODUCER, current
    while the method runs, so the messages carry it; it returns the ids), ``receive`` (a
    get: CONSUMER, linked to what it returns: a message, None or a list) or ``ack`` (CLIENT;
    it returns one result or a list of them)."""

    def wrap(fn: Any) -> Any:
        import functools

        @functools.wraps(fn)
        def method(self: Any, queue: str, *args: Any, **kwargs: Any) -> Any:
            if _otel() is None:
                return fn(self, queue, *args, **kwargs)
            if operation == "receive":
                started = receive_started()
                got = fn(self, queue, *args, **kwargs)
                messages = got if isinstance(got, list) else ([] if got is None else [got])
                consumer_span(queue, messages, started)
                return got
            span_of = producer_span if operation == "send" else settle_span
            with span_of(queue, None) as span:
                out = fn(self, queue, *args, **kwargs)
                span.set_attribute(
                    "messaging.batch.message_count", len(out) if isinstance(out, list) else 1
                )
                return out

        return method

    return wrap
