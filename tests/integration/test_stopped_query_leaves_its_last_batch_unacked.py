"""A query stopped between a batch's commit and its next trigger leaves that batch unacked, with
every trigger but AvailableNow: the source acks a batch when Spark plans the next one (or
calls ``commit``), and ``query.stop()`` does neither. Clients, a new checkpoint or another
query then receive its messages again; the same checkpoint acks them on its next start
without delivering them (spark-semantics review 2, S10: documented, as Kafka's offsets are
committed by the next batch too). Real Cassandra, real local Spark."""

from __future__ import annotations

import pytest
from support.stream import Collector, start, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TIMEOUT = 120


def test_processing_time_query_stopped_after_a_commit_leaves_the_batch_to_clients(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=100)
    ids = queue_client.put_many(queue_name, [f"m{i}" for i in range(5)])
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-s",
        "leaseTimeout": "3",
    }
    ck = tmp_path / "ck"
    c = Collector()
    q = start(sspark, opts, c, ck, {"processingTime": "1 hour"})
    try:
        wait_for(lambda: (ck / "commits" / "0").exists(), TIMEOUT, "batch 0's commit", q)
    finally:
        q.stop()
    assert c.ids == ids
    st = queue_client.stats(queue_name)
    assert (st["acked"], st["backlog"]) == (0, 5), st  # committed in Spark, not in the queue
    # the stopped run's lease is given back or lapses: then clients may get them again
    wait_for(lambda: queue_client.stats(queue_name)["consumer"] is None, 30, "the lease to go")
    assert [m.id for m in queue_client.peek(queue_name)] == ids

    again = Collector()
    q = start(sspark, opts, again, ck, {"availableNow": True})
    assert q.awaitTermination(TIMEOUT) and q.exception() is None, q.exception()
    assert again.ids == []  # the same checkpoint acks the batch without delivering it again
    assert queue_client.stats(queue_name)["acked"] == 5
