"""What an operator scrapes and traces: Prometheus metrics and W3C trace context.

:mod:`.queue_metrics` (every queue's backlog, in flight, delayed, oldest age, dead letters,
lost ranges and totals, collected from the engine's stats at a bounded cost; the same collector
serves ``cassieq exporter`` and ``cassieq serve``'s ``/metrics``), :mod:`.exporter` (an HTTP
``/metrics`` endpoint in any process: the ``cassieq exporter`` command, or a Spark driver that
also exports its streams' lag), :mod:`.client_metrics` (``QueueClient`` operation counters and
latencies, off until enabled), :mod:`.lag_metrics` (the lag listener's gauges), :mod:`.trace`
(``traceparent`` carried in message headers). ``prometheus_client`` (extra ``[metrics]``) and
the OpenTelemetry API (extra ``[otel]``) are imported only when a feature that needs them is
used: without them the client works as before, at no cost.
"""

from __future__ import annotations

from .client_metrics import client_metrics_enabled, disable_client_metrics, enable_client_metrics
from .trace import TRACEPARENT, trace_context_of, with_trace_context

__all__ = [
    "TRACEPARENT",
    "client_metrics_enabled",
    "disable_client_metrics",
    "enable_client_metrics",
    "trace_context_of",
    "with_trace_context",
]
