"""The first batch of a streaming query keeps the start it was planned from.

Spark asks the source for its ``initialOffset()`` again when it runs batch 0 and when a restart
replays a batch 0 that never committed; a start recomputed there (``startingPosition=latest``
has moved on by then) must not change what batch 0 delivers, or batch 0 delivers nothing and
its messages are acked unseen (spark-semantics review 2, S1). Real Cassandra, real local Spark.
"""

from __future__ import annotations

import time

import pytest
from support.stream import Collector, start, wait_for

from cassieq_spark.engine.stream.lease import ClusterClock, Lease

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 180


def test_failed_first_batch_replayed_with_latest_delivers_every_message(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    """Run 1 (earliest) fails in foreachBatch on batch 0 = ids 0..99. Run 2 on the same
    checkpoint with startingPosition=latest (ignored: the checkpoint has offsets) replays batch
    0. It must deliver the 100 messages before they are acked; before the fix its recomputed
    start (100) emptied the batch and the next trigger acked all 100 undelivered."""
    queue_client.create_queue(queue_name, bucket_size=50)
    ids = queue_client.put_many(queue_name, [f"m{i}".encode() for i in range(100)])
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-r"}
    bad = Collector(fail_on_batch=0)
    q = start(sspark, opts, bad, tmp_path / "ck", {"processingTime": "500 milliseconds"})
    with pytest.raises(Exception, match="fails on purpose"):
        q.awaitTermination(TIMEOUT)
    assert queue_client.stats(queue_name)["acked"] == 0

    good = Collector()
    q = start(
        sspark,
        {**opts, "startingPosition": "latest"},
        good,
        tmp_path / "ck",
        {"availableNow": True},
    )
    assert q.awaitTermination(TIMEOUT)
    assert q.exception() is None, q.exception()
    assert good.ids == ids, f"batch 0 replayed {len(good.ids)} of 100 messages"
    st = queue_client.stats(queue_name)
    assert st["acked"] == 100 and st["backlog"] == 0, st


def test_messages_put_while_the_first_batch_is_planned_are_delivered(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    """A fresh query with startingPosition=latest on queues A and B: A's start is fixed first,
    then the query waits for B's lease (held here), and 20 messages are put into A meanwhile:
    they lie above A's start, so batch 0 must deliver them. Before the fix Spark's second
    initialOffset() call (when it ran batch 0) moved A's start past them: batch 0 delivered
    nothing of A and the next trigger acked the 20."""
    a, b = f"{queue_name}_a", f"{queue_name}_b"
    queue_client.create_queue(a, bucket_size=10)
    queue_client.create_queue(b, bucket_size=10)
    before = queue_client.put_many(a, [b"before"] * 3)  # below the start: not this query's
    conn = queue_client.conn
    holder = Lease(
        conn, queue_client.get_queue(b), "stream:someone-else", 120.0, ClusterClock(conn)
    )
    holder.ensure()
    c = Collector()
    opts = {
        **cassieq_options,
        "queues": f"{a},{b}",
        "consumerId": f"{queue_name}-l",
        "startingPosition": "latest",
    }
    q = start(sspark, opts, c, tmp_path / "ck", {"processingTime": "500 milliseconds"})
    try:
        wait_for(
            lambda: (queue_client.stats(a)["consumer"] or "").startswith(f"stream:{queue_name}"),
            TIMEOUT,
            "the query's lease on A (its start is fixed right after)",
            q,
        )
        time.sleep(1.0)
        during = queue_client.put_many(a, [f"d{i}".encode() for i in range(20)])
        holder.release()  # the query goes on: B's start, then batch 0's end
        wait_for(lambda: c.ids == during, 90, "the 20 messages put during planning", q)
    finally:
        q.stop()
    assert c.ids == during
    assert not set(before) & set(c.ids)
