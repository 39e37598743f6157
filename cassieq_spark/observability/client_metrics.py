"""``QueueClient`` operation counters and latency histograms, off until enabled.

``enable_client_metrics()`` (needs ``prometheus_client``, extra ``[metrics]``) makes every
client in the process count its operations in a registry (the process's default one unless
given); until then the client's methods run as they would without this module (one global
read per call, and ``prometheus_client`` is never imported).

* ``cassieq_client_operations_total{operation, outcome}``: ``outcome`` is ``ok`` or
  ``error`` (bounded labels: never an exception's text);
* ``cassieq_client_operation_seconds{operation}`` (a histogram).

``operation`` is the client method's name (``put``, ``get_many``, ``ack``, ...). A method that
calls another (``put`` calls ``put_many``) is counted once, under the name the caller used.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from ..engine.store.suspend import CallLocal
from ..extras import require

P = ParamSpec("P")
R = TypeVar("R")

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)


class ClientMetrics:
    def __init__(self, registry: Any = None) -> None:
        prometheus_client = require("Prometheus metrics")
        registry = registry if registry is not None else prometheus_client.REGISTRY
        self.registry = registry
        self.operations = prometheus_client.Counter(
            "cassieq_client_operations",
            "QueueClient operations by method and outcome (ok, error)",
            ["operation", "outcome"],
            registry=registry,
        )
        self.latency = prometheus_client.Histogram(
            "cassieq_client_operation_seconds",
            "QueueClient operation latency by method",
            ["operation"],
            buckets=BUCKETS,
            registry=registry,
        )

    def observe(self, operation: str, seconds: float, ok: bool) -> None:
        self.operations.labels(operation, "ok" if ok else "error").inc()
        self.latency.labels(operation).observe(seconds)


_enabled: ClientMetrics | None = None
_by_registry: dict[int, ClientMetrics] = {}


# Inside a timed call (per call: per thread, or per operation under the asyncio client, where
# many share one thread): nested calls are not counted again.
_depth = CallLocal()
_lock = threading.Lock()


def enable_client_metrics(registry: Any = None) -> ClientMetrics:
    """Count every ``QueueClient`` operation of this process in ``registry`` (default: the
    process's default registry, what ``prometheus_client.start_http_server`` and
    :func:`cassieq_spark.observability.exporter.start_exporter` serve). Idempotent per
    registry."""
    global _enabled
    with _lock:
        key = id(registry)
        metrics = _by_registry.get(key)
        if metrics is None:
            metrics = ClientMetrics(registry)
            _by_registry[key] = metrics
        _enabled = metrics
        return metrics


def disable_client_metrics() -> None:
    """Stop counting (the registered metrics keep their values)."""
    global _enabled
    _enabled = None


def client_metrics_enabled() -> bool:
    return _enabled is not None


def timed(operation: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Count and time the decorated client method as ``operation`` while metrics are on."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            metrics = _enabled
            depth = _depth.get()
            if metrics is None or depth.get("active"):
                return fn(*args, **kwargs)
            depth["active"] = True
            t0 = time.perf_counter()
            ok = False
            try:
                result = fn(*args, **kwargs)
                ok = True
                return result
            finally:
                depth["active"] = False
                metrics.observe(operation, time.perf_counter() - t0, ok)

        return inner

    return wrap
