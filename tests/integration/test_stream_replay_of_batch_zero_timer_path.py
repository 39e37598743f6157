"""A replay of batch 0 after a client received one of its timer-path rows reads the rows its
first attempt read.

Spark hands batch 0 the replaying run's ``initialOffset()`` as its start, and the time of that
start is the queue's invisibility pointer of the replaying run, which client gets move while
no run holds the lease. The timer path of the replay must still start where the first attempt's
did: otherwise one client delivery takes a redelivered message out of the replay, and a keyed
write of the batch fails on every restart. The stream is the Spark source's driver side in this
process (``support.driver.Driver``), against the real Cassandra.
"""

from __future__ import annotations

import time

import pytest

from cassieq_spark.engine.core import pointers
from cassieq_spark.engine.core.clock import TIMER_SETTLE_SLOTS, timer_slot

pytestmark = pytest.mark.integration


def read_batch(driver, start: dict, end: dict) -> list[tuple[int, bytes]]:
    out = []
    for part in driver.reader.partitions(start, end):
        for batch in driver.reader.read(part):
            cols = batch.to_pydict()
            out += zip(cols["id"], cols["value"], strict=True)
    return sorted(out)


def test_a_client_delivery_after_the_lease_lapsed_does_not_take_a_timer_row_out_of_batch_zero(
    queue_client, queue_name, drivers
):
    q = queue_client
    q.create_queue(queue_name, bucket_size=100)
    ids = [q.put(queue_name, b"m0", delay=1)]  # a delayed message
    q.put(queue_name, b"m1")
    m1 = q.get(queue_name)  # the reader pointer passes m0, which is left to the timer path
    assert m1 is not None and m1.text == "m1" and q.ack(queue_name, m1.pop_receipt)
    time.sleep(1.5)

    first_run = drivers(queue_name, consumerId="k3")
    start = first_run.start()
    end = first_run.plan()
    first = read_batch(first_run, start, end)
    assert [i for i, _ in first] == ids
    first_run.reader.stop()  # dies before Spark's commit: the lease is free for clients

    again = q.get(queue_name, visibility_timeout=30)  # its first delivery: a replay undoes it
    assert again is not None and again.id == ids[0]
    # A client get that finds nothing moves the invisibility pointer to its time minus the
    # settle margin; ten seconds on, that is past the slot the first attempt's timer path
    # started at. Moved here as such a get would, rather than waited for.
    due_slot = timer_slot(int(end["ts"]) / 1000)
    assert pointers.advance(
        q.conn, q.get_queue(queue_name), "timer_slot", due_slot + 2 * TIMER_SETTLE_SLOTS
    )

    replay_run = drivers(queue_name, consumerId="k3")
    replay_start = replay_run.start()  # Spark asks initialOffset() again for batch 0
    assert replay_start != start, "the replaying run's start moved with the client's get"
    assert read_batch(replay_run, replay_start, end) == first
