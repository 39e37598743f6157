"""``startingPosition`` values no queue can reach are refused when the options are read
(``load()``), not at start with a raw driver error: an id beyond the bigint range (a TypeError
for column 'lo'), an id so close to its end that the planning window overflows, a timestamp
after year 9999 (a ValueError in initialOffset), and one years ahead (microseconds given for
milliseconds: taken as "after every id" with no word)."""

from __future__ import annotations

import time

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark import source_checks
from cassieq_spark.spark.source_checks import starting_position

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "row, value, fragment",
    [
        ("N260", '{"id": 99999999999999999999999}', "must be from 0 to 4611686018427387904"),
        ("N261", '{"id": 9223372036854775807}', "must be from 0 to 4611686018427387904"),
        ("N262", '{"timestamp": 99999999999999}', "is year 5138: T is epoch milliseconds"),
        ("N263", '{"timestamp": 253402300800000}', "is after year 9999"),
    ],
)
def test_unreachable_starting_positions_are_refused_at_load(
    row: str, value: str, fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        starting_position(value)
    message = str(info.value)
    assert fragment in message and "startingPosition" in message and "\n" not in message


def test_reachable_starting_positions_are_taken() -> None:
    limit = source_checks.MAX_START_ID
    assert starting_position(f'{{"id": {limit}}}').value == limit
    soon = int((time.time() + 3600) * 1000)  # an hour ahead: clocks differ
    assert starting_position(f'{{"timestamp": {soon}}}').value == soon
    assert starting_position('{"timestamp": 0}').value == 0
