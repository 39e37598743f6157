"""The worker's redelivery backoff: 1 s doubling to 5 minutes by default, capped, and refused
settings named."""

from __future__ import annotations

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.worker import Backoff, Worker

pytestmark = [pytest.mark.unit, pytest.mark.fast]


def test_the_default_backoff_doubles_from_one_second_to_five_minutes() -> None:
    b = Backoff()
    assert [b.delay(n) for n in range(1, 12)] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert b.delay(10_000) == 300 and b.delay(0) == 1


def test_a_custom_backoff_keeps_its_cap() -> None:
    b = Backoff(first=0.5, factor=3, cap=10)
    assert [b.delay(n) for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 10]


@pytest.mark.parametrize(
    "kwargs", [{"first": -1}, {"first": 10, "cap": 5}, {"factor": 0.5}, {"cap": 50_000}]
)
def test_a_backoff_out_of_range_is_refused_by_name(kwargs) -> None:
    with pytest.raises(ConfigError, match="backoff needs"):
        Backoff(**kwargs)


@pytest.mark.parametrize("concurrency", [0, -1, True, 1.5])
def test_a_worker_needs_a_positive_whole_concurrency(concurrency) -> None:
    with pytest.raises(ConfigError, match="concurrency must be a positive integer"):
        Worker(None, "q", print, concurrency=concurrency)  # type: ignore[arg-type]
