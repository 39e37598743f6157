from __future__ import annotations

import pytest

from cassieq_spark.engine.core.buckets import (
    MAX_BUCKET_SIZE,
    bucket_end,
    bucket_of,
    bucket_start,
    split_by_bucket,
    validate_bucket_size,
)
from cassieq_spark.errors import ConfigError


def test_bucket_of_and_bounds():
    assert [bucket_of(i, 10) for i in (0, 9, 10, 19, 20)] == [0, 0, 1, 1, 2]
    assert (bucket_start(3, 10), bucket_end(3, 10)) == (30, 40)
    with pytest.raises(ValueError, match="non-negative"):
        bucket_of(-1, 10)


@pytest.mark.parametrize("lo,hi,size", [(0, 0, 5), (0, 1, 5), (3, 27, 5), (5, 10, 5), (7, 8, 1)])
def test_split_covers_range_exactly_once(lo, hi, size):
    parts = list(split_by_bucket(lo, hi, size))
    ids = [i for _, a, b in parts for i in range(a, b)]
    assert ids == list(range(lo, hi))
    for bucket, a, b in parts:
        assert a < b and bucket_of(a, size) == bucket == bucket_of(b - 1, size)


def test_validate_bucket_size():
    assert validate_bucket_size(1) == 1
    assert validate_bucket_size(MAX_BUCKET_SIZE) == MAX_BUCKET_SIZE
    for bad in (0, MAX_BUCKET_SIZE + 1, True, 1.0, "10"):
        with pytest.raises(ConfigError, match="bucket size"):
            validate_bucket_size(bad)
