"""W3C trace context carried in message headers, from producer to consumer.

A producer that runs inside a trace (an OpenTelemetry span is current) gets that span's context
in each message it puts, as header ``traceparent`` (and ``tracestate`` when the span has one),
unless the caller set ``traceparent`` itself: the caller's value is kept as it is. A consumer
reads the header back (``message.headers["traceparent"]``, the source's ``headers`` column) and
can continue the trace with :func:`trace_context_of`. Nothing is added without the OpenTelemetry
API (extra ``[otel]``) or outside a span; the header then travels only when the producer puts it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_UNSET = object()
_propagator: Any = _UNSET


def _otel() -> Any:
    """The W3C trace-context propagator of the OpenTelemetry API, or None without it."""
    global _propagator
    if _propagator is _UNSET:
        try:
            module = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
            _propagator = module.TraceContextTextMapPropagator()
        except ImportError:
            _propagator = None
    return _propagator


def current_trace_headers() -> dict[str, str]:
    """``traceparent`` (and ``tracestate``) of the current span; empty outside a valid span or
    without the OpenTelemetry API."""
    propagator = _otel()
    if propagator is None:
        return {}
    carrier: dict[str, str] = {}
    propagator.inject(carrier)
    return {k: v for k, v in carrier.items() if k in (TRACEPARENT, TRACESTATE)}


def with_trace_context(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    """``headers`` with the current span's context added, unless they carry a ``traceparent``
    already (then unchanged). None stays None when there is nothing to add."""
    if headers is not None and TRACEPARENT in headers:
        return dict(headers)
    extra = current_trace_headers()
    if not extra:
        return None if headers is None else dict(headers)
    return {**(headers or {}), **extra}


def trace_context_of(headers: Mapping[str, str] | None) -> Any:
    """An OpenTelemetry ``Context`` with the span a message's headers name as parent (pass it
    as ``context=`` to ``tracer.start_as_current_span``); None without the API or the header."""
    propagator = _otel()
    if propagator is None or not headers or TRACEPARENT not in headers:
        return None
    return propagator.extract(dict(headers))
