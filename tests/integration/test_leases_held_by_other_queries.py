"""Queries that meet each other's consumer leases: a ``queuePattern`` query leaves a matching
queue another streaming query consumes until it is free (it failed with QueueBusyError on every
restart), and a run that takes over a lease its own consumerId renewed moments ago says that
another query may share the consumerId (spark-semantics review 2, S8). Spark's driver calls are
made in this process (``support.driver``)."""

from __future__ import annotations

import logging

import pytest

from cassieq_spark.engine.stream.lease import ClusterClock, Lease

pytestmark = pytest.mark.integration


def test_pattern_query_skips_a_queue_another_query_consumes_until_it_is_free(
    query_drivers, queue_client, queue_name, caplog
):
    mine, theirs = f"{queue_name}_a", f"{queue_name}_x"
    for q in (mine, theirs):
        queue_client.create_queue(q, bucket_size=10)
        queue_client.put_many(q, [f"{q}-{i}".encode() for i in range(2)])
    conn = queue_client.conn
    other = Lease(
        conn, queue_client.get_queue(theirs), "stream:other-query", 5.0, ClusterClock(conn)
    )
    other.ensure()  # renewed by its thread, as a live query's
    d = query_drivers(queuePattern=f"{queue_name}_.*", consumerId=f"{queue_name}-p", leaseTimeout=3)
    try:
        with caplog.at_level(logging.WARNING, logger="cassieq_spark.spark.source"):
            d.start()
            first = d.batch()
        assert sorted(first) == [0, 1] and set(d.offset["queues"]) == {mine}
        assert "stream:other-query" in caplog.text
    finally:
        other.release()
    got = []
    for _ in range(3):  # joins in the next trigger (a batch delivering nothing of it), then read
        got += d.batch()
    d.commit()
    assert sorted(got) == [0, 1]
    assert queue_client.stats(theirs)["acked"] == 2 and queue_client.stats(mine)["acked"] == 2


def test_taking_over_a_lease_just_renewed_under_the_same_consumer_id_warns(
    query_drivers, queue_client, queue_name, caplog
):
    queue_client.create_queue(queue_name, bucket_size=10)
    first = query_drivers(queue=queue_name, consumerId=f"{queue_name}-copied")
    first.start()
    second = query_drivers(queue=queue_name, consumerId=f"{queue_name}-copied")
    with caplog.at_level(logging.WARNING, logger="cassieq_spark.engine.stream.lease"):
        second.start()
    assert "consumerId" in caplog.text and "may still be alive" in caplog.text
