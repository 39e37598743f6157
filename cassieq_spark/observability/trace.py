"""Trace context carried in message headers, from producer to consumer.

A producer that runs inside a trace (an OpenTelemetry span is current) gets that span's context
in each message it puts, in the headers the global propagator writes: ``OTEL_PROPAGATORS``
chooses them (by default W3C ``traceparent``, ``tracestate`` when the span has one, and
``baggage`` when there is any; ``b3`` or others when configured), unless the caller set
``traceparent`` itself: the caller's headers are then kept as they are. A consumer reads the
headers back (``message.headers``, the source's ``headers`` column) and can continue the trace
with :func:`trace_context_of`. Nothing is added without the OpenTelemetry API (extra
``[otel]``) or outside a span; the headers then travel only when the producer puts them.
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
    """``opentelemetry.propagate`` (its global propagator, set from ``OTEL_PROPAGATORS`` or by
    the application), or None without the OpenTelemetry API."""
    global _propagator
    if _propagator is _UNSET:
        try:
            _propagator = importlib.import_module("opentelemetry.propagate")
        except ImportError:
            _propagator = None
    return _propagator


def current_trace_headers() -> dict[str, str]:
    """The headers the global propagator writes for the current context (``traceparent``,
    ``tracestate``, ``baggage`` by default); empty outside a valid span and without baggage,
    or without the OpenTelemetry API."""
    propagate = _otel()
    if propagate is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if isinstance(v, str)}


def context_of_headers(headers: Mapping[str, str] | None) -> Any:
    """The context the global propagator reads from ``headers``; None without the API or
    when none of the propagator's headers is there."""
    propagate = _otel()
    if propagate is None or not headers:
        return None
    fields = propagate.get_global_textmap().fields
    if not any(f in headers for f in fields):
        return None
    return propagate.extract(dict(headers))


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
    as ``context=`` to ``tracer.start_as_current_span``), and their baggage; None without the
    API or without any of the propagator's headers."""
    return context_of_headers(headers)
