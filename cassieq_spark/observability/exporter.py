"""An HTTP ``/metrics`` endpoint for Prometheus in any process.

``cassieq exporter`` runs one as a process of its own: every queue's metrics
(:mod:`.queue_metrics`). In a Spark driver, ``start_exporter(port)`` serves the lag
listener's gauges (:mod:`.lag_metrics`) and the client's metrics when enabled, with the queues'
too when given a client. It serves the process's default registry (with Python's process and
garbage-collector metrics), so one scrape target per process covers all of them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ..extras import require
from .queue_metrics import (
    DEFAULT_MAX_QUEUES,
    DEFAULT_REFRESH_SECONDS,
    QueueCollector,
    QueueStatsCache,
    client_source,
)

log = logging.getLogger(__name__)

DEFAULT_PORT = 9464
DEFAULT_HOST = "127.0.0.1"


@dataclass
class Exporter:
    """A running endpoint: ``port`` (the one bound, also when 0 asked for any), ``stop()``."""

    host: str
    port: int
    server: Any
    thread: Any
    registry: Any
    collector: QueueCollector | None

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self.collector is not None:
            self.registry.unregister(self.collector)


def start_exporter(
    port: int = DEFAULT_PORT,
    host: str = DEFAULT_HOST,
    client: Any = None,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    max_queues: int = DEFAULT_MAX_QUEUES,
    registry: Any = None,
) -> Exporter:
    """Serve ``registry`` (default: the process's) on ``http://host:port/metrics`` from a
    daemon thread. With ``client`` (a ``QueueClient``), every queue's metrics are collected
    through it, at most once per ``refresh_seconds`` over at most ``max_queues`` queues."""
    prometheus_client = require("Prometheus metrics")
    reg = registry if registry is not None else prometheus_client.REGISTRY
    collector = None
    if client is not None:
        cache = QueueStatsCache(client_source(client), refresh_seconds, max_queues)
        collector = QueueCollector(cache)
        reg.register(collector)
    try:
        server, thread = prometheus_client.start_http_server(port, addr=host, registry=reg)
    except OSError:
        if collector is not None:
            reg.unregister(collector)
        raise
    bound = server.server_address[1]
    log.info("serving metrics on http://%s:%d/metrics", host, bound)
    return Exporter(host, bound, server, thread, reg, collector)
