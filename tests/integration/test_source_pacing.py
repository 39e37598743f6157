"""Pacing of the streaming source (minMessagesPerTrigger, maxTriggerDelay beside
maxMessagesPerTrigger), against the real Cassandra and a real local Spark."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from support.stream import Collector, start, wait_for

from cassieq_spark.spark.source import NO_ROW_CAP, CassieQStreamReader

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class Timed(Collector):
    """Also records when each non-empty batch reached the sink."""

    def __init__(self):
        super().__init__()
        self.seen_at: dict[int, float] = {}

    def __call__(self, df, batch_id):
        at = time.time()
        super().__call__(df, batch_id)
        if self.batches.get(batch_id):
            self.seen_at.setdefault(batch_id, at)


def test_no_batch_below_the_minimum_until_enough_arrive(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name)
    first = queue_client.put_many(queue_name, [b"a"] * 3)
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-m",
        "minMessagesPerTrigger": 3,
        "maxTriggerDelay": "1h",
    }
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", {"processingTime": "300 milliseconds"})
    try:
        wait_for(lambda: c.ids == first, 120, "the first three", q)
        few = queue_client.put_many(queue_name, [b"b"] * 2)
        time.sleep(4)  # a dozen triggers: two messages are not enough
        assert c.ids == first
        assert queue_client.stats(queue_name)["backlog"] == 2
        last = queue_client.put_many(queue_name, [b"c"])
        wait_for(lambda: len(c.ids) == 6, 120, "the next three", q)
    finally:
        q.stop()
    assert [sorted(v) for _, v in sorted(c.batches.items()) if v] == [first, few + last]


def test_max_trigger_delay_lets_a_small_batch_through(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name)
    first = queue_client.put_many(queue_name, [b"a"])
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-d",
        "minMessagesPerTrigger": 100,
        "maxTriggerDelay": "5s",
    }
    c = Timed()
    q = start(sspark, opts, c, tmp_path / "ck", {"processingTime": "300 milliseconds"})
    try:
        wait_for(lambda: c.ids == first, 120, "the first message", q)
        second = queue_client.put_many(queue_name, [b"b"])
        wait_for(lambda: c.ids == first + second, 120, "the second message", q)
    finally:
        q.stop()
    (b1, t1), (b2, t2) = sorted(c.seen_at.items())
    assert c.batches[b2] == second
    # planned >= 5 s after the batch before (which was planned before t1); not at once
    assert t2 - t1 >= 3.0, (t1, t2)


def test_available_now_and_once_ignore_the_minimum(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=5)
    ids = queue_client.put_many(queue_name, [b"x"] * 4)
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-n",
        "maxMessagesPerTrigger": 3,
        "minMessagesPerTrigger": 3,
        "maxTriggerDelay": "1h",
    }
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", {"availableNow": True})
    assert q.awaitTermination(180) and q.exception() is None
    assert [sorted(v) for _, v in sorted(c.batches.items()) if v] == [ids[:3], ids[3:]]
    assert queue_client.stats(queue_name)["acked"] == 4
    # Trigger.Once ignores the minimum too (Spark passes it ReadAllAvailable)
    more = queue_client.put_many(queue_name, [b"y"] * 2)
    once = Collector()
    q = start(sspark, opts, once, tmp_path / "o", {"once": True})
    assert q.awaitTermination(180) and q.exception() is None
    assert once.ids == more and len(once.batches) == 1


def test_bad_pacing_option_fails_at_load(sspark, queue_name, cassieq_options):
    opts = {**cassieq_options, "queue": queue_name, "maxTriggerDelay": "15s"}
    with pytest.raises(Exception, match="'maxTriggerDelay' only applies with"):
        sspark.readStream.format("cassieq").options(**opts).load()


def test_pacing_of_the_driver_side_reader(queue_client, queue_name, cassieq_options):
    """The reader's latestOffset without Spark: deterministic, no trigger timing involved."""
    queue_client.create_queue(queue_name)
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-r",
        "minMessagesPerTrigger": 3,
        "maxTriggerDelay": "1h",
    }
    reader = CassieQStreamReader(opts)
    try:
        paced = reader.getDefaultReadLimit()
        assert isinstance(paced, ReadMaxRows) and paced.max_rows == NO_ROW_CAP
        start = reader.initialOffset()
        queue_client.put_many(queue_name, [b"a"] * 2)
        assert reader.latestOffset(start, paced) == start  # two of three: no batch
        assert reader.reportLatestOffset()["behind"] == 2  # the backlog shows all the same
        assert reader.latestOffset(start, ReadAllAvailable())["id"] == 2  # Trigger.Once
        queue_client.put_many(queue_name, [b"b"])
        assert reader.latestOffset(start, paced)["id"] == 3  # three: a batch
        queue_client.put_many(queue_name, [b"c"])
        assert reader.latestOffset(start, paced)["id"] == 4  # from the same start: four
        reader.settings = replace(reader.settings, max_trigger_delay=0.2)
        later = {**start, "from": 4, "id": 4}
        queue_client.put_many(queue_name, [b"d"])
        assert reader.latestOffset(later, paced) == later  # one, and the delay is not over
        time.sleep(0.3)
        assert reader.latestOffset(later, paced)["id"] == 5  # the delay is over
    finally:
        reader.stop()
