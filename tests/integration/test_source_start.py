"""Where a streaming query without a checkpoint starts (option startingPosition), against the
real Cassandra and a real local Spark: earliest, latest, an id, a time; what lies before the
start stays in the queue (nothing acked by skipping it)."""

from __future__ import annotations

import logging
import time

import pytest
from chispa import assert_df_equality
from pyspark.sql.streaming.datasource import ReadAllAvailable
from support.stream import Collector, start, wait_for

from cassieq_spark.engine.core.queues import get_queue
from cassieq_spark.engine.stream.consumer import StreamConsumer
from cassieq_spark.engine.stream.read import read_id_path
from cassieq_spark.engine.stream.start import StartingPosition
from cassieq_spark.spark.source import CassieQStreamReader

pytestmark = [pytest.mark.integration, pytest.mark.spark]

AVAILABLE_NOW = {"availableNow": True}


def run(spark, opts, checkpoint, **extra) -> Collector:
    c = Collector()
    q = start(spark, opts, c, checkpoint, AVAILABLE_NOW, **extra)
    assert q.awaitTermination(180)
    assert q.exception() is None
    return c


def test_engine_start_above_the_reader_acks_only_what_it_delivered(queue_client, queue_name):
    """No Spark: a stream starting at id 3 acks 3..5 one by one, the pointer stays at 0."""
    queue_client.create_queue(queue_name, bucket_size=4)
    queue_client.put_many(queue_name, [b"m"] * 6)
    conn = queue_client.conn
    st = StreamConsumer(conn, get_queue(conn, queue_name), "stream:eng", 5.0)
    try:
        first = st.initial(StartingPosition("id", 3))
        assert (first.from_id, first.id) == (3, 3)
        plan = st.plan(first)
        assert plan.end is not None and (plan.end.from_id, plan.end.id) == (3, 6)
        st.ack_through(plan.end)
        assert st.plan(plan.end).end is None  # acks the batch, nothing new
    finally:
        st.lease.release()
    stats = queue_client.stats(queue_name)
    assert stats["reader_pointer"] == 0 and stats["acked"] == 3 and stats["backlog"] == 3
    got = [queue_client.get(queue_name) for _ in range(4)]
    assert [m.id for m in got[:3]] == [0, 1, 2] and got[3] is None


def test_id_timestamp_and_earliest_starts(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=3)
    old = queue_client.put_many(queue_name, [f"old{i}".encode() for i in range(4)])
    time.sleep(0.3)
    since_ms = int(time.time() * 1000)
    new = queue_client.put_many(queue_name, [f"new{i}".encode() for i in range(3)])
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-s"}

    by_time = run(sspark, opts, tmp_path / "t", startingPosition=f'{{"timestamp": {since_ms}}}')
    expected = sspark.createDataFrame(
        [(i, f"new{n}".encode()) for n, i in enumerate(new)], "id BIGINT, value BINARY"
    )
    actual = sspark.createDataFrame([(r.id, bytes(r.value)) for r in by_time.rows], expected.schema)
    assert_df_equality(actual, expected, ignore_row_order=True)
    st = queue_client.stats(queue_name)
    assert st["reader_pointer"] == 0 and st["acked"] == 3  # nothing before the start acked

    by_id = run(sspark, opts, tmp_path / "i", startingPosition=f'{{"id": {old[2]}}}')
    assert by_id.ids == old[2:]  # the new ones are acked already
    earliest = run(sspark, opts, tmp_path / "e")
    assert earliest.ids == old[:2]
    st = queue_client.stats(queue_name)
    assert st["acked"] == 7 and st["backlog"] == 0 and st["reader_pointer"] == 7


def test_latest_start_leaves_earlier_messages_to_clients(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name, bucket_size=4)
    before = queue_client.put_many(queue_name, [b"before"] * 3)
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-l",
        "startingPosition": "latest",
    }
    c = Collector()
    q = start(sspark, opts, c, tmp_path / "ck", {"processingTime": "500 milliseconds"})
    try:
        # the query took its lease in initialOffset, where it fixed its start
        wait_for(lambda: queue_client.stats(queue_name)["consumer"], 120, "the lease", q)
        time.sleep(1.0)
        after = queue_client.put_many(queue_name, [b"after"] * 2)
        wait_for(lambda: c.ids == after, 120, "the messages put after the start", q)
        wait_for(lambda: queue_client.stats(queue_name)["acked"] == 2, 30, "their acks", q)
    finally:
        q.stop()
    assert queue_client.stats(queue_name)["reader_pointer"] == 0
    got = []
    deadline = time.time() + 30
    while (
        len(got) < 3 and time.time() < deadline
    ):  # the stopped query gives its lease back as its reader process ends
        try:
            m = queue_client.get(queue_name)
        except Exception:  # QueueBusyError until then
            time.sleep(0.5)
            continue
        assert m is not None
        assert queue_client.ack(queue_name, m.pop_receipt)
        got.append(m.id)
    assert got == before
    assert queue_client.get(queue_name) is None
    st = queue_client.stats(queue_name)
    assert st["acked"] == 5 and st["backlog"] == 0


def test_starting_position_is_ignored_when_the_checkpoint_has_offsets(
    sspark, queue_client, queue_name, cassieq_options, tmp_path
):
    queue_client.create_queue(queue_name)
    first = queue_client.put_many(queue_name, [b"a"] * 2)
    opts = {**cassieq_options, "queue": queue_name, "consumerId": f"{queue_name}-c"}
    assert run(sspark, opts, tmp_path / "ck").ids == first
    second = queue_client.put_many(queue_name, [b"b"] * 2)
    # a restart resumes where its checkpoint is: "latest" would skip `second`
    again = run(sspark, opts, tmp_path / "ck", startingPosition="latest")
    assert again.ids == second
    assert queue_client.stats(queue_name)["reader_pointer"] == 4


@pytest.mark.parametrize(
    "value", ["middle", '{"id": -1}', '{"offset": 3}', '{"id": 1, "timestamp": 2}', '{"id": "7"}']
)
def test_bad_starting_position_fails_at_load(sspark, queue_name, cassieq_options, value):
    opts = {**cassieq_options, "queue": queue_name, "startingPosition": value}
    with pytest.raises(Exception, match="option 'startingPosition' must be earliest, latest"):
        sspark.readStream.format("cassieq").options(**opts).load()


def test_the_ignored_option_is_logged_by_a_run_that_resumes(
    queue_client, queue_name, cassieq_options, caplog
):
    """The driver-side reader without Spark (Spark runs it in a process whose log the test
    cannot see): a run that gets a start offset it did not make says the option is ignored."""
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"a"] * 2)
    opts = {
        **cassieq_options,
        "queue": queue_name,
        "consumerId": f"{queue_name}-g",
        "startingPosition": "latest",
    }
    caplog.set_level(logging.INFO, logger="cassieq_spark.spark.source")
    fresh = CassieQStreamReader(opts)
    try:
        init = fresh.initialOffset()
        assert (init["from"], init["id"]) == (2, 2)
        assert fresh.latestOffset(init, ReadAllAvailable()) == init  # nothing after the start
    finally:
        fresh.stop()
    assert "is ignored" not in caplog.text
    resumed = CassieQStreamReader(opts)  # as a restart from a checkpoint ending at id 0
    try:
        end = resumed.latestOffset({**init, "from": 0, "id": 0}, ReadAllAvailable())
    finally:
        resumed.stop()
    assert end["id"] == 2
    assert "option startingPosition (latest) is ignored" in caplog.text


def test_engine_pointer_move_over_rows_acked_one_by_one_counts_them_once(queue_client, queue_name):
    """A stream from id 3 acks 3..5 row by row; an earliest stream later reads 0..8 and moves
    the pointer over them: 3..5 are not delivered again nor counted twice."""
    queue_client.create_queue(queue_name, bucket_size=4)
    queue_client.put_many(queue_name, [b"m"] * 6)
    info = get_queue(queue_client.conn, queue_name)

    def run_stream(start_at):
        st = StreamConsumer(queue_client.conn, info, "stream:gap", 5.0)
        try:
            first = st.initial(start_at)
            plan = st.plan(first)
            assert plan.end is not None
            batch = st.batch(first, plan.end)
            st.ack_through(plan.end)
            return plan.end, batch
        finally:
            st.lease.release()

    end, _ = run_stream(StartingPosition("id", 3))
    assert (end.from_id, end.id) == (3, 6)
    assert queue_client.stats(queue_name)["reader_pointer"] == 0
    queue_client.put_many(queue_name, [b"n"] * 3)
    end, batch = run_stream(None)  # earliest
    assert (end.from_id, end.id) == (0, 9)
    rows = read_id_path(queue_client.conn, info, batch.lo, batch.hi, end.ts, batch.excluded)
    assert [r.id for r, _ in rows] == [0, 1, 2, 6, 7, 8]
    st = queue_client.stats(queue_name)
    assert st["reader_pointer"] == 9 and st["acked"] == 9 and st["backlog"] == 0
