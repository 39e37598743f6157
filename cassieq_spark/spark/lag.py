"""How far streaming queries on cassieq queues are behind, trigger by trigger.

PySpark 4's Python data sources cannot report custom metrics (the ``metrics`` hook of Scala's
``ReportsSourceMetrics`` is not exposed to Python); what they can report is the latest offset
(``reportLatestOffset``), which Spark shows as ``sources[].latestOffset`` in each progress. The
cassieq source adds its lag there: ``behind`` (messages, counted as ids, not in a batch yet
after the batch of that trigger) and ``oldestAgeMs`` (how long the first of them has waited).
:func:`lag_listener` reads it back from every progress event::

    lag = lag_listener()
    spark.streams.addListener(lag)
    ...
    lag.latest["orders"].behind, lag.latest["orders"].oldest_age_s

With ``prometheus_client`` installed, the listener also sets the gauges
``cassieq_stream_behind_messages``, ``cassieq_stream_oldest_age_seconds`` and
``cassieq_stream_last_batch`` (labels ``queue``, ``query``) in the process's default registry
(:mod:`cassieq_spark.observability.lag_metrics`); ``start_exporter(port)`` in the same
process (the driver) serves them to Prometheus.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from ..observability.lag_metrics import forget_lag, record_lag

log = logging.getLogger(__name__)

HISTORY = 1000  # lag records kept (all queues together)

__all__ = ["CassieQLagListener", "QueueLag", "lag_listener", "lag_of_source", "lags_of_source"]


@dataclass(frozen=True)
class QueueLag:
    """The lag of one queue after one trigger of one query."""

    queue: str
    behind: int  # messages (ids) not in a batch yet
    oldest_age_s: float | None  # how long the first of them has waited; None: none waits
    batch_id: int
    query_id: str
    timestamp: str  # the progress's time (ISO 8601, as Spark writes it)


def _as_dict(value: Any) -> dict | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.startswith("{"):
        try:
            parsed = json.loads(value)
        except ValueError:
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def lags_of_source(source: Any, batch_id: int, query_id: str, timestamp: str) -> list[QueueLag]:
    """The lag of every queue a progress's source entry (``SourceProgress`` or its JSON dict)
    reports: one for a source on one queue, one per queue for options ``queues`` and
    ``queuePattern`` (``{"queues": {name: {..., "behind", "oldestAgeMs"}}}``); none for a
    source that is not cassieq's, or an older cassieq that does not report lag."""
    latest = getattr(source, "latestOffset", None)
    if latest is None and isinstance(source, dict):
        latest = source.get("latestOffset")
    d = _as_dict(latest)
    if d is None:
        return []
    several = d.get("queues")
    entries = list(several.values()) if isinstance(several, dict) else [d]
    out = []
    for e in entries:
        if not isinstance(e, dict) or "queue" not in e or "behind" not in e:
            continue
        age = e.get("oldestAgeMs")
        out.append(
            QueueLag(
                queue=str(e["queue"]),
                behind=int(e["behind"]),
                oldest_age_s=None if age is None else int(age) / 1000.0,
                batch_id=batch_id,
                query_id=query_id,
                timestamp=timestamp,
            )
        )
    return out


def lag_of_source(source: Any, batch_id: int, query_id: str, timestamp: str) -> QueueLag | None:
    """The lag of the first queue :func:`lags_of_source` finds (None: none)."""
    lags = lags_of_source(source, batch_id, query_id, timestamp)
    return lags[0] if lags else None


class CassieQLagListener(StreamingQueryListener):
    """Logs (logger ``cassieq_spark.spark.lag``, INFO) and keeps the lag of every cassieq
    source after each trigger: ``latest`` (queue -> its last :class:`QueueLag`) and
    ``history`` (the last ``HISTORY`` records, oldest first)."""

    def __init__(self) -> None:
        self.latest: dict[str, QueueLag] = {}
        self.history: deque[QueueLag] = deque(maxlen=HISTORY)
        self._lock = threading.Lock()
        # query id -> (its metrics label, the queues it reported): removed when it terminates
        self._exported: dict[str, tuple[str, set[str]]] = {}

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        query = getattr(p, "name", None) or str(p.id)
        for lag in (
            lag
            for source in p.sources
            for lag in lags_of_source(source, p.batchId, str(p.id), p.timestamp)
        ):
            with self._lock:
                self.latest[lag.queue] = lag
                self.history.append(lag)
                self._exported.setdefault(lag.query_id, (query, set()))[1].add(lag.queue)
            record_lag(lag.queue, query, lag.behind, lag.oldest_age_s, lag.batch_id)
            log.info(
                "queue %s: %d messages behind, the oldest waiting %s (query %s, batch %d)",
                lag.queue,
                lag.behind,
                "-" if lag.oldest_age_s is None else f"{lag.oldest_age_s:.1f} s",
                lag.query_id,
                lag.batch_id,
            )

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._lock:
            label, queues = self._exported.pop(str(event.id), ("", set()))
        for queue in queues:
            forget_lag(queue, label)

    def of(self, queue: str) -> list[QueueLag]:
        """The kept records of ``queue``, oldest first."""
        with self._lock:
            return [r for r in self.history if r.queue == queue]


def lag_listener() -> CassieQLagListener:
    """A listener to add with ``spark.streams.addListener``: it logs and keeps, per queue and
    trigger, how many messages a cassieq streaming query is behind and how long the oldest of
    them has waited."""
    return CassieQLagListener()
