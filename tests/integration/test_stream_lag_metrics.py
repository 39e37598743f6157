"""The lag listener, running in the driver, sets the stream lag gauges in the process's
registry, and an exporter started in the same process serves them over HTTP: what a
Prometheus scraping the driver reads. A query that stops has its series removed. Real
Cassandra, real local Spark."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.stream import Collector, wait_for

from cassieq_spark.observability.exporter import start_exporter
from cassieq_spark.spark import lag_listener, register

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_driver_exports_each_queues_lag_after_a_trigger(
    spark, queue_client, queue_name, cassieq_options, tmp_path
):
    register(spark)
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"x"] * 10)
    lag = lag_listener()
    spark.streams.addListener(lag)
    exporter = start_exporter(0)
    name = f"lag_{queue_name}"
    try:
        reader = spark.readStream.format("cassieq")
        opts = {
            **cassieq_options,
            "queue": queue_name,
            "consumerId": f"{queue_name}-m",
        }
        for k, v in opts.items():
            reader = reader.option(k, str(v))
        c = Collector()
        q = (
            reader.load()
            .writeStream.queryName(name)
            .foreachBatch(c)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(processingTime="1 second")
            .start()
        )
        try:
            wait_for(lambda: len(c.ids) == 10, 180, "the ten messages", q)
            wait_for(
                lambda: queue_name in lag.latest and lag.latest[queue_name].behind == 0,
                60,
                "a progress with nothing behind",
                q,
            )
            labels = (("query", name), ("queue", queue_name))
            got = scrape(exporter.port)
            assert got[("cassieq_stream_behind_messages", labels)] == 0.0
            assert got[("cassieq_stream_oldest_age_seconds", labels)] == 0.0
            assert got[("cassieq_stream_last_batch", labels)] >= 0.0
        finally:
            q.stop()
        wait_for(
            lambda: ("cassieq_stream_behind_messages", labels) not in scrape(exporter.port),
            30,
            "the stopped query's series removed",
        )
    finally:
        spark.streams.removeListener(lag)
        exporter.stop()
