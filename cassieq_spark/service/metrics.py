"""Prometheus metrics of one instance, in a registry of its own (``GET /metrics``).

* ``cassieq_http_requests_total{route, method, status}`` and
  ``cassieq_http_request_seconds{route, method}`` (a histogram): ``route`` is the route's
  template (``/api/v1/accounts/{account}/queues/{queue}/messages``), never the raw path, so
  the label set stays bounded whatever clients send;
* every queue's metrics (``cassieq_queue_backlog{queue}``, ``cassieq_queue_in_flight{queue}``,
  ``cassieq_queue_oldest_age_seconds{queue}``, ...): the collector ``cassieq exporter`` uses
  (:mod:`cassieq_spark.observability.queue_metrics`), refreshed at most every
  :data:`QUEUE_STATS_SECONDS` by a scrape over at most :data:`MAX_QUEUES` queues (a stats pass
  reads the live buckets of each queue);
* ``cassieq_repair_lease_held`` (1 while this instance holds the repair lease, else 0) and
  ``cassieq_repair_passes_total`` (repair passes this instance finished): with ``--repair`` on
  several instances, the sum of ``lease_held`` over them is at most 1.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..observability.queue_metrics import QueueCollector, QueueStatsCache

QUEUE_STATS_SECONDS = 10.0
MAX_QUEUES = 500
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "cassieq_http_requests",
            "HTTP requests by route template, method and status",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "cassieq_http_request_seconds",
            "HTTP request latency by route template and method",
            ["route", "method"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.repair_lease_held = Gauge(
            "cassieq_repair_lease_held",
            "1 while this instance holds the repair lease",
            registry=self.registry,
        )
        self.repair_passes = Counter(
            "cassieq_repair_passes",
            "Repair passes over every queue finished by this instance",
            registry=self.registry,
        )
        self.put_writes = Counter(
            "cassieq_put_writes",
            "put_many calls that wrote single HTTP puts (several puts share one when they arrive "
            "together: cassieq_http_requests of the put route over this is the batching factor)",
            registry=self.registry,
        )
        self.get_reads = Counter(
            "cassieq_get_reads",
            "get_many calls that served single v1 gets (several gets of one queue share one "
            "when they arrive together: cassieq_http_requests of the next route over this is "
            "the batching factor)",
            registry=self.registry,
        )
        self.ack_writes = Counter(
            "cassieq_ack_writes",
            "ack_many calls that acked single v1 acks (several acks of one queue share one when "
            "they arrive together)",
            registry=self.registry,
        )
        self.get_given_back = Counter(
            "cassieq_get_given_back",
            "Messages claimed for a v1 get whose client had left, given back at once",
            registry=self.registry,
        )
        self.account_reads = Counter(
            "cassieq_account_reads",
            "Accounts read from Cassandra (cache misses; a name that is no account is cached "
            "too, so made-up names cost one read each per cache period)",
            registry=self.registry,
        )
        self._queue_source: Callable[[], list[dict]] | None = None
        self.queue_cache = QueueStatsCache(self._queues, QUEUE_STATS_SECONDS, MAX_QUEUES)
        self.registry.register(QueueCollector(self.queue_cache))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def watch_queues(self, source: Callable[[], list[dict]]) -> None:
        """``source()`` returns the engine stats of each queue (called on a scrape thread)."""
        self._queue_source = source

    def _queues(self, max_queues: int) -> tuple[list[dict], bool]:
        if self._queue_source is None:
            return [], False
        stats = self._queue_source()
        return stats[:max_queues], len(stats) > max_queues

    def queue_stats(self) -> list[dict]:
        return self.queue_cache.stats()

    def render(self) -> bytes:
        return generate_latest(self.registry)
