"""A keyed write replayed, or a writer that stalled, after repair finished its block *and*
forgot the range (its bucket reclaimed, its bookkeeping dropped) delivers every row it reports.

The forget is what these tests force: each queue's bucket is exactly one block (64 ids), so the
single ``repair()`` that finishes the block also reclaims its bucket, moves the repair pointer
past it and forgets the range, before the replay or the late write comes. Each test checks that
the forget happened, then counts every delivery by value.

Sink task attempts run in process as Spark runs them (``TaskWrite`` with one plan); the stall
and the lost replies go through the fault seam.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pyarrow as pa
import pytest
from support.queues import drain

from cassieq_spark.engine.core import messages, monoton
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.upkeep.ranges import record_skipped, skipped_ranges
from cassieq_spark.engine.write.producer import enqueue
from cassieq_spark.errors import CassieQError
from cassieq_spark.spark.options import resolve_queue, sink_options
from cassieq_spark.spark.sink import InputLayout, SinkPlan, TaskWrite
from cassieq_spark.spark.sink_input import arrow_slices

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]

BLOCK = 64  # ids per block (idBlockSize) and per bucket: finishing a block forgets it


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


# The next few helpers are copied from test_protocol_sink.py (test modules do not import each
# other): a sink plan, one task attempt, and a drain that counts deliveries by value.


def _plan(queue_client, cassieq_options, queue_name, write_id: str) -> SinkPlan:
    opts = sink_options(
        {**cassieq_options, "queue": queue_name, "idBlockSize": str(BLOCK)}, streaming=False
    )
    info = resolve_queue(queue_client.conn, opts.common)
    return SinkPlan(opts, info, InputLayout(0, True, None, None), False, write_id)


def _run(plan: SinkPlan, values: list[str], partition: int = 0):
    task = TaskWrite(plan, partition=partition)
    batch = pa.record_batch([pa.array(values, pa.string())], names=["value"])
    return task.run(arrow_slices(task.input, iter([batch])))


def _values(lo: int, hi: int) -> list[str]:
    return [f"v{i}" for i in range(lo, hi)]


def _create(queue_client, queue_name):
    return queue_client.create_queue(queue_name, bucket_size=BLOCK, repair_timeout=1)


def _assert_forgotten(queue_client, info, report) -> None:
    """Repair reclaimed bucket 0 and forgot its range: what these tests are about."""
    assert report.buckets_reclaimed >= 1 and report.repair_pointer >= 1, report
    assert not [r for r in skipped_ranges(queue_client.conn, info) if r.lo < BLOCK]


def _crashed_attempt_repaired_and_forgotten(queue_client, info, queue_name, key, values):
    """A dead attempt reserved ``key`` (ids 0..63) and wrote the first 32 rows; readers handed
    the block to repair, and one repair pass republished the 32, counted 32 lost, reclaimed
    bucket 0 and forgot the range."""
    conn = queue_client.conn
    first = monoton.reserve_keyed(conn, info, key, BLOCK)
    assert (first.lo, first.hi) == (0, BLOCK)
    messages.write_messages(conn, info, first.lo, [v.encode() for v in values[:32]])
    queue_client.put(queue_name, "marker")  # id 64, in bucket 1
    time.sleep(1.3)  # older than the repair timeout: readers pass it and hand it to repair
    m = queue_client.get(queue_name)
    assert m is not None and m.text == "marker"
    queue_client.ack(queue_name, m.pop_receipt)
    time.sleep(1.2)  # repair waits the repair timeout once more
    report = queue_client.repair(queue_name)
    assert (report.republished, report.lost_ids) == (32, 32), report
    _assert_forgotten(queue_client, info, report)


def test_sink_replay_after_its_block_was_repaired_and_forgotten_writes_what_repair_did_not_deliver(
    cassieq_options, queue_client, queue_name
):
    """G1: the task's first attempt died after writing half of its first chunk; a replay after
    repair forgot that block must not take the missing reservation row for "closed by its
    writer". It re-homes the 32 rows repair did not deliver, counts the 32 republished ones
    as replayed, and a further replay writes nothing."""
    _create(queue_client, queue_name)
    plan = _plan(queue_client, cassieq_options, queue_name, "crashed")
    values = _values(0, 150)  # chunks of 64, 64, 22
    _crashed_attempt_repaired_and_forgotten(
        queue_client, plan.queue, queue_name, "w:crashed:0:0", values
    )

    msg = _run(plan, values)
    seen = drain(queue_client, queue_name)
    missing = sorted(set(values) - set(seen), key=lambda v: int(v[1:]))
    assert (msg.written, msg.replayed, missing) == (118, 32, [])
    assert seen == Counter(values)

    again = _run(plan, values)
    assert (again.written, again.replayed) == (0, 150)
    assert drain(queue_client, queue_name) == Counter()


def test_keyed_enqueue_after_its_block_was_repaired_and_forgotten_writes_what_repair_did_not_deliver(
    queue_client, queue_name
):
    """G1, the keyed enqueue that dead-letter copies, moves and redrives use: the call repeated
    after repair forgot its half-written block writes the 32 undelivered rows again, and a
    third call writes nothing."""
    info = _create(queue_client, queue_name)
    values = _values(0, BLOCK)
    _crashed_attempt_repaired_and_forgotten(queue_client, info, queue_name, "dlq:x#0", values)
    payloads = [v.encode() for v in values]
    ids = enqueue(queue_client.conn, queue_client.counters, info, payloads, key="dlq:x")
    assert ids[:32] == list(range(32))  # delivered by repair's copies
    assert min(ids[32:]) > BLOCK  # written again, into a new block
    assert drain(queue_client, queue_name) == Counter(values)
    assert enqueue(queue_client.conn, queue_client.counters, info, payloads, key="dlq:x") == ids
    assert drain(queue_client, queue_name) == Counter()


def _stall_until_repaired_and_forgotten(queue_client, info, queue_name):
    """At the writer's first write: readers skip its block, and one repair pass finishes it
    empty, reclaims its bucket and forgets it. The writer then writes into a dropped bucket."""

    def action(queue, res):
        faults.on("writes.before_write", lambda **_: None)  # once: not the rewrite
        time.sleep(1.3)
        assert queue_client.get(queue_name) is None  # hands the block to repair, reader at 64
        time.sleep(1.2)
        report = queue_client.repair(queue_name)
        assert (report.republished, report.lost_ids) == (0, res.count), report
        _assert_forgotten(queue_client, info, report)

    faults.on("writes.before_write", action)


def test_sink_task_whose_block_is_forgotten_before_its_rows_land_fails_and_retries(
    cassieq_options, queue_client, queue_name
):
    """G2: a writer stalled past the repair and the forget of its block must not close the
    missing reservation row as if it were still open (that reported 64 rows written into a
    dropped bucket, none delivered). The task fails; its retry re-homes all 64."""
    info = _create(queue_client, queue_name)
    plan = _plan(queue_client, cassieq_options, queue_name, "stalled")
    values = _values(0, BLOCK)
    _stall_until_repaired_and_forgotten(queue_client, info, queue_name)
    with pytest.raises(CassieQError, match="repaired before all rows landed"):
        _run(plan, values)
    faults.reset()
    msg = _run(plan, values)
    assert (msg.written, msg.replayed) == (BLOCK, 0)
    assert drain(queue_client, queue_name) == Counter(values)


def test_put_many_whose_block_is_forgotten_before_its_rows_land_writes_them_again(
    queue_client, queue_name
):
    """G2 without a key: ``put_many`` stalled past the repair and forget of its block writes
    its rows again into a new block and returns their new ids."""
    info = _create(queue_client, queue_name)
    values = _values(0, BLOCK)
    _stall_until_repaired_and_forgotten(queue_client, info, queue_name)
    ids = queue_client.put_many(queue_name, values)
    faults.reset()
    assert min(ids) >= BLOCK  # the first block (0..63) was repaired empty and forgotten
    assert drain(queue_client, queue_name) == Counter(values)


@pytest.mark.parametrize("keyed", [False, True], ids=["put_many", "sink"])
def test_late_close_whose_reply_is_lost_counts_as_closed_once(
    cassieq_options, queue_client, queue_name, keyed
):
    """A writer slower than half the repair timeout closes with a compare-and-set; when it
    applies and its reply is lost, the missing row it leaves must read as "closed by us",
    not as "forgotten by repair": every row is delivered once, none written twice."""
    info = _create(queue_client, queue_name)
    values = _values(0, 10)
    late: list = []
    faults.on("monoton.before_late_close", lambda **ctx: late.append(ctx["res"]))

    def slow(queue, res):
        time.sleep(0.6)  # > repair_timeout / 2, < repair_timeout: no reader may skip it

    faults.on("writes.before_write", slow)
    lost = faults.inject(faults.LOST_REPLY, r"DELETE FROM \S*monoton .* IF ", times=1)
    if keyed:
        plan = _plan(queue_client, cassieq_options, queue_name, "late")
        msg = _run(plan, values)
        assert (msg.written, msg.replayed) == (10, 0)
    else:
        ids = queue_client.put_many(queue_name, values)
        assert ids == list(range(10))
    assert len(late) == 1
    assert lost.hits == 1 or os.environ.get(faults.ENV)  # the whole-run mode loses it anyway
    assert drain(queue_client, queue_name) == Counter(values)
    assert monoton.horizon(queue_client.conn, info, 0).open_count == 0


def test_writer_pushing_back_a_repair_that_forgets_the_range_meanwhile_brings_nothing_back(
    cassieq_options, queue_client, queue_name
):
    """A task whose close lost to a reader's skip pushes back the repair of its range; if
    repair finishes and forgets the range between the writer's look at the reservation and
    its insert of the range row, the insert must be taken back: a range brought back over a
    reclaimed bucket would be repaired again, its 64 ids counted lost although repair had
    delivered them. The task reports its rows written; each is delivered once."""
    info = _create(queue_client, queue_name)
    plan = _plan(queue_client, cassieq_options, queue_name, "pushback")
    values = _values(0, BLOCK)

    def reader_skips(task):
        time.sleep(1.3)
        assert queue_client.get(queue_name) is None  # skips the block, reader at 64

    def repair_forgets(queue, res):
        time.sleep(1.2)
        report = queue_client.repair(queue_name)
        assert (report.republished, report.lost_ids) == (BLOCK, 0), report
        _assert_forgotten(queue_client, info, report)

    faults.on("sink.before_close", reader_skips)
    faults.on("settle.before_restart_clock", repair_forgets)
    msg = _run(plan, values)
    faults.reset()
    assert (msg.written, msg.replayed) == (BLOCK, 0)
    assert not [r for r in skipped_ranges(queue_client.conn, info) if r.lo < BLOCK]
    time.sleep(1.2)
    assert queue_client.repair(queue_name).lost_ids == 0
    assert queue_client.stats(queue_name)["lost"] == 0
    assert drain(queue_client, queue_name) == Counter(values)


def test_a_reader_behind_a_forgotten_range_neither_reopens_nor_recounts_it(
    queue_client, queue_name
):
    """A reader whose view predates the forget (a stream replaying an old batch, a consumer
    with a stale horizon) hands the forgotten block to repair again: that must not bring the
    range back, or repair would count its ids lost a second time."""
    info = _create(queue_client, queue_name)
    values = _values(0, BLOCK)
    _crashed_attempt_repaired_and_forgotten(queue_client, info, queue_name, "k:stale#0", values)
    assert monoton.horizon(queue_client.conn, info, 0).abandoned == ()
    record_skipped(queue_client.conn, info, 0, BLOCK)
    assert not [r for r in skipped_ranges(queue_client.conn, info) if r.lo < BLOCK]
    time.sleep(1.2)
    report = queue_client.repair(queue_name)
    assert (report.republished, report.lost_ids) == (0, 0), report
    assert queue_client.stats(queue_name)["lost"] == 32
