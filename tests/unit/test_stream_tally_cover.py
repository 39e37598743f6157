"""The pure parts of the stream's read tallies (``engine/stream/tally.py``): which tallies an ack
may use for its id path and which parts it must still scan, and what a task's pages count."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from cassieq_spark.engine.stream.columns import Rows
from cassieq_spark.engine.stream.tally import Tally, TallyRecorder, cover, others_of

pytestmark = [pytest.mark.unit, pytest.mark.fast]


def t(lo: int, hi: int, plain: int = 0, others: tuple[int, ...] = ()) -> Tally:
    return Tally(lo, hi, plain, others)


def test_tallies_that_tile_the_range_leave_nothing_to_scan() -> None:
    used, gaps = cover(0, 300, [t(200, 300), t(0, 100), t(100, 200)])
    assert [(u.lo, u.hi) for u in used] == [(0, 100), (100, 200), (200, 300)]
    assert gaps == []


def test_missing_tallies_leave_their_ranges_to_the_scan() -> None:
    used, gaps = cover(0, 500, [t(100, 200), t(300, 400)])
    assert [(u.lo, u.hi) for u in used] == [(100, 200), (300, 400)]
    assert gaps == [(0, 100), (200, 300), (400, 500)]
    assert cover(0, 10, []) == ([], [(0, 10)])


def test_a_tally_starting_below_the_reader_pointer_is_not_used() -> None:
    """The ack's range starts at the reader pointer, which another consumer may have moved
    into a task's range: that range's count includes ids below the pointer."""
    used, gaps = cover(150, 300, [t(100, 200, plain=100), t(200, 300, plain=100)])
    assert [(u.lo, u.hi) for u in used] == [(200, 300)]
    assert gaps == [(150, 200)]


def test_overlapping_cuts_of_one_batch_are_never_counted_twice() -> None:
    """Two reads of one batch cut into partitions differently: ranges taken never overlap, and
    every id of the range is either in a taken tally or in a gap, exactly once."""
    rng = random.Random(7)
    for _ in range(500):
        lo, hi = 0, rng.randint(1, 400)
        tallies = []
        for _ in range(rng.randint(0, 8)):
            a = rng.randint(-20, hi + 20)
            b = a + rng.randint(0, 120)
            tallies.append(t(a, b))
        used, gaps = cover(lo, hi, tallies)
        covered = [i for u in used for i in range(u.lo, u.hi)]
        covered += [i for g in gaps for i in range(*g)]
        assert sorted(covered) == list(range(lo, hi)), (tallies, used, gaps)
        assert all(lo <= u.lo < u.hi <= hi for u in used)


def test_others_are_the_sorted_ids_of_the_tallies_used() -> None:
    assert others_of([t(0, 10, others=(7, 3)), t(10, 20, others=(12,))]) == [3, 7, 12]


def _rows(ids: list[int], version: list, visible_at: list) -> Rows:
    n = len(ids)
    nulls64 = pa.nulls(n, pa.int64())
    return Rows(
        id=pa.array(ids, pa.int64()),
        payload=pa.array([b"x"] * n, pa.binary()),
        headers=(None,) * n,
        enqueued_at=pa.array([1] * n, pa.int64()),
        visible_at=pa.array(visible_at, pa.int64()),
        version=pa.array(version, pa.int32()),
        deliveries=pa.array([None] * n, pa.int32()),
        invisible_until=nulls64,
        acked=pa.array([None] * n, pa.bool_()),
        dead=pa.array([None] * n, pa.bool_()),
    )


def test_a_recorder_counts_plain_rows_and_lists_the_others() -> None:
    import uuid

    rec = TallyRecorder(uuid.uuid4(), "run", 1000, 0, 10)
    rec.add(_rows([0, 1, 2], [None, None, None], [None, None, None]))
    rec.add(_rows([3, 4, 5, 6], [None, 2, None, None], [None, None, 500, None]))
    assert rec.plain == 5
    assert rec.others == [4, 5]
