"""A replay of a routed write (the sink's ``queue`` column) whose rows name other queues than
its first attempt's: the keys alone cannot see it (a queue only the replay names has free
keys, a queue only the first attempt wrote is never looked at), so the write records which
queues it wrote before it closes a block, and a replay routing elsewhere fails with
``ReplayMismatchError`` with nothing written, unless ``replayMismatch=writeAgain``. Real
Cassandra; Spark's task is played by the sink's own task classes."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql.types import StringType, StructField, StructType
from support.queues import drain

from cassieq_spark.errors import ReplayMismatchError
from cassieq_spark.spark.sink import RoutedTask, plan_sink
from cassieq_spark.spark.sink_input import arrow_slices

pytestmark = pytest.mark.integration

SCHEMA = StructType([StructField("value", StringType()), StructField("queue", StringType())])


def _run(cassieq_options, write_id, values, dests, **options):
    plan = plan_sink(
        {**cassieq_options, "writeId": write_id, "writeIdScope": "global", **options},
        SCHEMA,
        overwrite=False,
        streaming=False,
    )
    batch = pa.record_batch(
        [pa.array(values, pa.string()), pa.array(dests, pa.string())], names=["value", "queue"]
    )
    task = RoutedTask(plan, partition=0)
    return task.run(arrow_slices(task.input, iter([batch])))


def test_a_replay_that_routes_rows_to_another_queue_fails_and_writes_nothing(
    cassieq_options, queue_client, queue_name
):
    a, b = queue_name + "_a", queue_name + "_b"
    for q in (a, b):
        queue_client.create_queue(q, bucket_size=100)
    values = [f"v{i}" for i in range(10)]
    write_id = f"moved-{queue_name}"  # its own: a global writeId's records are keyspace-wide
    first = _run(cassieq_options, write_id, values, [a] * 10)
    assert (first.written, first.replayed) == (10, 0)

    with pytest.raises(ReplayMismatchError) as err:
        _run(
            cassieq_options, write_id, values, [b] * 10
        )  # the routing changed since the first attempt
    assert b in str(err.value) and "earlier attempt" in str(err.value)
    with pytest.raises(ReplayMismatchError):
        _run(cassieq_options, write_id, values, [a] * 5 + [b] * 5)  # a queue more: also another set
    assert drain(queue_client, b) == Counter(), "nothing of the refused replays is delivered"

    same = _run(
        cassieq_options, write_id, values, [a] * 10
    )  # the first routing again: a plain replay
    assert (same.written, same.replayed) == (0, 10)
    moved = _run(cassieq_options, write_id, values, [b] * 10, replayMismatch="writeAgain")
    assert moved.queues == {b: (10, 0)}
    assert drain(queue_client, a) == Counter(values)
    assert drain(queue_client, b) == Counter(values)  # writeAgain: written again, as asked
