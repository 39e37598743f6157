"""The row cap of a batch holds for the timer path: the batch time is moved back so that at most
the cap's worth of delayed or redelivered messages is due (spark-semantics review 2, S11).
Pure planning math of ``engine/stream/timer_path.cap_due``."""

from __future__ import annotations

from cassieq_spark.engine.stream.timer_path import cap_due


def test_under_the_cap_the_batch_time_stays():
    due = [(1, 1_000), (2, 1_500)]
    assert cap_due(due, 500, 2_000, 2) == (2_000, [1, 2])


def test_over_the_cap_the_earliest_due_come_first():
    due = [(i, 1_000 + 10 * i) for i in range(100)]  # id i due at 1000 + 10 i
    ts, ids = cap_due(due, 500, 5_000, 10)
    assert ids == list(range(10))
    assert 1_090 <= ts < 1_100  # the next one (id 10, due 1100) is not due at ts
    # the next batch starts at ts and takes the next 10
    ts2, ids2 = cap_due([d for d in due if d[0] >= 10], ts, 5_000, 10)
    assert ids2 == list(range(10, 20)) and ts2 > ts


def test_order_is_by_due_time_not_id():
    due = [(5, 3_000), (6, 1_000), (7, 2_000)]
    assert cap_due(due, 0, 4_000, 2)[1] == [6, 7]


def test_rows_due_in_one_millisecond_come_together():
    due = [(i, 2_000) for i in range(50)]
    ts, ids = cap_due(due, 0, 9_000, 10)
    assert ts == 2_000 and len(ids) == 50  # above the cap rather than never moving on


def test_the_batch_time_always_moves_past_the_start():
    due = [(1, 100), (2, 100), (3, 900)]  # two late timers due before the start (500)
    ts, ids = cap_due(due, 500, 1_000, 1)
    assert ts == 501 and ids == [1, 2]
