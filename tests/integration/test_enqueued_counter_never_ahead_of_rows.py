"""The ``enqueued`` counter never counts a sink task's rows before they are in the queue.

A sink task (a :class:`KeyedWrite`) reserves its block, writes its rows, closes the block and
only then counts them. So, read *in that order* (the counter first, the rows after), the live
rows of a queue are never fewer than ``enqueued``, whatever step a task is at or dies at. A
task killed between its close and its count leaves its rows uncounted (the counter is short,
never ahead). Read the other way round while a task is still finishing, the counter can be
ahead of a row snapshot taken before its close: that is what a CI run once saw after
``stop()`` of a streaming sink (``enqueued`` 20 above the rows, one micro-batch of that test),
since a killed task's Python worker may finish its write after the query stopped. Real
Cassandra; the task's steps through the fault seam.
"""

from __future__ import annotations

import uuid

import pytest

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import read_range
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.write.keyed_write import KeyedWrite

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]

N = 20
STEPS = ("writes.before_write", "sink.before_close", "sink.closed")


@pytest.fixture(autouse=True)
def _faults():
    yield
    faults.reset()


class Killed(BaseException):
    """What a task kill raises inside the task (not an Exception: nothing may swallow it)."""


def counter_then_rows(q, queue: str) -> tuple[int, int]:
    """(enqueued, live rows), in that order of reading."""
    enqueued = q.stats(queue)["enqueued"]
    info = q.get_queue(queue)
    next_id = monoton.horizon(q.conn, info, 0).next_id
    live = sum(1 for r in read_range(q.conn, info, 0, next_id, "id, dead") if not r.dead)
    return enqueued, live


def task(q, queue: str) -> KeyedWrite:
    return KeyedWrite(
        q.conn, q.get_queue(queue), f"b0:{uuid.uuid4().hex[:8]}", block_size=100, what="task"
    )


def run(w: KeyedWrite) -> None:
    def feed():
        w.add([b"v"] * N, None, None, [1] * N)
        yield

    w.run(feed())


def test_at_every_step_of_a_sink_task_the_counter_is_not_ahead_of_the_rows(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name)
    q.put_many(queue_name, [b"p"] * 5)
    seen = {}
    for step in STEPS:
        faults.on(
            step, lambda step=step, **_: seen.__setitem__(step, counter_then_rows(q, queue_name))
        )
    run(task(q, queue_name))
    seen["finished"] = counter_then_rows(q, queue_name)
    assert seen == {
        "writes.before_write": (5, 5),
        "sink.before_close": (5, 5 + N),
        "sink.closed": (5, 5 + N),
        "finished": (5 + N, 5 + N),
    }


@pytest.mark.parametrize("step", STEPS)
def test_a_sink_task_killed_at_any_step_leaves_the_counter_not_ahead_of_the_rows(
    queue_client, queue_name, step
):
    """Killed before its close: rolled back (rows dead, nothing counted). Killed after its
    close: its rows stay and are delivered, uncounted (the counter is short by them)."""
    q = queue_client
    q.create_queue(queue_name)

    def kill(**_):
        raise Killed(step)

    faults.on(step, kill)
    with pytest.raises(Killed):
        run(task(q, queue_name))
    enqueued, live = counter_then_rows(q, queue_name)
    assert enqueued == 0
    assert live == (N if step == "sink.closed" else 0)


def test_rows_read_before_a_finishing_task_counts_them_fall_behind_the_counter(
    queue_client, queue_name
):
    """The order that misleads: a snapshot of the rows taken while a task is still writing
    (as right after a streaming query's stop(), whose killed task may still be running), the
    counter read after the task counted. The rows are all there when read again."""
    q = queue_client
    q.create_queue(queue_name)
    snapshot = {}

    def rows_now(**_):
        info = q.get_queue(queue_name)
        next_id = monoton.horizon(q.conn, info, 0).next_id
        snapshot["live"] = sum(
            1 for r in read_range(q.conn, info, 0, next_id, "id, dead") if not r.dead
        )

    faults.on("writes.before_write", rows_now)
    run(task(q, queue_name))
    assert (snapshot["live"], q.stats(queue_name)["enqueued"]) == (0, N)
    assert counter_then_rows(q, queue_name) == (N, N)
