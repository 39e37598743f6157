"""The cassieq streaming source against the real Cassandra and a real local Spark."""

from __future__ import annotations

import time

import pytest
from support.stream import Collector, start, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_available_now_respects_limit_and_acks_last_batch(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=10)
    ids = queue_client.put_many(queue_name, [f"m{i}".encode() for i in range(45)])
    opts = {**cassieq_options, "queue": queue_name, "maxMessagesPerTrigger": 20}
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", {"availableNow": True})
    assert q.awaitTermination(180)
    assert q.exception() is None
    # every message once, no batch above the limit, the limit actually cut the run
    assert c.ids == ids
    sizes = [len(v) for _, v in sorted(c.batches.items()) if v]
    assert max(sizes) <= 20 and len(sizes) >= 3
    # backlog is visible in the progress: latest offset ahead of the end of the first batch
    first = [p for p in q.recentProgress if p["numInputRows"] > 0][0]["sources"][0]
    assert '"id": 20' in first["endOffset"] or first["endOffset"]["id"] == 20
    latest = first["latestOffset"]
    assert (
        latest["id"] if isinstance(latest, dict) else int(latest.split('"id": ')[1].split(",")[0])
    ) == 45
    # the LAST batch is acked although the query has stopped
    st = queue_client.stats(queue_name)
    assert st["acked"] == 45 and st["reader_pointer"] == 45 and st["backlog"] == 0
    # a new query with a fresh checkpoint receives none of them
    c2 = Collector()
    q2 = start(
        sspark,
        {**opts, "consumerId": "fresh"},
        c2,
        tmp_path / "ck2",
        {"availableNow": True},
        leaseTimeout=5,
    )
    assert q2.awaitTermination(180)
    assert q2.exception() is None
    assert c2.ids == []


def test_failed_batch_is_not_acked_and_comes_again(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name)
    ids = queue_client.put_many(queue_name, [b"x"] * 10)
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-f"}
    bad = Collector(fail_on_batch=0)
    q = start(sspark, opts, bad, tmp_path / "ck", {"processingTime": "500 milliseconds"})
    with pytest.raises(Exception, match="fails on purpose"):
        q.awaitTermination(180)
    st = queue_client.stats(queue_name)
    assert st["acked"] == 0 and st["reader_pointer"] == 0 and st["backlog"] == 10
    # restart from the same checkpoint: batch 0 is replayed and delivered, then acked
    good = Collector()
    q = start(sspark, opts, good, tmp_path / "ck", {"availableNow": True})
    assert q.awaitTermination(180)
    assert good.ids == ids and list(good.batches) == [0]
    st = queue_client.stats(queue_name)
    assert st["acked"] == 10 and st["reader_pointer"] == 10 and st["backlog"] == 0


def test_trigger_once_delivers_everything_in_one_batch(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=4)
    ids = queue_client.put_many(queue_name, [b"o"] * 7)
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-o"}
    opts["maxMessagesPerTrigger"] = 3  # Trigger.Once ignores the limit: one unlimited batch
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", {"once": True})
    assert q.awaitTermination(180)
    assert c.ids == ids and len(c.batches) == 1
    # Spark plans nothing after a Once batch, so it is acked when the query next runs
    c2 = Collector()
    q = start(sspark, opts, c2, tmp_path / "ck", {"once": True})
    assert q.awaitTermination(180)
    assert c2.ids == []
    assert queue_client.stats(queue_name)["acked"] == 7


def test_delayed_messages_are_delivered_when_due(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=5)
    plain = queue_client.put_many(queue_name, [b"p"] * 3)
    t0 = time.time()
    early = queue_client.put_many(queue_name, [b"d"] * 2, delay=6)
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-d"}
    seen: dict[int, float] = {}

    class Timed(Collector):
        def __call__(self, df, batch_id):
            super().__call__(df, batch_id)
            for i in self.ids:
                seen.setdefault(i, time.time())

    c = Timed()
    q = start(sspark, opts, c, tmp_path / "ck", {"processingTime": "500 milliseconds"})
    try:
        wait_for(lambda: set(plain) <= set(c.ids), 120, "plain messages", q)
        t1 = time.time()
        late = queue_client.put_many(queue_name, [b"l"] * 2, delay=3)  # behind the reader
        after = queue_client.put_many(queue_name, [b"a"] * 2)
        wait_for(lambda: len(c.ids) == 9, 120, "all nine messages", q)
        wait_for(lambda: queue_client.stats(queue_name)["acked"] == 9, 30, "acks", q)
    finally:
        q.stop()
    assert c.ids == sorted(plain + early + late + after)  # each exactly once
    assert all(seen[i] >= t0 + 6 - 0.5 for i in early)
    assert all(seen[i] >= t1 + 3 - 0.5 for i in late)
    st = queue_client.stats(queue_name)
    assert st["delayed"] == 0 and st["backlog"] == 0 and st["in_flight"] == 0


def test_one_streaming_consumer_per_queue(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    from cassieq_spark.errors import QueueBusyError

    queue_client.create_queue(queue_name)
    first = queue_client.put_many(queue_name, [b"a"] * 5)
    base = {**cassieq_options, "queue": queue_name, "leaseTimeout": "6"}
    ca = Collector()
    qa = start(
        sspark, {**base, "consumerId": "a"}, ca, tmp_path / "a", {"processingTime": "1 second"}
    )
    try:
        wait_for(lambda: ca.ids == first, 120, "query a", qa)
        with pytest.raises(QueueBusyError, match="'a'"):
            queue_client.get(queue_name)
        cb = Collector()
        qb = start(
            sspark, {**base, "consumerId": "b"}, cb, tmp_path / "b", {"processingTime": "1 second"}
        )
        with pytest.raises(Exception, match="QueueBusyError|consumed by streaming query 'a'"):
            qb.awaitTermination(180)
        assert cb.ids == []
    finally:
        qa.stop()
    stopped = time.time()
    second = queue_client.put_many(queue_name, [b"c"] * 3)
    cc = Collector()
    qc = start(
        sspark, {**base, "consumerId": "c"}, cc, tmp_path / "c", {"processingTime": "1 second"}
    )
    try:
        wait_for(lambda: cc.ids == second, 120, "query c after a stopped", qc)
    finally:
        qc.stop()
    # lease lapse (<= 6 s) plus query start-up on this slow machine
    assert time.time() - stopped < 6 + 90


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"maxMessagesPerTriger": "5"}, "unknown option 'maxmessagespertriger'"),
        ({"maxMessagesPerTrigger": "0"}, "maxMessagesPerTrigger' must be >= 1"),
        ({"leaseTimeout": "soon"}, "leaseTimeout' must be a number"),
        ({"consumerId": "a b"}, "consumerId"),
    ],
)
def test_bad_options_fail_with_the_option_named(
    sspark, queue_client, queue_name, cassieq_options, tmp_path, extra, message
):
    queue_client.create_queue(queue_name, exist_ok=True)
    opts = {**cassieq_options, "queue": queue_name, **extra}
    with pytest.raises(Exception, match=message):
        q = start(sspark, opts, Collector(), tmp_path / "ck", {"availableNow": True})
        q.awaitTermination(120)


def test_missing_queue_option_and_missing_queue(sspark, cassieq_options, tmp_path):
    with pytest.raises(Exception, match="option 'queue' is required"):
        q = start(sspark, cassieq_options, Collector(), tmp_path / "a", {"availableNow": True})
        q.awaitTermination(120)
    with pytest.raises(Exception, match="does not exist"):
        opts = {**cassieq_options, "queue": "no_such_queue_here"}
        q = start(sspark, opts, Collector(), tmp_path / "b", {"availableNow": True})
        q.awaitTermination(120)


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"maxMessagesPerTriger": "5"}, "unknown option 'maxmessagespertriger'"),
        ({"maxMessagesPerTrigger": "abc"}, "maxMessagesPerTrigger' must be an integer"),
        ({"port": "99999"}, "port must be from 1 to 65535"),
    ],
)
def test_bad_options_fail_at_load(sspark, queue_name, cassieq_options, extra, message):
    """load() itself fails (no query is started), with the option named."""
    opts = {**cassieq_options, "queue": queue_name, **extra}
    with pytest.raises(Exception, match=message):
        sspark.readStream.format("cassieq").options(**opts).load()
    with pytest.raises(Exception, match=message):
        sspark.read.format("cassieq").options(**opts).load()
