"""Protocol findings of the sink and the producer (F2, F4, F11, F23, F25, F27, F28), each forced
deterministically against the real Cassandra: task attempts are run in process as Spark would
run them (``TaskWrite`` with the same plan), races through the fault seam
(``engine/store/faults.py``), and Spark itself where the finding is about Spark's replays.

Every test counts deliveries: it drains the queue with ``get`` and checks that each value came
back exactly once (or at least once, where duplicates are the documented price).
"""

from __future__ import annotations

import itertools
import time
from collections import Counter

import pyarrow as pa
import pytest
from support.queues import drain
from support.sink import (
    TIMEOUT,
    drop_last_commit,
    full_message,
    run_available_now,
    write_text_files,
)

from cassieq_spark.engine.core import messages, monoton
from cassieq_spark.engine.store import faults
from cassieq_spark.errors import CassieQError, ReplayMismatchError
from cassieq_spark.spark.options import resolve_queue, sink_options
from cassieq_spark.spark.sink import InputLayout, SinkPlan, TaskWrite
from cassieq_spark.spark.sink_input import arrow_slices as _arrow_slices

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _plan(queue_client, cassieq_options, queue_name, write_id: str, **options) -> SinkPlan:
    opts = sink_options(
        {**cassieq_options, "queue": queue_name, "idBlockSize": "64", **options}, streaming=False
    )
    info = resolve_queue(queue_client.conn, opts.common)
    return SinkPlan(opts, info, InputLayout(0, True, None, None), False, write_id)


def _batch(values: list[str]) -> pa.RecordBatch:
    return pa.record_batch([pa.array(values, pa.string())], names=["value"])


def _run(plan: SinkPlan, values: list[str], partition: int = 0):
    task = TaskWrite(plan, partition=partition)
    return task.run(_arrow_slices(task.input, iter([_batch(values)])))


def _values(lo: int, hi: int) -> list[str]:
    return [f"v{i}" for i in range(lo, hi)]


# -- F2: writes into a block that repair already finished --------------------------------------


def _crashed_attempt_repaired(queue_client, info, queue_name: str, key: str, values: list[str]):
    """A dead attempt reserved ``key`` (64 ids) and wrote the first 32 rows; readers handed the
    block to repair and repair finished it (32 republished, 32 lost)."""
    conn = queue_client.conn
    first = monoton.reserve_keyed(conn, info, key, 64)
    messages.write_messages(conn, info, first.lo, [v.encode() for v in values[:32]])
    queue_client.put(queue_name, "marker")
    time.sleep(1.3)  # older than the repair timeout: readers pass it and hand it to repair
    m = queue_client.get(queue_name)
    assert m is not None and m.text == "marker"
    queue_client.ack(queue_name, m.pop_receipt)
    time.sleep(1.2)  # repair waits the repair timeout once more
    report = queue_client.repair(queue_name)
    assert (report.republished, report.lost_ids) == (32, 32), report
    return first


def test_replay_after_repair_rewrites_what_repair_did_not_deliver(
    cassieq_options, queue_client, queue_name
):
    """Old code (verified): the retry found the skipped block "open", rewrote all 150 rows
    into it and reported ``written=150``; ids 32..63 landed in a range repair had finished, so
    v32..v63 were never delivered. Now the retry sees the range is repaired, re-homes the rows
    repair did not deliver into a new block, and counts the 32 republished ones as replayed."""
    queue_client.create_queue(queue_name, bucket_size=100, repair_timeout=1)
    plan = _plan(queue_client, cassieq_options, queue_name, "crashed")
    values = _values(0, 150)  # chunks of 64, 64, 22
    _crashed_attempt_repaired(queue_client, plan.queue, queue_name, "w:crashed:0:0", values)

    msg = _run(plan, values)
    assert (msg.written, msg.replayed) == (118, 32)
    seen = drain(queue_client, queue_name)
    assert seen == Counter(values), sorted(set(values) - set(seen))

    # a further replay writes nothing: every chunk (the re-homed part too) is found written
    again = _run(plan, values)
    assert (again.written, again.replayed) == (0, 150)
    assert drain(queue_client, queue_name) == Counter()


def test_keyed_enqueue_after_repair_rewrites_what_repair_did_not_deliver(queue_client, queue_name):
    """``producer.enqueue`` with a key (the dead-letter move) had the same hole (by reading:
    ``find_keyed`` said open, the rows went into the repaired range, the call returned)."""
    from cassieq_spark.engine.write.producer import enqueue

    info = queue_client.create_queue(queue_name, bucket_size=100, repair_timeout=1)
    values = _values(0, 64)
    _crashed_attempt_repaired(queue_client, info, queue_name, "dlq:x#0", values)
    enqueue(
        queue_client.conn, queue_client.counters, info, [v.encode() for v in values], key="dlq:x"
    )
    assert drain(queue_client, queue_name) == Counter(values)


def test_close_lost_to_a_skip_hands_the_rows_to_repair(cassieq_options, queue_client, queue_name):
    """A task slower than the repair timeout: a reader hands its block to repair between its
    last write and its close, so the close loses (``close().result() is False``). The task
    restarts the range's repair clock and reports success; repair delivers every row once.
    (Old code reached the same end here, by luck: it ignored the lost close.)"""
    queue_client.create_queue(queue_name, bucket_size=100, repair_timeout=1)
    plan = _plan(queue_client, cassieq_options, queue_name, "slow")
    values = _values(0, 64)

    def reader_skips(task):
        time.sleep(1.3)
        assert queue_client.get(queue_name) is None  # skips the block, delivers nothing

    faults.on("sink.before_close", reader_skips)
    msg = _run(plan, values)
    faults.reset()
    assert msg.written == 64
    time.sleep(1.2)
    assert queue_client.repair(queue_name).republished == 64
    assert drain(queue_client, queue_name) == Counter(values)


def _skip_and_repair_before_the_write(queue_client, queue_name):
    def action(queue, res):
        faults.on("writes.before_write", lambda **_: None)  # once: not the rewrite
        time.sleep(1.3)
        assert queue_client.get(queue_name) is None  # hands the block to repair
        time.sleep(1.2)
        report = queue_client.repair(queue_name)
        assert (report.republished, report.lost_ids) == (0, res.count)

    faults.on("writes.before_write", action)


def test_task_whose_block_is_repaired_before_its_rows_land_fails_and_retries(
    cassieq_options, queue_client, queue_name
):
    """The writer stalls between reserving and writing for longer than twice the repair
    timeout: readers skip the block and repair finishes it empty. Old code (verified): the task
    wrote into the repaired range, ignored its lost close and reported 64 written; none was
    ever delivered. Now the task fails; its retry re-homes the rows repair did not deliver."""
    queue_client.create_queue(queue_name, bucket_size=100, repair_timeout=1)
    plan = _plan(queue_client, cassieq_options, queue_name, "stalled")
    values = _values(0, 64)
    _skip_and_repair_before_the_write(queue_client, queue_name)
    with pytest.raises(CassieQError, match="repaired before all rows landed"):
        _run(plan, values)
    faults.reset()
    msg = _run(plan, values)
    assert (msg.written, msg.replayed) == (64, 0)
    assert drain(queue_client, queue_name) == Counter(values)


def test_put_many_whose_block_is_repaired_before_its_rows_land_writes_them_again(
    queue_client, queue_name
):
    """Old code (verified): ``put_many`` returned ids in a repaired range, never delivered.
    Now it writes the rows again into a new block and returns their new ids."""
    queue_client.create_queue(queue_name, bucket_size=100, repair_timeout=1)
    values = _values(0, 10)
    _skip_and_repair_before_the_write(queue_client, queue_name)
    ids = queue_client.put_many(queue_name, values)
    faults.reset()
    assert min(ids) >= 10  # the first block (0..9) was repaired empty
    assert drain(queue_client, queue_name) == Counter(values)


# -- F4: one attempt's rollback must not destroy another attempt's block --------------------


def _two_attempts(queue_client, cassieq_options, queue_name, values):
    """A and B run the same task (speculation): A reserves and writes chunk 0, B finds it by
    key and writes the same rows into it. Returns both, each with its one slice added and not
    finished."""
    queue_client.create_queue(queue_name, bucket_size=100)
    plan = _plan(queue_client, cassieq_options, queue_name, "spec")
    a, b = TaskWrite(plan), TaskWrite(plan)
    feed_a = _arrow_slices(a.input, iter([_batch(values)]))
    feed_b = _arrow_slices(b.input, iter([_batch(values)]))
    a.add_slice(next(feed_a))  # chunk 0 (64 rows) reserved by A and written; 36 rows buffered
    b.add_slice(next(feed_b))  # chunk 0 found open under its key, written again by B
    assert a.placed.blocks[0].own and not b.placed.blocks[0].own
    assert a.placed.blocks[0].res.lo == b.placed.blocks[0].res.lo
    return a, b


def test_rollback_of_a_found_block_keeps_the_other_attempts_rows(
    cassieq_options, queue_client, queue_name
):
    """The review's scenario: A finishes, B is killed and rolls back. Old code (verified): B's
    rollback marked the 64 rows of chunk 0 dead and deleted the key, after A's commit."""
    values = _values(0, 100)
    a, b = _two_attempts(queue_client, cassieq_options, queue_name, values)
    assert a.finish().written == 100
    b.rollback()
    assert drain(queue_client, queue_name) == Counter(values)


def test_owner_rollback_after_the_other_attempt_committed_keeps_its_rows(
    cassieq_options, queue_client, queue_name
):
    """The other order, the usual one for speculation: the copy (B, which found the block)
    finishes first and Spark kills the original (A, which reserved it). Old code (verified):
    A's rollback of "its" block marked B's committed rows dead."""
    values = _values(0, 100)
    a, b = _two_attempts(queue_client, cassieq_options, queue_name, values)
    assert b.finish().written == 100
    a.rollback()
    assert drain(queue_client, queue_name) == Counter(values)


def test_attempt_sharing_a_rolled_back_block_fails_and_the_retry_writes_once(
    cassieq_options, queue_client, queue_name
):
    """A rolls back first; B, which wrote into A's block, must not report success (old code,
    verified: B's close applied to the deleted row and B committed 64 dead rows). A third
    attempt then writes every row exactly once."""
    values = _values(0, 100)
    a, b = _two_attempts(queue_client, cassieq_options, queue_name, values)
    a.rollback()
    with pytest.raises(CassieQError, match="rolled back by another attempt"):
        b.run(iter(()))
    _run(b.plan, values)
    assert drain(queue_client, queue_name) == Counter(values)


# -- F11: a failure after the first close must not roll anything back ----------------------


def test_counter_timeout_after_close_keeps_the_task_written(
    cassieq_options, queue_client, queue_name
):
    """Old code (verified): the counter update's timeout reached ``run``'s rollback, which
    marked every row dead although readers could already see them; Spark's retry wrote them
    again (a reader in between got them twice)."""
    queue_client.create_queue(queue_name, bucket_size=100)
    plan = _plan(queue_client, cassieq_options, queue_name, "count")
    values = _values(0, 150)
    faults.inject(faults.TIMEOUT_BEFORE, r"UPDATE .*counters")
    msg = _run(plan, values)
    assert msg.written == 150
    assert drain(queue_client, queue_name) == Counter(values)


def test_put_many_does_not_raise_after_enqueueing(queue_client, queue_name):
    """Old code (verified): ``put_many`` raised the counter's timeout after the messages were
    enqueued, so a caller retrying it enqueued them twice."""
    queue_client.create_queue(queue_name, bucket_size=100)
    values = _values(0, 20)
    faults.inject(faults.TIMEOUT_BEFORE, r"UPDATE .*counters")
    ids = queue_client.put_many(queue_name, values)
    assert len(set(ids)) == 20
    assert drain(queue_client, queue_name) == Counter(values)


def test_one_failing_close_rolls_nothing_back(cassieq_options, queue_client, queue_name):
    """Three chunks; the first closes, the second's close keeps timing out. Old code
    (verified): the rollback marked the first chunk dead although readers could already
    have delivered it, and the retry wrote it again. Now nothing is rolled back: the first
    chunk stays readable, and the retry completes the other two by key."""
    queue_client.create_queue(queue_name, bucket_size=100)
    plan = _plan(queue_client, cassieq_options, queue_name, "close")
    values = _values(0, 150)
    closes = itertools.count()

    def second_close(cql: str) -> bool:
        return "DELETE FROM" in cql and ".monoton" in cql and next(closes) >= 1

    faults.inject(faults.TIMEOUT_BEFORE, second_close, times=5)
    with pytest.raises(Exception):  # noqa: B017 - the injected timeout itself
        _run(plan, values)
    faults.reset()
    early = drain(queue_client, queue_name)
    assert early == Counter(values[:64]), "the first chunk was closed: readers may have it"
    msg = _run(plan, values)
    assert (msg.written, msg.replayed) == (86, 64)
    assert early + drain(queue_client, queue_name) == Counter(values)


# -- F25 / F23: a replay with other rows fails closed instead of skipping them ----------------


def test_replay_with_another_partition_layout_fails_closed(
    cassieq_options, queue_client, queue_name
):
    """Attempt 1: partition 1 held v100..v199 and finished; partition 0 failed. The replay cuts
    the input in three (v0..v49, v50..v149, v150..v199). Old code (verified): the new partition
    1 found attempt 1's closed key ``...:1:0`` and skipped v50..v113, so v50..v99 were never
    written. Now partition 1 fails with ReplayMismatchError; with replayMismatch=writeAgain
    every row is written (some twice, none lost); an unchanged layout replays exactly once."""
    queue_client.create_queue(queue_name, bucket_size=100)
    plan = _plan(queue_client, cassieq_options, queue_name, "layout")
    assert _run(plan, _values(100, 200), partition=1).written == 100

    # the same layout again: nothing is written twice
    same = _run(plan, _values(100, 200), partition=1)
    assert (same.written, same.replayed) == (0, 100)

    assert _run(plan, _values(0, 50), partition=0).written == 50
    with pytest.raises(ReplayMismatchError) as err:
        _run(plan, _values(50, 150), partition=1)
    text = str(err.value)
    for fragment in ("batch write layout", "chunk 0 of partition 1", "replayMismatch=writeAgain"):
        assert fragment in text, text
    assert "64 rows then, 64 now, same count, other content" in text

    again = _plan(queue_client, cassieq_options, queue_name, "layout", replayMismatch="writeAgain")
    _run(again, _values(50, 150), partition=1)
    _run(again, _values(150, 200), partition=2)
    seen = drain(queue_client, queue_name)
    assert set(seen) == set(_values(0, 200))  # nothing lost
    assert all(seen[v] == 1 for v in _values(0, 100))  # rows never written before: once
    assert all(seen[v] == 2 for v in _values(100, 200))  # the documented price


def test_replay_with_more_rows_fails_closed(cassieq_options, queue_client, queue_name):
    """Old code (verified): a replay with 110 rows where the first attempt had 100 found chunk
    1 (36 rows then, 46 now) closed, logged a warning and dropped v100..v109. Now it fails.
    Extra rows in a chunk of their own are simply written (exactly once)."""
    queue_client.create_queue(queue_name, bucket_size=100)
    plan = _plan(queue_client, cassieq_options, queue_name, "more")
    assert _run(plan, _values(0, 100)).written == 100
    with pytest.raises(ReplayMismatchError, match="36 rows then, 46 now"):
        _run(plan, _values(0, 110))

    exact = _plan(queue_client, cassieq_options, queue_name, "more2")
    assert _run(exact, _values(200, 328)).written == 128  # two full chunks
    msg = _run(exact, _values(200, 340))
    assert (msg.written, msg.replayed) == (12, 128)
    seen = drain(queue_client, queue_name)
    assert seen == Counter(_values(0, 100) + _values(200, 340))


def test_lost_replies_everywhere_still_write_each_row_once(
    cassieq_options, queue_client, queue_name
):
    """Every compare-and-set of a task, its replay and a rollback applies and loses its reply
    (CASSIEQ_FAULTS=lost-reply for this process)."""
    queue_client.create_queue(queue_name, bucket_size=100)
    plan = _plan(queue_client, cassieq_options, queue_name, "lost")
    values = _values(0, 150)
    faults.inject(faults.LOST_REPLY, faults.is_conditional, times=None)
    assert _run(plan, values).written == 150
    assert _run(plan, values).replayed == 150
    a, b = TaskWrite(plan, partition=1), TaskWrite(plan, partition=1)
    a.add_slice(next(_arrow_slices(a.input, iter([_batch(_values(150, 250))]))))
    b.add_slice(next(_arrow_slices(b.input, iter([_batch(_values(150, 250))]))))
    a.rollback()
    with pytest.raises(CassieQError, match="rolled back by another attempt"):
        b.run(iter(()))
    assert _run(plan, _values(150, 250), partition=1).written == 64
    faults.reset()
    assert drain(queue_client, queue_name) == Counter(_values(0, 250))


# Only without run-wide lost replies: it injects timeouts of its own, which that mode would
# take first.
@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)
def test_compare_and_sets_that_time_out_before_running_are_sent_again(
    cassieq_options, queue_client, queue_name
):
    """The other unknown outcome: a compare-and-set that never reached Cassandra. The rollback's
    claim and key deletion, the found block's close and the push of a repair clock are each
    sent again rather than read as "another attempt won"."""
    values = _values(0, 100)
    a, b = _two_attempts(queue_client, cassieq_options, queue_name, values)
    for pattern in (r"SET released = true", r"DELETE FROM \{ks\}\.reservation_keys"):
        faults.inject(faults.TIMEOUT_BEFORE, pattern)
    a.rollback()
    faults.inject(faults.TIMEOUT_BEFORE, r"DELETE FROM \{ks\}\.monoton .* IF hi")
    with pytest.raises(CassieQError, match="rolled back by another attempt"):
        b.run(iter(()))
    assert _run(b.plan, values).written == 64
    assert drain(queue_client, queue_name) == Counter(values)

    other = f"{queue_name}_rt"
    queue_client.create_queue(other, bucket_size=100, repair_timeout=1)
    plan = _plan(queue_client, cassieq_options, other, "pushed")

    def reader_skips(task):
        time.sleep(1.3)
        assert queue_client.get(other) is None

    faults.on("sink.before_close", reader_skips)
    faults.inject(faults.TIMEOUT_BEFORE, r"SET skipped_at = \?")
    assert _run(plan, values).written == 100
    time.sleep(1.2)
    assert queue_client.repair(other).republished == 100  # both blocks were skipped
    assert drain(queue_client, other) == Counter(values)


# -- Spark: foreachBatch with writeId (F27), a sink restarted on another target (F28) -----------


def test_foreach_batch_write_with_write_id_writes_each_row_once(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """``foreachBatch`` that writes with ``df.write.format("cassieq")`` and then fails; the
    query is restarted from its checkpoint and Spark runs the batch again. Old code (by reading,
    and verified with this test minus the writeId option): every replay got a new random write
    id, so the batch was enqueued twice; there was no option to pass one."""
    queue_client.create_queue(queue_name, bucket_size=100)
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    files = {f"f{k}.txt": [f"fb{k}-{i}" for i in range(200)] for k in range(2)}
    write_text_files(src, files)
    fail_once = tmp_path / "fail-once"
    fail_once.touch()

    def each(df, batch_id):
        (
            df.write.format("cassieq")
            .options(**cassieq_options)
            .option("queue", queue_name)
            .option("idBlockSize", "64")
            .option("writeId", f"f27-test-{batch_id}")
            .mode("append")
            .save()
        )
        if batch_id == 1 and fail_once.exists():
            fail_once.unlink()
            raise RuntimeError("injected: the batch function fails after its write")

    def run():
        return (
            sspark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(src))
            .writeStream.foreachBatch(each)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )

    query = run()
    with pytest.raises(Exception, match="injected"):
        query.awaitTermination(TIMEOUT)
    assert not fail_once.exists(), "batch 1 did not run"
    query = run()
    assert query.awaitTermination(TIMEOUT)
    assert query.exception() is None, query.exception()
    assert any(p.batchId == 1 for p in query.recentProgress), "batch 1 was not replayed"
    expected = [line for lines in files.values() for line in lines]
    assert drain(queue_client, queue_name) == Counter(expected)


@pytest.mark.parametrize(
    "options, streaming, fragment",
    [
        ({"writeId": "  "}, False, "option 'writeId' must be 1 to 200 printable characters"),
        ({"writeId": "x" * 201}, False, "1 to 200 printable characters"),
        ({"writeId": "a\nb"}, False, "printable characters"),
        ({"writeId": "app-7"}, True, "'writeId' is for df.write"),
        ({"replayMismatch": "skip"}, False, "'replayMismatch' must be one of fail, writeAgain"),
    ],
)
def test_sink_options_for_replays_are_checked(cassieq_options, options, streaming, fragment):
    from cassieq_spark.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        sink_options({**cassieq_options, "queue": "q", **options}, streaming=streaming)
    assert fragment in str(err.value)
    ok = sink_options({**cassieq_options, "queue": "q", "writeId": " app-7 "}, streaming=False)
    assert ok.write_id == "app-7"


def test_restart_with_another_queue_is_refused(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """A crash after the sink wrote batch 1 but before Spark's commit; the query restarts on the
    same checkpoint pointed at another queue. Old code (verified): the replay found no key in
    the new queue and wrote batch 1 there too (in both queues). Now the restart is refused,
    naming both targets; allowTargetChange=true lets it go on (documented duplicate)."""
    other = f"{queue_name}_b"
    queue_client.create_queue(queue_name, bucket_size=100)
    queue_client.create_queue(other, bucket_size=100)
    src, ckpt = tmp_path / "in", tmp_path / "ckpt"
    files = {f"f{k}.txt": [f"t{k}-{i}" for i in range(100)] for k in range(2)}
    write_text_files(src, files)
    run_available_now(sspark, cassieq_options, queue_name, src, ckpt)
    assert (ckpt / "cassieq-sink-target.json").exists()
    drop_last_commit(ckpt)

    with pytest.raises(Exception) as err:
        run_available_now(sspark, cassieq_options, other, src, ckpt)
    text = full_message(err.value)
    for fragment in (repr(queue_name), repr(other), "allowTargetChange=true"):
        assert fragment in text, text[:3000]
    assert drain(queue_client, other) == Counter()

    run_available_now(sspark, cassieq_options, other, src, ckpt, allowTargetChange="true")
    replayed = drain(queue_client, other)  # the replayed batch: one whole file
    assert replayed in (Counter(lines) for lines in files.values()), replayed
    expected = [line for lines in files.values() for line in lines]
    assert drain(queue_client, queue_name) == Counter(expected)


def test_target_record_follows_the_queue_incarnation(tmp_path):
    """The record names cluster, keyspace, queue and incarnation: a queue deleted and created
    again under the same name is another target too (the replay would not find its keys)."""
    from cassieq_spark.errors import ConfigError
    from cassieq_spark.spark import sink_target
    from cassieq_spark.spark.sink_target import Target, check_target

    ckpt = f"file://{tmp_path}/ckpt"
    first = Target("c1", "ks", "q", "11111111-1111-1111-1111-111111111111")
    check_target(ckpt, first, allow_change=False)
    sink_target.forget_checked()  # as a new driver process would
    check_target(ckpt, first, allow_change=False)
    again = Target("c1", "ks", "q", "22222222-2222-2222-2222-222222222222")
    with pytest.raises(ConfigError, match="incarnation 1111.*incarnation 2222"):
        check_target(ckpt, again, allow_change=False)
    check_target(ckpt, again, allow_change=True)
    sink_target.forget_checked()
    check_target(ckpt, again, allow_change=False)  # the new target is the recorded one now
    (tmp_path / "ckpt" / sink_target.FILE_NAME).write_text("{not json")
    sink_target.forget_checked()
    with pytest.raises(ConfigError, match="unreadable"):
        check_target(ckpt, again, allow_change=False)


def test_queue_to_queue_replay_with_another_layout_fails_closed_in_spark(
    sspark, cassieq_options, queue_client, queue_name, tmp_path
):
    """The review's experiment E2, smaller: queue to queue through a real partial failure.
    Run 1 reads 300 messages in 3 partitions of 100 ids; partition 0 fails after the other two
    finished. Run 2 replays the batch with maxIdsPerPartition=50 (6 partitions). Old code (by
    reading, and E2 of the review ran it: 500 of 3000 lost): the new partition 1 (ids 50..99)
    found run 1's closed key for partition 1 and skipped rows never written. Now run 2 fails with
    ReplayMismatchError, and run 3 with replayMismatch=writeAgain delivers every message (the
    documented price: some twice)."""
    src, dst = f"{queue_name}_src", f"{queue_name}_dst"
    queue_client.create_queue(src, bucket_size=1000)
    queue_client.create_queue(dst, bucket_size=1000)
    sent = [f"m{i}" for i in range(300)]
    queue_client.put_many(src, sent)
    ckpt, marker = tmp_path / "ckpt", tmp_path / "fail-partition-0"
    marker.touch()
    marker_path = str(marker)

    def fail_partition_0_once(batches):
        import os as _os
        import time as _time

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 0 and _os.path.exists(marker_path):
            _time.sleep(8)  # the other partitions finish and close their keys first
            _os.remove(marker_path)
            raise RuntimeError("injected: partition 0 fails once")
        yield from batches

    def run(max_ids: int, **extra):
        df = (
            sspark.readStream.format("cassieq")
            .options(**cassieq_options)
            .option("queue", src)
            .option("maxIdsPerPartition", str(max_ids))
            .option("minIdsPerPartition", "1")
            .load()
            .select("value")
            .mapInArrow(fail_partition_0_once, "value binary")
        )
        query = (
            df.writeStream.format("cassieq")
            .options(**cassieq_options)
            .option("queue", dst)
            .options(**extra)
            .option("checkpointLocation", str(ckpt))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(TIMEOUT)
        return query

    with pytest.raises(Exception, match="injected"):
        run(100)
    assert not marker.exists()
    with pytest.raises(Exception) as err:
        run(50)
    text = full_message(err.value)
    assert "ReplayMismatchError" in text or "is not what an earlier attempt" in text, text[:3000]
    query = run(50, replayMismatch="writeAgain")
    assert query.exception() is None, query.exception()
    seen = drain(queue_client, dst)
    assert set(seen) == set(sent), sorted(set(sent) - set(seen))[:10]
    assert queue_client.stats(src)["backlog"] == 0
