"""Prometheus metrics of one instance, in a registry of its own (``GET /metrics``).

* ``cassieq_http_requests_total{route, method, status}`` and
  ``cassieq_http_request_seconds{route, method}`` (a histogram): ``route`` is the route's
  template (``/api/v1/accounts/{account}/queues/{queue}/messages``), never the raw path, so
  the label set stays bounded whatever clients send (an unmatched path is ``unmatched``, a
  method other than the standard seven ``other``);
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

import logging
import threading
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..errors import QueueNotFoundError
from ..observability.queue_metrics import QueueCollector, QueueStatsCache
from . import names

log = logging.getLogger(__name__)

QUEUE_STATS_SECONDS = 10.0
MAX_QUEUES = 200  # queues in the snapshot (/metrics and the dashboard)
# The methods a request is labelled with; any other (a client may send any token) is "other".
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0)


class Metrics:
    def __init__(self, stats_seconds: float = QUEUE_STATS_SECONDS) -> None:
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
        self.shed = Counter(
            "cassieq_http_shed",
            "Requests answered 503 at once by a bound: reason=requests (--max-requests in "
            "progress) or engine (--max-waiting-calls waiting for a worker)",
            ["reason"],
            registry=self.registry,
        )
        self._stats_client: Any = None
        self.stats_seconds = stats_seconds
        # refreshed by StatsRefresher every stats_seconds; a pass is due a little before that
        self.queue_cache = SnapshotStats(self._queues, stats_seconds * 0.9, MAX_QUEUES)
        self.registry.register(QueueCollector(self.queue_cache))

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """One request; its labels are bounded whatever the client sent: ``route`` is a template
        (or ``unmatched``), an unknown ``method`` is ``other``, ``status`` a 3-digit code."""
        method = method if method in METHODS else "other"
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)

    def watch_queues(self, client: Any) -> None:
        """The queue stats come from ``client`` (a ``QueueClient`` used by nothing else), read
        by :meth:`refresh_queues` on the refresher's thread."""
        self._stats_client = client

    def _queues(self, max_queues: int) -> tuple[list[dict], bool]:
        if self._stats_client is None:
            return [], False
        return queue_stats_of(self._stats_client, max_queues)

    def refresh_queues(self) -> None:
        """A stats pass when the snapshot is (nearly) ``stats_seconds`` old."""
        self.queue_cache.refresh()

    def queue_stats(self) -> list[dict]:
        """The last snapshot (empty before the first pass); never reads Cassandra."""
        return self.queue_cache.stats()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class SnapshotStats(QueueStatsCache):
    """A :class:`QueueStatsCache` whose readers only read: ``stats()`` returns the last pass's
    snapshot at once (and records that it is wanted), and only :meth:`refresh` (the refresher
    thread) makes passes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.snapshot: list[dict] = []
        self.wanted = threading.Event()  # set by a reader; the refresher passes while it is
        self.wanted_at = 0.0

    def refresh(self) -> None:
        self.snapshot = QueueStatsCache.stats(self)

    def stats(self) -> list[dict]:
        self.wanted_at = time.monotonic()
        self.wanted.set()
        return self.snapshot


def queue_stats_of(client: Any, max_queues: int = MAX_QUEUES) -> tuple[list[dict], bool]:
    """Engine stats of the first ``max_queues`` queues (each with its ``account`` and
    ``dead_letter_queue``; a queue deleted meanwhile is left out) and whether there were more."""
    infos = client.list_queues()
    out = []
    for info in infos[:max_queues]:
        try:
            s = client.stats(info.name)
        except QueueNotFoundError:
            continue
        owner = names.split(info.name)
        s["account"] = owner[0] if owner else None
        s["dead_letter_queue"] = info.dead_letter_queue
        out.append(s)
    return out, len(infos) > max_queues


class StatsRefresher(threading.Thread):
    """Refreshes a :class:`Metrics`' queue snapshot every ``stats_seconds``, on its own thread
    and its own client: outside the engine threads and their client pool, so no scrape or
    dashboard poll takes a pooled client, and a slow pass delays only the snapshot.

    It passes only while the stats are wanted: from the first scrape or dashboard poll (which
    gets the snapshot as it is, empty at first) until none came for :data:`IDLE_PASSES`
    intervals; an instance nobody scrapes reads nothing for them."""

    IDLE_PASSES = 6

    def __init__(self, metrics: Metrics):
        super().__init__(name="cassieq-queue-stats", daemon=True)
        self.metrics = metrics
        self.interval = metrics.stats_seconds
        self.stopped = threading.Event()

    def run(self) -> None:
        cache = self.metrics.queue_cache
        while not self.stopped.is_set():
            if not cache.wanted.wait(1.0):
                continue
            if time.monotonic() - cache.wanted_at > self.IDLE_PASSES * self.interval:
                cache.wanted.clear()  # nobody asked for a while: idle until someone does
                continue
            try:
                self.metrics.refresh_queues()
            except Exception:  # the snapshot stays as it was; the next pass retries
                log.exception("queue stats pass failed")
            self.stopped.wait(self.interval)
