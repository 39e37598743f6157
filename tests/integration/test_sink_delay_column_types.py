"""A bigint ``delay`` column with a value a double cannot hold exactly (beyond 2**53) fails its
task with the sink's own one-line error naming the row, as any out-of-range delay does, not
with Arrow's raw ``ArrowInvalid`` from the cast to double; in-range bigint delays are taken.
The task is fed an Arrow record batch as an executor feeds it, planned against the real
Cassandra, without Spark (as in tests/integration/test_sink_row_errors.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.sink import TaskWrite, plan_sink
from cassieq_spark.spark.sink_input import arrow_slices

pytestmark = pytest.mark.integration

SCHEMA = StructType([StructField("value", StringType()), StructField("delay", LongType())])


def _write(options: dict, delays: list[int]) -> None:
    plan = plan_sink(options, SCHEMA, overwrite=False, streaming=False)
    task = TaskWrite(plan, 0)
    batch = pa.record_batch(
        [pa.array([str(i) for i in range(len(delays))]), pa.array(delays, pa.int64())],
        names=["value", "delay"],
    )
    task.run(arrow_slices(task.input, iter([batch])))


def test_a_bigint_delay_beyond_a_double_is_refused_naming_its_row(
    queue_client, queue_name, cassieq_options
) -> None:
    """N324: delay CAST(9223372036854775807 AS BIGINT)."""
    queue_client.create_queue(queue_name)
    options = {**cassieq_options, "queue": queue_name}
    with pytest.raises(ConfigError) as info:
        _write(options, [0, 2**63 - 1, 5])
    message = str(info.value)
    assert "column 'delay' is 9.223372036854776e+18 at row 1 (0-based) of partition 0" in message
    assert "from 0 to 43200" in message and "\n" not in message
    assert queue_client.stats(queue_name)["enqueued"] == 0
    _write(options, [0, 60, 2])
    stats = queue_client.stats(queue_name)
    assert (stats["enqueued"], stats["backlog"], stats["delayed"]) == (3, 1, 2)
