"""The stream's delivery counts (``engine/stream/deliveries.py``) against the real Cassandra,
without Spark: the executors' code path, with the failures forced through the fault seam."""

from __future__ import annotations

import time
import uuid

import pytest

from cassieq_spark.engine.store import faults
from cassieq_spark.engine.stream import deliveries as stream_deliveries
from cassieq_spark.engine.stream import read as stream_read
from cassieq_spark.engine.upkeep.deadletter import HEADER_DELIVERY_COUNT, HEADER_ORIGIN_ID

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _delivered(client, info, lo: int, hi: int, run: str) -> list[tuple[int, int]]:
    """What one run's read of the id partition ``[lo, hi)`` delivers: (id, delivery count)."""
    end_ts = int(time.time() * 1000) + 60_000
    part = stream_deliveries.part_key("ids", lo, hi, (), end_ts=0)
    earlier = stream_deliveries.EarlierRuns(client.conn, info.queue_id, part, run).count()
    rows = stream_read.read_id_path(client.conn, info, lo, hi, end_ts, ())
    counted = stream_deliveries.with_counts(
        client.conn, info, rows, earlier, info.max_delivery_count
    )
    return [(row.id, count) for row, count in counted]


def _letters(client, dlq: str) -> list:
    out = []
    while (m := client.get(dlq)) is not None:
        out.append(m)
        client.ack(dlq, m.pop_receipt)
    return out


def test_each_run_counts_once_per_partition(queue_client):
    conn, qid = queue_client.conn, uuid.uuid4()
    assert stream_deliveries.EarlierRuns(conn, qid, "p", "run-1").count() == 0
    assert stream_deliveries.EarlierRuns(conn, qid, "p", "run-1").count() == 0  # a task retried
    assert stream_deliveries.EarlierRuns(conn, qid, "p", "run-2").count() == 1
    assert stream_deliveries.EarlierRuns(conn, qid, "p", "run-1").count() == 1
    assert stream_deliveries.EarlierRuns(conn, qid, "q", "run-3").count() == 0  # another partition
    assert stream_deliveries.EarlierRuns(conn, uuid.uuid4(), "p", "run-3").count() == 0


def test_part_keys_name_the_range_or_the_timer_ids_and_the_batch_time():
    key = stream_deliveries.part_key
    assert key("ids", 0, 10, (), 5) == key("ids", 0, 10, (), 5)
    assert len({key("ids", 0, 10, (), 5), key("ids", 0, 10, (), 6), key("ids", 0, 9, (), 5)}) == 3
    assert key("timers", 0, 0, (3, 7, 9), 5) != key("timers", 0, 0, (3, 9), 5)


def test_a_run_killed_between_mark_and_copy_leaves_one_copy_each(queue_client, queue_name):
    """The run that moves a poison partition dies after marking the second message dead and
    before copying it. The next run moves the rest without delivering any of them; repair
    finishes the half-done copy once the bucket is behind the reader pointer: one copy each."""
    q, dlq = queue_client, queue_name + "_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, bucket_size=3, max_delivery_count=1, dead_letter_queue=dlq)
    ids = q.put_many(queue_name, [b"a", b"b", b"c"])
    info = q.get_queue(queue_name)
    assert _delivered(q, info, 0, 3, "run-1") == [(i, 1) for i in ids]  # the batch failed

    marked: list[int] = []

    def killed(row, **ctx):
        marked.append(row.id)
        if len(marked) == 2:
            raise RuntimeError("executor killed")

    faults.on("deadletter.marked", killed)
    with pytest.raises(RuntimeError, match="executor killed"):
        _delivered(q, info, 0, 3, "run-2")
    faults.reset()
    assert [int(m.headers[HEADER_ORIGIN_ID]) for m in _letters(q, dlq)] == ids[:1]
    assert _delivered(q, info, 0, 3, "run-3") == []  # moves the third, delivers nothing

    assert q.get(queue_name) is None  # a client passes the dead rows: the bucket is behind
    q.repair(queue_name)
    letters = _letters(q, dlq)
    assert sorted(int(m.headers[HEADER_ORIGIN_ID]) for m in letters) == ids[1:]
    # runs that read the partition count, whether they reached the message or not
    counts = {int(m.headers[HEADER_ORIGIN_ID]): m.headers[HEADER_DELIVERY_COUNT] for m in letters}
    assert counts == {ids[1]: "1", ids[2]: "2"}
    q.repair(queue_name)
    assert _letters(q, dlq) == []
    assert q.stats(queue_name)["dead_lettered"] == 3


def test_lost_replies_of_the_move_count_each_message_once(queue_client, queue_name):
    """Every compare-and-set of the move applies and its reply is lost: the run reads back
    whose mark it was, so every message is moved and counted once."""
    q, dlq = queue_client, queue_name + "_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, bucket_size=10, max_delivery_count=2, dead_letter_queue=dlq)
    ids = q.put_many(queue_name, [f"m{i}".encode() for i in range(5)])
    info = q.get_queue(queue_name)
    assert _delivered(q, info, 0, 10, "run-1") == [(i, 1) for i in ids]
    assert _delivered(q, info, 0, 10, "run-2") == [(i, 1) for i in ids]  # a replay: same rows
    faults.inject(faults.LOST_REPLY, faults.is_conditional, times=None)
    assert _delivered(q, info, 0, 10, "run-3") == []
    faults.reset()
    letters = _letters(q, dlq)
    assert sorted(int(m.headers[HEADER_ORIGIN_ID]) for m in letters) == ids
    assert {m.headers[HEADER_DELIVERY_COUNT] for m in letters} == {"2"}
    assert q.stats(queue_name)["dead_lettered"] == 5


def test_client_deliveries_count_on_the_first_run(queue_client, queue_name):
    """A message clients received max_delivery_count times and let expire is moved by the
    stream's first read of it, as the next client get would move it."""
    q, dlq = queue_client, queue_name + "_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, bucket_size=10, max_delivery_count=1, dead_letter_queue=dlq)
    mid = q.put(queue_name, b"x")
    assert q.get(queue_name, visibility_timeout=1.0).id == mid
    time.sleep(1.5)
    info = q.get_queue(queue_name)
    assert _delivered(q, info, 0, 10, "run-1") == []
    assert [int(m.headers[HEADER_ORIGIN_ID]) for m in _letters(q, dlq)] == [mid]
