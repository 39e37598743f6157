"""A query that starts above the queue's reader pointer (``startingPosition`` ``latest``,
``{"id"}``, ``{"timestamp"}`` over a backlog) acks its batches message by message for as long
as it runs: the ids below its start belong to clients, which its lease keeps out, so nothing
moves the pointer over the gap (spark-semantics review 2, S13: documented in
docs/status.md as a cost, not a loss). Once the query stops, clients get exactly the
messages below its start. Spark's driver calls are made in this process (``support.driver``)."""

from __future__ import annotations

from collections import Counter

import pytest
from support.queues import drain

from cassieq_spark.errors import QueueBusyError

pytestmark = pytest.mark.integration


def test_batches_above_the_start_are_acked_per_message_and_the_gap_waits_for_clients(
    drivers, queue_client, queue_name
):
    queue_client.create_queue(queue_name, bucket_size=10)
    queue_client.put_many(queue_name, [b"old"] * 5)
    d = drivers(queue_name, startingPosition="latest")
    d.start()
    new = queue_client.put_many(queue_name, [b"new"] * 5)
    assert sorted(d.batch()) == new
    assert d.plan() is None  # acks the batch
    st = queue_client.stats(queue_name)
    assert (st["reader_pointer"], st["acked"], st["backlog"]) == (0, 5, 5), st
    with pytest.raises(QueueBusyError):
        queue_client.get(queue_name)
    d.reader.stop()
    assert drain(queue_client, queue_name) == Counter({"old": 5})
