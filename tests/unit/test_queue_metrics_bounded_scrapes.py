"""The queue metrics' scrape cost is bounded: at most one stats pass per refresh interval
whatever the scrapes (concurrent ones share the pass in progress), over at most ``max_queues``
queues; a failed pass keeps the last values. The collector's exposition names every metric
docs/metrics.md lists. Client operation metrics cost nothing until enabled, and count a
nested call once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cassieq_spark.observability import client_metrics
from cassieq_spark.observability.queue_metrics import (
    COUNTERS,
    GAUGES,
    QueueCollector,
    QueueStatsCache,
)

pytestmark = pytest.mark.unit


def stats_of(name: str, backlog: int) -> dict:
    return {
        "queue": name,
        "backlog": backlog,
        "in_flight": 1,
        "delayed": 2,
        "oldest_age_seconds": 3.5,
        "lost_ranges": 0,
        "enqueued": 10,
        "acked": 4,
        "dead_lettered": 1,
        "dropped": 0,
        "lost": 0,
    }


class Source:
    """Counts stats passes; each takes ``seconds`` (a slow cluster)."""

    def __init__(self, queues: int, seconds: float = 0.0):
        self.queues = queues
        self.seconds = seconds
        self.calls = 0
        self.fail = False

    def __call__(self, max_queues: int) -> tuple[list[dict], bool]:
        self.calls += 1
        time.sleep(self.seconds)
        if self.fail:
            raise OSError("cluster away")
        n = min(self.queues, max_queues)
        return [stats_of(f"q{i}", i) for i in range(n)], self.queues > max_queues


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_many_scrapes_within_the_interval_make_one_pass() -> None:
    source = Source(3)
    cache = QueueStatsCache(source, refresh_seconds=60, max_queues=10)
    registry = CollectorRegistry()
    registry.register(QueueCollector(cache))
    assert source.calls == 0  # registering describes without a stats pass
    for _ in range(50):
        generate_latest(registry)
    assert source.calls == 1


def test_concurrent_scrapes_share_the_pass_in_progress() -> None:
    source = Source(3, seconds=0.3)
    cache = QueueStatsCache(source, refresh_seconds=60)
    threads = [threading.Thread(target=cache.stats) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert source.calls == 1


def test_a_pass_is_made_again_after_the_interval() -> None:
    source = Source(1)
    cache = QueueStatsCache(source, refresh_seconds=0.2)
    cache.stats()
    cache.stats()
    time.sleep(0.25)
    cache.stats()
    assert source.calls == 2


def test_queues_beyond_the_maximum_are_left_out_and_flagged() -> None:
    cache = QueueStatsCache(Source(7), refresh_seconds=60, max_queues=5)
    registry = CollectorRegistry()
    registry.register(QueueCollector(cache))
    got = samples(registry)
    queues = {dict(k[1])["queue"] for k in got if k[0] == "cassieq_queue_backlog"}
    assert queues == {f"q{i}" for i in range(5)}
    assert got[("cassieq_queue_stats_truncated", ())] == 1.0
    assert got[("cassieq_queue_stats_queues", ())] == 5.0


def test_a_failed_pass_keeps_the_last_values_and_is_counted() -> None:
    source = Source(2)
    cache = QueueStatsCache(source, refresh_seconds=0.05)
    registry = CollectorRegistry()
    registry.register(QueueCollector(cache))
    before = samples(registry)
    source.fail = True
    time.sleep(0.1)
    after = samples(registry)
    assert after[("cassieq_queue_stats_errors_total", ())] == 1.0
    key = ("cassieq_queue_backlog", (("queue", "q1"),))
    assert before[key] == after[key] == 1.0


def test_every_documented_queue_metric_is_exposed_with_its_value() -> None:
    cache = QueueStatsCache(Source(1), refresh_seconds=60)
    registry = CollectorRegistry()
    registry.register(QueueCollector(cache))
    got = samples(registry)
    q = (("queue", "q0"),)
    assert got[("cassieq_queue_oldest_age_seconds", q)] == 3.5
    assert got[("cassieq_queue_enqueued_total", q)] == 10.0
    assert got[("cassieq_queue_acked_total", q)] == 4.0
    names = {k[0] for k in got}
    expected = {g[0] for g in GAUGES} | {c[0] + "_total" for c in COUNTERS}
    assert expected <= names
    page = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text("utf-8")
    assert all(f"`{n}`" in page for n in expected), sorted(n for n in expected if n not in page)


def test_client_metrics_cost_nothing_until_enabled_and_count_nested_calls_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []

    @client_metrics.timed("outer")
    def outer() -> str:
        calls.append("outer")
        return inner()

    @client_metrics.timed("inner")
    def inner() -> str:
        calls.append("inner")
        return "done"

    client_metrics.disable_client_metrics()
    # disabled: prometheus_client is not even looked up
    monkeypatch.setitem(__import__("sys").modules, "prometheus_client", None)
    assert outer() == "done"
    monkeypatch.undo()

    registry = CollectorRegistry()
    client_metrics.enable_client_metrics(registry)
    try:
        assert outer() == "done"
        with pytest.raises(ZeroDivisionError):
            client_metrics.timed("boom")(lambda: 1 / 0)()
    finally:
        client_metrics.disable_client_metrics()
    got = samples(registry)
    ops = (("operation", "outer"), ("outcome", "ok"))
    assert got[("cassieq_client_operations_total", ops)] == 1.0
    assert (
        "cassieq_client_operations_total",
        (("operation", "inner"), ("outcome", "ok")),
    ) not in got
    boom = (("operation", "boom"), ("outcome", "error"))
    assert got[("cassieq_client_operations_total", boom)] == 1.0
    assert got[("cassieq_client_operation_seconds_count", (("operation", "outer"),))] == 1.0
