"""``Trigger.AvailableNow`` with ``maxMessagesPerTrigger`` below the number of queues reads every
queue to its target: a share a queue without messages leaves goes to the others, so a trigger
is empty only when every queue is (spark-semantics review 2, S12; before, a trigger whose only
share fell on an exhausted queue ended the run with the other queue's messages unread and its
last batch unacked). Spark's driver calls are made in this process (``support.driver``)."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

pytestmark = pytest.mark.integration


def test_available_now_with_a_cap_of_one_reads_both_queues_whole(
    query_drivers, queue_client, queue_name
):
    a, b = f"{queue_name}_a", f"{queue_name}_b"
    for q, n in ((a, 1), (b, 3)):
        queue_client.create_queue(q, bucket_size=10)
        queue_client.put_many(q, [f"{q}-{i}".encode() for i in range(n)])
    d = query_drivers(queues=f"{a},{b}", maxMessagesPerTrigger=1, consumerId=f"{queue_name}-n")
    d.reader.prepareForTriggerAvailableNow()
    d.start()
    rows = []
    for _ in range(10):
        end = d.plan(ReadMaxRows(1))  # the call after the last batch also acks it
        if end is None:
            break  # no new data: the AvailableNow run ends
        rows += d.rows(d.offset, end)
        d.offset = end
    assert Counter((r["queue"], r["id"]) for r in rows) == Counter([(a, 0), (b, 0), (b, 1), (b, 2)])
    assert queue_client.stats(a)["acked"] == 1 and queue_client.stats(b)["acked"] == 3
