"""The lag listener's gauges: a streaming query's lag per queue, in the process's registry.

:class:`~cassieq_spark.spark.lag.CassieQLagListener` sets them after each trigger when
``prometheus_client`` is installed (else it only logs and keeps records, as before). They live
in the process that runs the listener (the Spark driver, where ``spark.streams.addListener``
runs it); an exporter in that process serves them
(:func:`cassieq_spark.observability.exporter.start_exporter`).

* ``cassieq_stream_behind_messages{queue, query}``: messages (ids) not in a batch yet after the
  query's last trigger;
* ``cassieq_stream_oldest_age_seconds{queue, query}``: how long the first of them has waited
  (0: none waits);
* ``cassieq_stream_last_batch{queue, query}``: the batch id of that trigger.

A query that terminates has its series removed (a stopped query is not "behind"; its last
values would read as a frozen lag). ``query`` is the query's name when it has one (``writeStream.queryName``), else its id (a new
id per run: name queries that are scraped, so their series survive restarts).
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from typing import Any

_gauges: tuple[Any, Any, Any] | None = None
_lock = threading.Lock()


def lag_gauges(registry: Any = None) -> tuple[Any, Any, Any] | None:
    """(behind, oldest age, last batch) gauges, made once per process in the default registry;
    None when ``prometheus_client`` is not installed."""
    global _gauges
    with _lock:
        if _gauges is not None:
            return _gauges
        try:
            prometheus_client = importlib.import_module("prometheus_client")
        except ImportError:
            return None
        reg = registry if registry is not None else prometheus_client.REGISTRY
        labels = ["queue", "query"]
        _gauges = (
            prometheus_client.Gauge(
                "cassieq_stream_behind_messages",
                "Messages of the queue not in a batch of the streaming query yet",
                labels,
                registry=reg,
            ),
            prometheus_client.Gauge(
                "cassieq_stream_oldest_age_seconds",
                "How long the first message not in a batch yet has waited (0: none)",
                labels,
                registry=reg,
            ),
            prometheus_client.Gauge(
                "cassieq_stream_last_batch",
                "Batch id of the streaming query's last trigger that reported this queue",
                labels,
                registry=reg,
            ),
        )
        return _gauges


def record_lag(queue: str, query: str, behind: int, oldest_age_s: float | None, batch: int) -> None:
    """Set the gauges of ``queue`` read by ``query`` (nothing without prometheus_client)."""
    gauges = lag_gauges()
    if gauges is None:
        return
    behind_g, age_g, batch_g = gauges
    behind_g.labels(queue, query).set(behind)
    age_g.labels(queue, query).set(oldest_age_s or 0.0)
    batch_g.labels(queue, query).set(batch)


def forget_lag(queue: str, query: str) -> None:
    """Remove the series of ``queue`` read by ``query`` (a terminated query)."""
    gauges = lag_gauges()
    if gauges is None:
        return
    for gauge in gauges:
        with contextlib.suppress(KeyError):  # never set
            gauge.remove(queue, query)
