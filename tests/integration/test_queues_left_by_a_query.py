"""A queue a query stops reading (removed from option ``queues``, or deleted under a batch that
never committed) is let go: its last committed batch is acked, its lease given back, and a
replayed batch goes on without a deleted queue's messages.

Spark's driver calls are made in this process in Spark's order (``support.driver``): a restart
resumes at the logged end offset, replays the uncommitted batch with ``partitions(start, end)``,
then plans the next batch with ``latestOffset(end)`` and calls ``commit(end)`` after logging it.
"""

from __future__ import annotations

import pytest

from cassieq_spark.errors import QueueNotFoundError

pytestmark = pytest.mark.integration


def _queues(queue_client, queue_name):
    a, b = f"{queue_name}_a", f"{queue_name}_b"
    for q in (a, b):
        queue_client.create_queue(q, bucket_size=10)
        queue_client.put_many(q, [f"{q}-{i}".encode() for i in range(3)])
    return a, b


def _first_batch(query_drivers, a, b, consumer):
    """Run 1 plans and reads a batch of a and b, then stops before anything is acked."""
    d = query_drivers(queues=f"{a},{b}", consumerId=consumer)
    start = d.start()
    end = d.plan()
    assert len(d.read(start, end)) == 6
    d.reader.stop()
    return start, end


def test_a_queue_removed_from_queues_is_acked_and_its_lease_given_back(
    query_drivers, queue_client, queue_name
):
    """S8 (review 2): the committed batch's end still names b; before, commit(end) took b's
    lease again and kept it for the whole run (clients got QueueBusyError), and b's batch was
    left unacked when latestOffset ran first."""
    a, b = _queues(queue_client, queue_name)
    _, end = _first_batch(query_drivers, a, b, f"{queue_name}-r")

    d = query_drivers(queues=a, consumerId=f"{queue_name}-r")
    d.start(end)  # batch 0 committed; the restart plans batch 1, then commits batch 0
    after = d.plan()
    assert after is not None and set(after["queues"]) == {a}  # b left the offset
    d.reader.commit(end)

    assert queue_client.stats(b)["acked"] == 3
    assert queue_client.get(b) is None  # no QueueBusyError: b's lease was given back
    queue_client.put(b, b"later")
    assert queue_client.get(b).text == "later"
    assert queue_client.stats(a)["acked"] == 3


def test_a_replayed_batch_goes_on_without_a_deleted_queue_removed_from_queues(
    query_drivers, queue_client, queue_name
):
    """S9 (review 2): before, every restart failed with QueueNotFoundError resolving b for the
    replay, even once b was removed from option queues; only a new checkpoint recovered."""
    a, b = _queues(queue_client, queue_name)
    start, end = _first_batch(query_drivers, a, b, f"{queue_name}-d")
    queue_client.delete_queue(b)

    d = query_drivers(queues=a, consumerId=f"{queue_name}-d")
    d.start(start)
    assert sorted(d.read(start, end)) == [0, 1, 2]  # a's part of the batch, again
    d.offset = end
    after = d.plan()
    assert after is not None and set(after["queues"]) == {a}
    d.reader.commit(end)
    assert queue_client.stats(a)["acked"] == 3
    d.reader.stop()

    # while the deleted queue is still named, the replay says how to go on
    named = query_drivers(queues=f"{a},{b}", consumerId=f"{queue_name}-d")
    named.start(start)
    with pytest.raises(QueueNotFoundError, match=f"remove '{b}' from option 'queues'"):
        named.read(start, end)
