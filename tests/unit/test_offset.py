"""The source offset: deterministic JSON with a fixed key order and integers only."""

from __future__ import annotations

import json

import pytest

from cassieq_spark.errors import ConfigError
from cassieq_spark.spark.offset import SourceOffset


def test_json_has_fixed_key_order_and_integers():
    off = SourceOffset(ts=1_700_000_000_123, id=42)
    assert off.to_json() == '{"id": 42, "ts": 1700000000123}'
    # Spark serializes the dict with json.dumps and compares strings: same bytes every time.
    assert json.dumps(off.to_dict()) == off.to_json()
    assert list(off.to_dict()) == ["id", "ts"]


def test_round_trip_from_any_key_order():
    d = json.loads('{"ts": 5, "id": 7}')
    off = SourceOffset.from_dict(d)
    assert off == SourceOffset(7, 5)
    assert json.dumps(off.to_dict()) == '{"id": 7, "ts": 5}'
    assert SourceOffset.from_json(off.to_json()) == off


@pytest.mark.parametrize(
    "bad",
    [
        {"id": 1},
        {"id": 1, "ts": 2, "x": 3},
        {"id": 1.0, "ts": 2},
        {"id": True, "ts": 2},
        {"id": "1", "ts": 2},
        {"id": -5, "ts": 2},
        [1, 2],
    ],
)
def test_rejects_foreign_offsets(bad):
    with pytest.raises(ConfigError, match="offset"):
        SourceOffset.from_dict(bad)


def test_ordering_is_by_id_then_ts():
    assert SourceOffset(1, 100) < SourceOffset(2, 0)
    assert max(SourceOffset(3, 5), SourceOffset(3, 9)) == SourceOffset(3, 9)
