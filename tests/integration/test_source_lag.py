"""The lag of a cassieq streaming query: in the progress's latestOffset, and through
cassieq_spark.spark.lag_listener(), against the real Cassandra and a real local Spark."""

from __future__ import annotations

import json
import time

import pytest
from support.stream import Collector, start, wait_for

from cassieq_spark.engine.core.queues import get_queue
from cassieq_spark.engine.stream.consumer import StreamConsumer
from cassieq_spark.spark import lag_listener, register

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_lag_per_trigger_in_progress_and_listener(
    spark, queue_client, queue_name, cassieq_options, tmp_path
):
    register(spark)
    queue_client.create_queue(queue_name, bucket_size=5)
    put_at = time.time()
    ids = queue_client.put_many(queue_name, [b"x"] * 10)
    time.sleep(1.0)  # the oldest message has waited at least this long when the query plans
    lag = lag_listener()
    spark.streams.addListener(lag)
    try:
        opts = {
            **cassieq_options,
            "queue": queue_name,
            "consumerId": f"{queue_name}-lag",
            "maxMessagesPerTrigger": 4,
        }
        c = Collector()
        q = start(spark, opts, c, tmp_path / "ck", {"availableNow": True})
        assert q.awaitTermination(180) and q.exception() is None
        started = time.time()
        assert c.ids == ids
        wait_for(lambda: len(lag.of(queue_name)) >= 3, 30, "three progress events")
    finally:
        spark.streams.removeListener(lag)
    records = lag.of(queue_name)[:3]
    assert [r.behind for r in records] == [6, 2, 0]
    assert [r.batch_id for r in records] == [0, 1, 2]
    waited = started - put_at + 5  # upper bound, with room for the clocks
    assert all(1.0 <= r.oldest_age_s <= waited for r in records[:2]), records
    assert records[2].oldest_age_s is None
    assert lag.latest[queue_name] == lag.of(queue_name)[-1]
    # the same numbers in the progress itself
    first = [p for p in q.recentProgress if p["numInputRows"] > 0][0]["sources"][0]
    latest = first["latestOffset"]
    latest = latest if isinstance(latest, dict) else json.loads(latest)
    assert latest["behind"] == 6 and latest["id"] == 10 and latest["queue"] == queue_name


def test_oldest_waiting_age_of_the_engine(queue_client, queue_name):
    queue_client.create_queue(queue_name, bucket_size=2)
    put_at = time.time()
    ids = queue_client.put_many(queue_name, [b"x"] * 3)
    time.sleep(0.5)
    st = StreamConsumer(queue_client.conn, get_queue(queue_client.conn, queue_name), "s:a", 5.0)
    age = st.oldest_waiting_age_ms(ids[1], ids[-1] + 1)
    assert age is not None and 500 <= age <= (time.time() - put_at) * 1000 + 2000
    assert st.oldest_waiting_age_ms(ids[-1] + 1, ids[-1] + 1) is None  # nothing waits
