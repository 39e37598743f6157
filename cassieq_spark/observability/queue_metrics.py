"""Every queue's state as Prometheus metrics, from the engine's stats.

One stats pass reads each queue's counters, pointers and live buckets (a scan whose cost follows
the backlog): scraping that on every request of every Prometheus would load the cluster with
the number of scrapers. :class:`QueueStatsCache` bounds it: at most one pass per
``refresh_seconds`` whoever scrapes and however often (concurrent scrapes wait for the one pass
in progress and share it), over at most ``max_queues`` queues (the first ones in the queue
list; ``cassieq_queue_stats_truncated`` is 1 when there were more). A pass that fails keeps
serving the last stats and counts ``cassieq_queue_stats_errors_total``.

Metric names (label ``queue``, the queue's name):

* gauges ``cassieq_queue_backlog`` (visible, waiting), ``cassieq_queue_in_flight`` (delivered,
  not acked), ``cassieq_queue_delayed`` (not visible yet), ``cassieq_queue_oldest_age_seconds``
  (age of the oldest visible message; 0 when none), ``cassieq_queue_lost_ranges`` (ranges of
  lost reservations kept for streaming queries to report);
* counters (totals since the queue was created; rates from Prometheus' ``rate()``):
  ``cassieq_queue_enqueued_total``, ``cassieq_queue_acked_total``,
  ``cassieq_queue_dead_lettered_total``, ``cassieq_queue_dropped_total``,
  ``cassieq_queue_lost_total``;
* the pass itself: ``cassieq_queue_stats_queues`` (queues covered),
  ``cassieq_queue_stats_truncated``, ``cassieq_queue_stats_duration_seconds`` (the last pass),
  ``cassieq_queue_stats_age_seconds`` (how old the served stats are),
  ``cassieq_queue_stats_errors_total``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import QueueNotFoundError

log = logging.getLogger(__name__)

DEFAULT_REFRESH_SECONDS = 15.0
DEFAULT_MAX_QUEUES = 500

#: (metric name, stats key, help) of the per-queue gauges
GAUGES = (
    ("cassieq_queue_backlog", "backlog", "Visible messages waiting"),
    ("cassieq_queue_in_flight", "in_flight", "Delivered, not yet acked"),
    ("cassieq_queue_delayed", "delayed", "Messages not visible yet (delay or redelivery time)"),
    (
        "cassieq_queue_oldest_age_seconds",
        "oldest_age_seconds",
        "Age of the oldest visible message (0: none)",
    ),
    (
        "cassieq_queue_lost_ranges",
        "lost_ranges",
        "Ranges of lost reservations kept for streaming queries to report",
    ),
)
#: (metric name without _total, stats key, help) of the per-queue counters
COUNTERS = (
    ("cassieq_queue_enqueued", "enqueued", "Messages enqueued since the queue was created"),
    ("cassieq_queue_acked", "acked", "Messages acked since the queue was created"),
    ("cassieq_queue_dead_lettered", "dead_lettered", "Messages moved to the dead-letter queue"),
    ("cassieq_queue_dropped", "dropped", "Messages dropped after their last delivery (no DLQ)"),
    ("cassieq_queue_lost", "lost", "Messages found lost (reservations never written)"),
)


class QueueStatsCache:
    """The stats of every queue, refreshed at most every ``refresh_seconds`` by a caller.

    ``source(max_queues)`` returns ``(stats of the first max_queues queues, whether there were
    more)``; it runs on the caller's thread (a scrape), one at a time."""

    def __init__(
        self,
        source: Callable[[int], tuple[list[dict], bool]],
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        max_queues: int = DEFAULT_MAX_QUEUES,
    ) -> None:
        if not refresh_seconds > 0:
            raise ValueError(f"refresh_seconds must be positive, got {refresh_seconds!r}")
        if max_queues < 1:
            raise ValueError(f"max_queues must be at least 1, got {max_queues!r}")
        self.source = source
        self.refresh_seconds = float(refresh_seconds)
        self.max_queues = int(max_queues)
        self.passes = 0  # stats passes made (tests and the bound's proof)
        self.errors = 0
        self.truncated = False
        self.duration = 0.0
        self._at: float | None = None
        self._stats: list[dict] = []
        self._lock = threading.Lock()

    def stats(self) -> list[dict]:
        with self._lock:
            if self._at is None or time.monotonic() - self._at >= self.refresh_seconds:
                t0 = time.monotonic()
                try:
                    stats, more = self.source(self.max_queues)
                except Exception as exc:  # keep serving the last stats; the pass is counted
                    self.errors += 1
                    log.warning("queue stats pass failed (%s); serving the last stats", exc)
                    self._at = time.monotonic()
                    return self._stats
                self.passes += 1
                self._stats, self.truncated = stats[: self.max_queues], more
                self.duration = time.monotonic() - t0
                self._at = time.monotonic()
            return self._stats

    def age(self) -> float:
        return 0.0 if self._at is None else time.monotonic() - self._at


def client_source(client: Any) -> Callable[[int], tuple[list[dict], bool]]:
    """A :class:`QueueStatsCache` source over a ``QueueClient``: list the queues, stats each
    of the first ``max_queues`` (a queue deleted meanwhile is left out)."""

    def source(max_queues: int) -> tuple[list[dict], bool]:
        infos = client.list_queues()
        out = []
        for info in infos[:max_queues]:
            try:
                out.append(client.stats(info.name))
            except QueueNotFoundError:
                continue
        return out, len(infos) > max_queues

    return source


class QueueCollector:
    """A ``prometheus_client`` collector of :class:`QueueStatsCache`'s stats (register it in
    a ``CollectorRegistry``). ``describe`` names the families without a stats pass, so
    registering it reads nothing."""

    def __init__(self, cache: QueueStatsCache) -> None:
        self.cache = cache

    def _families(self) -> tuple[dict, dict, list]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        gauges = {
            key: GaugeMetricFamily(name, text, labels=["queue"]) for name, key, text in GAUGES
        }
        counters = {
            key: CounterMetricFamily(name, text, labels=["queue"]) for name, key, text in COUNTERS
        }
        meta = [
            GaugeMetricFamily("cassieq_queue_stats_queues", "Queues the last stats pass covered"),
            GaugeMetricFamily(
                "cassieq_queue_stats_truncated",
                "1 when there are more queues than the stats pass covers (max queues)",
            ),
            GaugeMetricFamily(
                "cassieq_queue_stats_duration_seconds", "How long the last stats pass took"
            ),
            GaugeMetricFamily("cassieq_queue_stats_age_seconds", "How old the served stats are"),
            CounterMetricFamily("cassieq_queue_stats_errors", "Stats passes that failed"),
        ]
        return gauges, counters, meta

    def describe(self) -> Iterator[Any]:
        gauges, counters, meta = self._families()
        yield from gauges.values()
        yield from counters.values()
        yield from meta

    def collect(self) -> Iterator[Any]:
        gauges, counters, meta = self._families()
        stats = self.cache.stats()
        for s in stats:
            for key, family in gauges.items():
                family.add_metric([s["queue"]], float(s.get(key) or 0))
            for key, family in counters.items():
                family.add_metric([s["queue"]], float(s.get(key) or 0))
        values = (
            len(stats),
            1.0 if self.cache.truncated else 0.0,
            self.cache.duration,
            self.cache.age(),
            self.cache.errors,
        )
        for family, value in zip(meta, values, strict=True):
            family.add_metric([], float(value))
        yield from gauges.values()
        yield from counters.values()
        yield from meta
