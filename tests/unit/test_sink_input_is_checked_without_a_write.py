"""The sink's row checks need the input's layout, option 'queue' and a queue resolver, not the
write: Arrow batches and Spark rows become checked ``Slice`` values, row positions count on
across slices, and a slice with a bad row is never handed on.

Pure: no Cassandra, no Spark session; the resolver is a table of queues, as a task's resolver
is once it looked them up. (A task pulling these slices into its write, and the rollback of a
failed one, are in tests/integration/test_sink_row_errors.py and test_sink_routing.py.)
"""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from cassieq_spark.engine.core.queues import QueueInfo
from cassieq_spark.engine.write.keyed_write import Slice
from cassieq_spark.errors import ConfigError, PayloadTooLargeError, QueueNotFoundError
from cassieq_spark.spark.sink_input import (
    ROWS_PER_SLICE,
    InputCheck,
    InputLayout,
    arrow_slices,
    row_slices,
)

DEFAULT = QueueInfo("orders", uuid.uuid4(), max_payload_bytes=4)
SMALL = QueueInfo("small", uuid.uuid4(), max_payload_bytes=2)
VALUE_ONLY = InputLayout(0, True, None, None)
ROUTED = InputLayout(0, True, None, None, queue=1)


def _table(*known: QueueInfo):
    infos = {q.name: q for q in known}
    asked: list[str] = []

    def resolve(name: str) -> QueueInfo:
        asked.append(name)
        if name not in infos:
            raise QueueNotFoundError(f"queue {name!r} does not exist")
        return infos[name]

    return resolve, asked


def test_arrow_batches_become_slices_of_option_queue() -> None:
    check = InputCheck(VALUE_ONLY, DEFAULT, partition=3)
    batches = [pa.record_batch([pa.array(v)], names=["value"]) for v in (["a", "bc"], [], ["d"])]
    assert list(arrow_slices(check, iter(batches))) == [
        Slice([b"a", b"bc"], None, None, [1, 2]),
        Slice([b"d"], None, None, [1]),
    ]


def test_a_bad_row_names_its_position_in_the_partition_across_slices() -> None:
    check = InputCheck(VALUE_ONLY, DEFAULT, partition=3)
    batches = [pa.record_batch([pa.array(v)], names=["value"]) for v in (["a", "b"], ["c", None])]
    slices = arrow_slices(check, iter(batches))
    assert next(slices).payloads == [b"a", b"b"]
    with pytest.raises(ConfigError, match=r"row 3 \(0-based\) of partition 3"):
        next(slices)


def test_rows_are_cut_into_slices_of_rows_per_slice() -> None:
    check = InputCheck(VALUE_ONLY, DEFAULT)
    rows = [("x",)] * (ROWS_PER_SLICE + 1)
    assert [len(s.payloads) for s in row_slices(check, iter(rows))] == [ROWS_PER_SLICE, 1]


@pytest.mark.parametrize("writer", ["arrow", "rows"])
def test_routed_rows_get_their_queue_and_its_payload_limit(writer: str) -> None:
    resolve, asked = _table(DEFAULT, SMALL)
    check = InputCheck(ROUTED, DEFAULT, resolve)
    values, queues = ["ab", "abcd", "c"], ["small", None, "small"]
    if writer == "arrow":
        batch = pa.record_batch([pa.array(values), pa.array(queues)], names=["value", "queue"])
        (got,) = arrow_slices(check, iter([batch]))
    else:
        (got,) = row_slices(check, iter(zip(values, queues, strict=True)))
    assert got.dests == ["small", "orders", "small"]
    assert asked == ["small"]  # option 'queue' is known; each other queue resolved once
    if writer == "arrow":
        over = pa.record_batch([pa.array(["abc"]), pa.array(["small"])], names=["value", "queue"])
        source = arrow_slices(check, iter([over]))
    else:
        source = row_slices(check, iter([("abc", "small")]))
    with pytest.raises(PayloadTooLargeError, match="queue 'small' allows at most 2"):
        next(source)


def test_an_unknown_queue_fails_the_slice_naming_the_row() -> None:
    resolve, _ = _table(DEFAULT)
    check = InputCheck(ROUTED, DEFAULT, resolve, partition=1)
    batch = pa.record_batch(
        [pa.array(["a", "b"]), pa.array([None, "nope"])], names=["value", "queue"]
    )
    with pytest.raises(
        QueueNotFoundError, match=r"column 'queue' at row 1 \(0-based\) of partition 1"
    ):
        next(arrow_slices(check, iter([batch])))


def test_a_null_queue_without_option_queue_is_refused() -> None:
    resolve, _ = _table()
    check = InputCheck(ROUTED, None, resolve)
    with pytest.raises(ConfigError, match="column 'queue' is null at row 0"):
        next(row_slices(check, iter([("a", None)])))
