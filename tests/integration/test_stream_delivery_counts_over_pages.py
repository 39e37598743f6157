"""Delivery counting over pages of columns (``deliveries.with_counts_pages``, what the
executors run) against the real Cassandra, without Spark: rows past the delivery limit leave
their page for the dead-letter queue while the rest of the page is delivered; a poison batch
moves every row, each counted once under lost replies; without a dead-letter queue it fails
before dropping anything."""

from __future__ import annotations

import time

import pytest

from cassieq_spark.engine.store import faults
from cassieq_spark.engine.stream import columns
from cassieq_spark.engine.stream import deliveries as stream_deliveries
from cassieq_spark.engine.upkeep.deadletter import HEADER_DELIVERY_COUNT, HEADER_ORIGIN_ID
from cassieq_spark.errors import PoisonBatchError

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _delivered(client, info, lo: int, hi: int, run: str, **kw) -> list[tuple[int, int]]:
    """What one run's read of the id partition ``[lo, hi)`` delivers: (id, delivery count)."""
    end_ts = int(time.time() * 1000) + 60_000
    part = stream_deliveries.part_key("ids", lo, hi, (), end_ts=0)
    earlier = stream_deliveries.EarlierRuns(client.conn, info.queue_id, part, run).count()
    pages = columns.read_id_path(client.conn, info, lo, hi, end_ts, ())
    counted = stream_deliveries.with_counts_pages(
        client.conn, info, pages, earlier, info.max_delivery_count, **kw
    )
    return [
        (mid, count)
        for page in counted
        for mid, count in zip(page.rows.id.to_pylist(), page.counts.to_pylist(), strict=True)
    ]


def _letters(client, dlq: str) -> list:
    out = []
    while (m := client.get(dlq)) is not None:
        out.append(m)
        client.ack(dlq, m.pop_receipt)
    return out


def test_rows_past_the_limit_leave_their_page_and_the_rest_is_delivered(queue_client, queue_name):
    q, dlq = queue_client, queue_name + "_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, bucket_size=100, max_delivery_count=1, dead_letter_queue=dlq)
    ids = q.put_many(queue_name, [f"m{i}".encode() for i in range(6)])
    held = [q.get(queue_name, visibility_timeout=1.0).id for _ in range(2)]
    time.sleep(1.5)  # the two come back, received once by a client: at the limit
    info = q.get_queue(queue_name)
    assert _delivered(q, info, 0, 100, "run-1") == [(i, 1) for i in ids if i not in held]
    assert sorted(int(m.headers[HEADER_ORIGIN_ID]) for m in _letters(q, dlq)) == sorted(held)


def test_a_poison_batch_moves_every_row_once_under_lost_replies(queue_client, queue_name):
    q, dlq = queue_client, queue_name + "_dlq"
    q.create_queue(dlq)
    q.create_queue(queue_name, bucket_size=4, max_delivery_count=2, dead_letter_queue=dlq)
    ids = q.put_many(queue_name, [f"m{i}".encode() for i in range(7)])  # two pages
    info = q.get_queue(queue_name)
    assert _delivered(q, info, 0, 8, "run-1") == [(i, 1) for i in ids]
    assert _delivered(q, info, 0, 8, "run-2") == [(i, 1) for i in ids]  # a replay: same rows
    faults.inject(faults.LOST_REPLY, faults.is_conditional, times=None)
    assert _delivered(q, info, 0, 8, "run-3") == []
    faults.reset()
    letters = _letters(q, dlq)
    assert sorted(int(m.headers[HEADER_ORIGIN_ID]) for m in letters) == ids
    assert {m.headers[HEADER_DELIVERY_COUNT] for m in letters} == {"2"}
    assert q.stats(queue_name)["dead_lettered"] == 7


def test_a_poison_batch_without_a_dead_letter_queue_fails_before_dropping(queue_client, queue_name):
    q = queue_client
    q.create_queue(queue_name, bucket_size=10, max_delivery_count=1)
    ids = q.put_many(queue_name, [b"a", b"b", b"c"])
    info = q.get_queue(queue_name)
    assert _delivered(q, info, 0, 10, "run-1") == [(i, 1) for i in ids]
    with pytest.raises(PoisonBatchError, match=f"from id {ids[0]}"):
        _delivered(q, info, 0, 10, "run-2")
    assert q.stats(queue_name).get("dropped", 0) == 0
    assert _delivered(q, info, 0, 10, "run-3", drop_allowed=True) == []
    assert q.stats(queue_name)["dropped"] == 3
