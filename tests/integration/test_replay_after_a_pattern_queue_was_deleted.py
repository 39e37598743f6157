"""A batch replayed after one of its ``queuePattern`` queues was deleted has fewer partitions,
and the later queues' partitions move down: a sink keyed by partition (the cassieq sink,
``df.write`` with ``writeId``) meets keys written with other rows. It fails closed with
ReplayMismatchError naming the deleted queue as a cause and ``replayMismatch=writeAgain`` as
the way on, which writes every row (duplicates, no loss). Spark-semantics review 2, S7 (iv);
the other replays that differ (clients after the lease lapsed, TTL, purge) are documented in
docs/spark.md. The source's and the sink's driver and task calls are made in this process."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from support.queues import drain

from cassieq_spark.errors import ReplayMismatchError
from cassieq_spark.spark.options import resolve_queue, sink_options
from cassieq_spark.spark.sink import InputLayout, SinkPlan, TaskWrite
from cassieq_spark.spark.sink_input import arrow_slices

pytestmark = pytest.mark.integration


def _sink(queue_client, cassieq_options, dst: str, **options) -> SinkPlan:
    opts = sink_options({**cassieq_options, "queue": dst, **options}, streaming=False)
    info = resolve_queue(queue_client.conn, opts.common)
    return SinkPlan(opts, info, InputLayout(0, True, None, None), False, "pattern-replay")


def _write_batch(d, start, end, plan: SinkPlan) -> list[str]:
    """Spark's tasks of the batch: partition i of the source is the sink's task i."""
    written = []
    for i, part in enumerate(d.reader.partitions(start, end)):
        values = [f"{r['queue']}:{r['id']}" for b in d.reader.read(part) for r in b.to_pylist()]
        task = TaskWrite(plan, partition=i)
        batch = pa.record_batch([pa.array(values, pa.string())], names=["value"])
        task.run(arrow_slices(task, iter([batch])))
        written += values
    return written


def test_a_replay_without_a_deleted_pattern_queue_fails_closed_then_writes_again(
    query_drivers, queue_client, queue_name, cassieq_options
):
    a, b, dst = f"{queue_name}_p_a", f"{queue_name}_p_b", f"{queue_name}_dst"
    for q in (a, b):
        queue_client.create_queue(q, bucket_size=10)
        queue_client.put_many(q, [b"x"] * 3)
    queue_client.create_queue(dst, bucket_size=100)
    pattern = {"queuePattern": f"{queue_name}_p_.*", "consumerId": f"{queue_name}-r"}
    first = query_drivers(**pattern)
    start = first.start()
    end = first.plan()
    _write_batch(first, start, end, _sink(queue_client, cassieq_options, dst))
    first.reader.stop()  # the driver dies before Spark's commit log: the batch is replayed
    queue_client.delete_queue(a)

    replay = query_drivers(**pattern)
    replay.start(start)
    with pytest.raises(ReplayMismatchError) as err:
        _write_batch(replay, start, end, _sink(queue_client, cassieq_options, dst))
    assert "a queue of the source was deleted" in str(err.value)
    assert "replayMismatch=writeAgain" in str(err.value)

    again = _sink(queue_client, cassieq_options, dst, replayMismatch="writeAgain")
    assert _write_batch(replay, start, end, again) == [f"{b}:{i}" for i in range(3)]
    seen = drain(queue_client, dst)
    assert {f"{b}:{i}" for i in range(3)} <= set(seen)  # b's rows, none lost
    assert Counter(v.split(":")[0] for v in seen)[a] == 3  # a's, from the first attempt
