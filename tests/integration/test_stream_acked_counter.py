"""The queue's ``acked`` counter counts what a stream's batches delivered, nothing else.

A batch's ack counts the rows Cassandra finds in its id range less the ones that are not
plain. Rows marked dead there were counted as acked too (protocol review 2, G12): a writer's
rolled-back rows, and the messages the stream's delivery count moved to the dead-letter queue.
Real Cassandra; the stream is the Spark source's driver side in this process.
"""

from __future__ import annotations

import uuid

import pytest

from cassieq_spark.engine.write.keyed_write import KeyedWrite

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


def failed_write(q, queue: str, n: int) -> None:
    """A keyed write (a sink task) that fails after its rows landed: rolled back."""
    w = KeyedWrite(
        q.conn, q.get_queue(queue), f"fail-{uuid.uuid4().hex[:8]}", block_size=n, what="a write"
    )

    def feed():
        w.add([b"r"] * n, None, None, [1] * n)
        yield
        raise RuntimeError("injected: the task fails after writing")

    with pytest.raises(RuntimeError, match="injected"):
        w.run(feed())


def test_rolled_back_rows_are_not_counted_acked(queue_client, queue_name, drivers):
    """5 messages, 4 rows rolled back by a failed write, 5 more messages; a stream drains
    them. Before the fix `acked` was 14."""
    q = queue_client
    q.create_queue(queue_name)
    ids = q.put_many(queue_name, [b"a"] * 5)
    failed_write(q, queue_name, 4)
    ids += q.put_many(queue_name, [b"b"] * 5)
    d = drivers(queue_name, consumerId="acked-rollback")
    d.start()
    d.drain()
    assert sorted(d.delivered) == ids
    st = q.stats(queue_name)
    assert st["acked"] == 10 and st["backlog"] == 0, st


def test_messages_the_stream_moved_to_the_dead_letter_queue_are_not_counted_acked(
    queue_client, queue_name, drivers
):
    """Two runs read a batch of 6 without a commit (maxBatchAttempts 2); the third moves them
    to the dead-letter queue and its batch commits empty. Before the fix `acked` was 6 as
    well as `dead_lettered`."""
    q = queue_client
    src, dlq = f"{queue_name}_src", f"{queue_name}_dlq"
    q.create_queue(dlq)
    q.create_queue(src, dead_letter_queue=dlq)
    ids = q.put_many(src, [b"p"] * 6)
    start = end = None
    for _run in range(2):
        d = drivers(src, consumerId="acked-dlq", maxBatchAttempts=2)
        start = d.start(start)
        end = end or d.plan()
        assert sorted(d.read(start, end)) == ids
        d.reader.stop()
    d = drivers(src, consumerId="acked-dlq", maxBatchAttempts=2)
    d.start(start)
    assert d.read(start, end) == []
    d.start(end)
    d.commit()
    st = q.stats(src)
    assert st["dead_lettered"] == 6 and st["acked"] == 0 and st["backlog"] == 0, st
