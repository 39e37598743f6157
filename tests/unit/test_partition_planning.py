"""Planning a micro-batch into partitions: bucket slices, split big ones, group small ones."""

from __future__ import annotations

import pickle

import pytest

from cassieq_spark.spark.partition import (
    KIND_IDS,
    CassieQPartition,
    chunks,
    plan_ranges,
    subtract,
)


def covers(ranges, lo, hi):
    """Contiguous, ordered, no gaps, no overlaps."""
    pos = lo
    for a, b in ranges:
        assert a == pos and b > a
        pos = b
    assert pos == hi


def test_one_partition_per_bucket_slice():
    r = plan_ranges(250, 3100, 1000)
    assert r == [(250, 1000), (1000, 2000), (2000, 3000), (3000, 3100)]
    covers(r, 250, 3100)


def test_empty_range_gives_no_partitions():
    assert plan_ranges(500, 500, 1000) == []


def test_big_buckets_are_split():
    r = plan_ranges(0, 2000, 1000, max_ids=300)
    covers(r, 0, 2000)
    assert all(b - a <= 300 for a, b in r)
    # splits never cross a bucket boundary
    assert all(a // 1000 == (b - 1) // 1000 for a, b in r)
    assert len(r) == 8


def test_small_slices_are_grouped():
    r = plan_ranges(0, 100, 10, min_ids=35)
    covers(r, 0, 100)
    assert [b - a for a, b in r] == [40, 40, 20]


def test_grouping_respects_max():
    r = plan_ranges(0, 100, 10, max_ids=25, min_ids=25)
    covers(r, 0, 100)
    assert all(b - a <= 25 for a, b in r)
    assert [b - a for a, b in r] == [20, 20, 20, 20, 20]


def test_planning_is_deterministic():
    assert plan_ranges(17, 98_765, 1000, 400, 90) == plan_ranges(17, 98_765, 1000, 400, 90)


@pytest.mark.parametrize("bad", [{"bucket_size": 0}, {"bucket_size": 10, "max_ids": 0}])
def test_rejects_bad_sizes(bad):
    with pytest.raises(ValueError):
        plan_ranges(0, 10, **bad)


def test_subtract_excluded_ranges():
    assert subtract(0, 100, []) == 100
    assert subtract(0, 100, [(10, 20), (15, 30), (90, 200)]) == 100 - 20 - 10
    assert subtract(50, 60, [(0, 100)]) == 0


def test_timer_ids_chunked_sorted_unique():
    assert chunks([5, 3, 3, 9, 1], size=2) == [(1, 3), (5, 9)]
    assert chunks([]) == []


def test_partition_pickles_without_live_objects():
    p = CassieQPartition(
        KIND_IDS,
        connection=(("contactpoints", "127.0.0.1"),),
        queue="q",
        queue_id="00000000-0000-0000-0000-000000000001",
        bucket_size=1000,
        lo=0,
        hi=10,
        excluded=((2, 4),),
    )
    q = pickle.loads(pickle.dumps(p))
    assert q == p
    assert q.overlapping(0, 3) == ((2, 4),)
    assert q.overlapping(4, 9) == ()
