"""The source offset: deterministic JSON with a fixed key order, naming its queue."""

from __future__ import annotations

import json
import uuid

import pytest

from cassieq_spark.errors import CheckpointMismatchError, ConfigError
from cassieq_spark.spark.offset import MultiOffset, SourceOffset
from cassieq_spark.spark.queue_stream import split_cap

QID = "0b5c0c8e-3d4f-4f43-9a7e-5d7f4a0f3e21"


def test_json_has_fixed_key_order():
    off = SourceOffset("events", QID, 40, 42, 1_700_000_000_123)
    assert off.to_json() == (
        f'{{"queue": "events", "incarnation": "{QID}", "from": 40, "id": 42, "ts": 1700000000123}}'
    )
    # Spark serializes the dict with json.dumps and compares strings: same bytes every time.
    assert json.dumps(off.to_dict()) == off.to_json()
    assert list(off.to_dict()) == ["queue", "incarnation", "from", "id", "ts"]


def test_round_trip_from_any_key_order():
    d = json.loads(f'{{"ts": 5, "id": 7, "from": 6, "incarnation": "{QID}", "queue": "q"}}')
    off = SourceOffset.from_dict(d)
    assert off == SourceOffset("q", QID, 6, 7, 5)
    assert SourceOffset.from_json(off.to_json()) == off


@pytest.mark.parametrize(
    "bad",
    [
        {"queue": "q", "incarnation": QID, "from": 1, "id": 1},
        {"queue": "q", "incarnation": QID, "from": 1, "id": 1, "ts": 2, "x": 3},
        {"queue": "q", "incarnation": QID, "from": 1, "id": 1.0, "ts": 2},
        {"queue": "q", "incarnation": QID, "from": 1, "id": True, "ts": 2},
        {"queue": "q", "incarnation": QID, "from": 1, "id": "1", "ts": 2},
        {"queue": "q", "incarnation": QID, "from": 1, "id": -5, "ts": 2},
        {"queue": "", "incarnation": QID, "from": 1, "id": 1, "ts": 2},
        {"queue": "q", "incarnation": 5, "from": 1, "id": 1, "ts": 2},
        [1, 2],
    ],
)
def test_rejects_foreign_offsets(bad):
    with pytest.raises(ConfigError, match="offset"):
        SourceOffset.from_dict(bad)


def test_offsets_of_older_versions_are_refused_with_what_to_do():
    """They do not say which queue they belong to (F24): no guessing."""
    with pytest.raises(CheckpointMismatchError, match="new checkpointLocation"):
        SourceOffset.from_dict({"id": 3, "ts": 4})


def test_check_queue_names_both_queues_and_incarnations():
    off = SourceOffset("a", QID, 0, 10, 0)
    off.check_queue("a", uuid.UUID(QID))
    other = uuid.uuid4()
    with pytest.raises(CheckpointMismatchError, match=f"'a'.*{QID}.*'b'.*{other}"):
        off.check_queue("b", other)
    with pytest.raises(CheckpointMismatchError, match=f"deleted and created again.*{other}"):
        off.check_queue("a", other)


def test_covers_is_by_id_and_time():
    a = SourceOffset("q", QID, 0, 3, 9)
    assert a.covers(SourceOffset("q", QID, 0, 3, 5))
    assert not a.covers(SourceOffset("q", QID, 0, 4, 5))
    assert not a.covers(SourceOffset("q", QID, 0, 2, 10))


# -- several queues (options queues, queuePattern) -------------------------------------------------

QID2 = "7a1c2d3e-4f50-4a6b-8c9d-0e1f2a3b4c5d"


def test_multi_offset_names_each_queue_in_sorted_order():
    off = MultiOffset({"b": SourceOffset("b", QID2, 1, 2, 3), "a": SourceOffset("a", QID, 4, 5, 6)})
    d = off.to_dict()
    assert json.dumps(d) == (
        f'{{"queues": {{"a": {{"incarnation": "{QID}", "from": 4, "id": 5, "ts": 6}}, '
        f'"b": {{"incarnation": "{QID2}", "from": 1, "id": 2, "ts": 3}}}}}}'
    )
    assert MultiOffset.from_dict(json.loads(json.dumps(d))) == off
    assert MultiOffset.from_dict({"queues": {}}).to_dict() == {"queues": {}}


def test_checkpoints_of_one_queue_and_of_several_are_not_mixed():
    single = SourceOffset("events", QID, 1, 2, 3).to_dict()
    with pytest.raises(CheckpointMismatchError, match="single queue 'events'.*option 'queues'"):
        MultiOffset.from_dict(single)
    several = MultiOffset({"a": SourceOffset("a", QID, 1, 2, 3)}).to_dict()
    with pytest.raises(CheckpointMismatchError, match="queues a .*now reads with option 'queue'"):
        SourceOffset.from_dict(several)


@pytest.mark.parametrize(
    "bad",
    [
        {"queues": []},
        {"queues": {"a": {"id": 1}}},
        {"queues": {"a": {"incarnation": QID, "from": 1, "id": "2", "ts": 3}}},
        {"queues": {}, "id": 1},
    ],
)
def test_bad_multi_offsets_are_refused(bad):
    with pytest.raises(ConfigError, match="invalid cassieq source offset"):
        MultiOffset.from_dict(bad)


def _shares(max_rows, names, turn, has=None):
    """The shares split_cap hands out when queue ``n`` has ``has[n]`` messages (default: plenty)."""
    got = {}

    def plan_one(name, share):
        got[name] = share
        return min(share, (has or {}).get(name, 10**9)) if share is not None else 0

    split_cap(max_rows, names, turn, plan_one)
    return got


def test_row_cap_shares_go_round():
    names = ["a", "b", "c"]
    assert _shares(None, names, 0) == {"a": None, "b": None, "c": None}
    assert _shares(10, names, 0) == {"a": 4, "b": 3, "c": 3}
    assert _shares(10, names, 1) == {"b": 4, "c": 3, "a": 3}
    assert sum(_shares(10, names, 5).values()) == 10
    # below one message per queue: each queue gets its turn within len(names) triggers
    turns = [_shares(1, names, t) for t in range(3)]
    assert [next(n for n, v in s.items() if v) for s in turns] == ["a", "b", "c"]
    assert _shares(5, [], 0) == {}


def test_a_share_left_unused_goes_to_the_next_queues():
    """S12 (review 2): a queue with nothing leaves its share to the queues after it, so a
    trigger is empty only when every queue is."""
    assert _shares(1, ["a", "b"], 0, has={"a": 0, "b": 3}) == {"a": 1, "b": 1}
    assert _shares(10, ["a", "b", "c"], 0, has={"a": 1, "b": 0, "c": 50}) == {
        "a": 4,
        "b": 5,
        "c": 9,
    }
