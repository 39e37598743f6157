"""The sink's checks of each row, run as a Spark task runs them but without Spark: the plan made
on the driver (``plan_sink``, against the real Cassandra), then one task fed Arrow record batches
(default) or rows (``writerType=rows``), as an executor feeds it. A bad row fails the task with a
message naming the column, the row and the partition, and the task leaves nothing behind. The rows
are the bad-input sweep's Spark rows of that kind (ids as in ``shared/reviews/bad-inputs.md``;
``x``: the second sweep); how a task's error reaches the user through Spark is tested in
tests/integration/test_bad_inputs_spark.py."""

from __future__ import annotations

import re
import uuid

import pyarrow as pa
import pytest
from pyspark.sql.types import DoubleType, MapType, StringType, StructField, StructType

from cassieq_spark.errors import CassieQError
from cassieq_spark.spark.sink import RoutedTask, TaskWrite, plan_sink
from cassieq_spark.spark.sink_input import arrow_slices, row_slices

pytestmark = pytest.mark.integration

P = f"br{uuid.uuid4().hex[:6]}_"
HEADERS = MapType(StringType(), StringType())
TYPES = {  # column: (Spark type, Arrow type)
    "value": (StringType(), pa.string()),
    "headers": (HEADERS, pa.map_(pa.string(), pa.string())),
    "delay": (DoubleType(), pa.float64()),
    "queue": (StringType(), pa.string()),
}


def write(options: dict, columns: dict[str, list], writer: str = "arrow", **extra) -> None:
    """One batch-write task of the rows ``columns`` (name: values), planned with ``options``
    plus ``extra`` (None: left out), fed the way ``writerType`` ``writer`` feeds it."""
    opts = {k: v for k, v in {**options, "writerType": writer, **extra}.items() if v is not None}
    schema = StructType([StructField(name, TYPES[name][0]) for name in columns])
    plan = plan_sink(opts, schema, overwrite=False, streaming=False)
    task = RoutedTask(plan, 0) if plan.layout.queue is not None else TaskWrite(plan, 0)
    if writer == "rows":
        task.run(row_slices(task.input, iter(list(zip(*columns.values(), strict=True)))))
        return
    arrays = [pa.array(v, TYPES[name][1]) for name, v in columns.items()]
    task.run(arrow_slices(task.input, iter([pa.record_batch(arrays, names=list(columns))])))


def values(n: int) -> list[str | None]:
    return [str(i) for i in range(n)]


def null_at(n: int, i: int) -> list[str | None]:
    v = values(n)
    v[i] = None
    return v


# (id, columns, writer type, extra options, regex of "ErrorClass: message" or None: succeeds)
# fmt: off
ROWS = [
    ("S07", {"value": null_at(3, 1)}, "arrow", {}, r"ConfigError: column 'value' is null at row 1 \(0-based\) of partition 0"),
    ("S08", {"value": null_at(25000, 24000)}, "arrow", {}, r"ConfigError: column 'value' is null at row 24000"),
    ("S18", {"value": values(3), "headers": [[("k", None)]] * 3}, "arrow", {}, r"ConfigError: column 'headers' has a null value at row 0"),
    ("S19", {"value": values(3), "delay": [-5.0] * 3}, "arrow", {}, r"ConfigError: column 'delay' is -5.0 at row 0 \(0-based\) of partition 0; it must be a finite number of seconds from 0 to 43200"),
    ("S20", {"value": values(3), "delay": [1e300] * 3}, "arrow", {}, r"ConfigError: column 'delay' is 1e\+300 at row 0 .* from 0 to 43200"),
    ("S21", {"value": [("x" * 2097152 if i == 5 else str(i)) for i in range(10)]}, "arrow", {}, r"PayloadTooLargeError: column 'value' at row 5 \(0-based\) of partition 0 has 2097152 bytes; queue '\w+' allows at most 1048576"),
    ("S22", {"value": values(200), "headers": [[("big", "h" * 150000)]] * 200}, "arrow", {}, r"PayloadTooLargeError: column 'headers' at row 0 \(0-based\) of partition 0: headers take 150003 bytes; at most 65536 are allowed"),
    ("S45x", {"value": values(300), "headers": [[("big", "h" * 65000)]] * 300}, "arrow", {}, None),
    ("S46x", {"value": values(3), "delay": [43201.0] * 3}, "rows", {}, r"ConfigError: column 'delay' is 43201.0 at row 0 .* from 0 to 43200"),
    ("S50x", {"value": values(1), "headers": [[(str(x), "v") for x in range(1, 1002)]]}, "arrow", {}, r"PayloadTooLargeError: column 'headers' at row 0 .* 1001 entries; at most 1000"),
    ("S58x", {"value": values(3), "queue": [None, None, P + "nosq"]}, "arrow", {"routeByColumn": "true"}, r"QueueNotFoundError: column 'queue' at row 2 \(0-based\) of partition 0: queue '\w+nosq' does not exist in keyspace '\w+'; create it .* or set option createQueue=true"),
    ("S59x", {"value": values(3), "queue": [None, P + "nosq", None]}, "rows", {"routeByColumn": "true"}, r"QueueNotFoundError: column 'queue' at row 1 \(0-based\) of partition 0: queue '\w+nosq' does not exist"),
    ("S61x", {"value": values(3), "queue": [None] * 3}, "arrow", {"queue": None}, r"ConfigError: column 'queue' is null at row 0 \(0-based\) of partition 0 and option 'queue' \(the queue of such rows\) is not set"),
    ("S62x", {"value": values(3), "queue": [None, "a b", None]}, "arrow", {"routeByColumn": "true"}, r"ConfigError: invalid queue name \(column 'queue' at row 1 \(0-based\) of partition 0\) 'a b'"),
]
# fmt: on


@pytest.mark.parametrize(
    "columns,writer,extra,expected", [pytest.param(*r[1:], id=r[0]) for r in ROWS]
)
def test_a_bad_row_fails_its_task_naming_the_row_and_writes_nothing(
    queue_client, queue_name, cassieq_options, columns, writer, extra, expected
):
    queue_client.create_queue(queue_name)
    options = {**cassieq_options, "queue": queue_name}
    if expected is None:  # correct behaviour: every row lands
        write(options, columns, writer, **extra)
        stats = queue_client.stats(queue_name)
        assert (stats["enqueued"], stats["backlog"]) == (len(columns["value"]),) * 2
        return
    with pytest.raises(CassieQError) as info:
        write(options, columns, writer, **extra)
    line = f"{type(info.value).__name__}: {info.value}"
    assert re.search(expected, line), line
    stats = queue_client.stats(queue_name)
    assert (stats["enqueued"], stats["backlog"]) == (0, 0)


def test_a_missing_queue_is_refused_when_the_write_is_planned(queue_client, cassieq_options):
    """S12: the queue named by option 'queue' is looked up on the driver, before any task."""
    options = {**cassieq_options, "queue": P + "nosq"}
    schema = StructType([StructField("value", StringType())])
    with pytest.raises(CassieQError) as info:
        plan_sink(options, schema, overwrite=False, streaming=False)
    line = f"{type(info.value).__name__}: {info.value}"
    assert re.search(
        r"QueueNotFoundError: queue '\w+nosq' does not exist in keyspace '\w+'; create it .* "
        r"or set option createQueue=true",
        line,
    ), line
