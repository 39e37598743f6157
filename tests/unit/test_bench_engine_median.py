"""The engine suite reports the median of interleaved runs, with the spread beside it."""

import pytest

from bench.engine import median_runs

pytestmark = pytest.mark.unit


def _run(put: float, get: float, lwt: float = 1.0) -> list[dict]:
    return [
        {"operation": "put", "per_second": put, "lwt_per_message": lwt},
        {"operation": "get", "per_second": get, "lwt_per_message": lwt},
    ]


def test_each_operation_keeps_its_median_run_and_the_spread() -> None:
    rows = median_runs([_run(100, 30, 1.0), _run(300, 10, 2.0), _run(200, 20, 3.0)])
    put, get = rows
    assert (put["per_second"], put["min"], put["max"]) == (200, 100, 300)
    assert put["lwt_per_message"] == 3.0  # the counts of the run whose rate is the median
    assert put["values"] == [100, 300, 200] and put["runs"] == 3
    assert (get["per_second"], get["min"], get["max"]) == (20, 10, 30)


def test_a_single_run_is_its_own_median() -> None:
    (put, _) = median_runs([_run(5, 6)])
    assert put["per_second"] == put["min"] == put["max"] == 5


def test_runs_that_measured_different_operations_are_refused() -> None:
    other = [{"operation": "ack", "per_second": 1.0}, {"operation": "get", "per_second": 1.0}]
    with pytest.raises(ValueError, match="different operations"):
        median_runs([_run(1, 2), other])
