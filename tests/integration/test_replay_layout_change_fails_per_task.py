"""A replayed batch whose partition layout changed fails closed task by task, not as a batch:
tasks that find a free key write their rows, so after one such attempt even the first layout
meets keys it did not write, and only ``replayMismatch=writeAgain`` goes on; the error says
so (spark-semantics review 2, S6; before, it advised going back to the first attempt's
settings). The sink's tasks run in this process under a ``writeId`` (keys
``w:{writeId}:{partition}:{chunk}``, as a streaming batch's are by partition)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from support.sink import stored_rows

from cassieq_spark.errors import ReplayMismatchError
from cassieq_spark.spark.options import resolve_queue, sink_options
from cassieq_spark.spark.sink import InputLayout, SinkPlan, TaskWrite
from cassieq_spark.spark.sink_input import arrow_slices

pytestmark = pytest.mark.integration

ROWS = [f"v{i}" for i in range(300)]


def _plan(queue_client, cassieq_options, queue_name, **options) -> SinkPlan:
    opts = sink_options(
        {**cassieq_options, "queue": queue_name, "idBlockSize": "1000", **options},
        streaming=False,
    )
    info = resolve_queue(queue_client.conn, opts.common)
    return SinkPlan(opts, info, InputLayout(0, True, None, None), False, "layout-change")


def _task(plan: SinkPlan, partition: int, per_partition: int):
    values = ROWS[partition * per_partition : (partition + 1) * per_partition]
    task = TaskWrite(plan, partition=partition)
    batch = pa.record_batch([pa.array(values, pa.string())], names=["value"])
    return task.run(arrow_slices(task, iter([batch])))


def _attempt(plan: SinkPlan, partitions: int) -> dict[int, str]:
    """Every task of an attempt with ``partitions`` partitions: partition -> outcome."""
    out = {}
    for p in range(partitions):
        try:
            msg = _task(plan, p, len(ROWS) // partitions)
            out[p] = "written" if msg.written else "replayed"
        except ReplayMismatchError as exc:
            out[p] = str(exc)
    return out


def test_a_replay_with_another_layout_writes_fresh_keys_and_first_layout_fails_after(
    cassieq_options, queue_client, queue_name
):
    queue_client.create_queue(queue_name, bucket_size=1000)
    plan = _plan(queue_client, cassieq_options, queue_name)
    # attempt 1, 3 partitions of 100: partitions 1 and 2 write, partition 0 dies before writing
    assert _task(plan, 1, 100).written == 100 and _task(plan, 2, 100).written == 100

    second = _attempt(plan, 6)  # the replay with 6 partitions of 50
    assert {p for p, o in second.items() if o == "written"} == {0, 3, 4, 5}
    assert all("differs from the first attempt" in second[p] for p in (1, 2)), second

    third = _attempt(plan, 3)  # back to the first layout: partition 0 meets attempt 2's key
    assert third[1] == third[2] == "replayed"
    hint = third[0]
    assert "differs from the first attempt" in hint, hint
    assert "helps only if no attempt with other settings ran" in hint, hint
    assert "replayMismatch=writeAgain" in hint

    write_again = _plan(queue_client, cassieq_options, queue_name, replayMismatch="writeAgain")
    again = _attempt(write_again, 3)
    assert set(again.values()) <= {"written", "replayed"}, again
    seen = Counter(bytes(r.payload).decode() for r in stored_rows(queue_client, queue_name))
    assert set(seen) == set(ROWS)  # nothing lost ...
    assert Counter(seen.values())[2] >= 150  # ... and attempt 2's fresh keys are duplicates
