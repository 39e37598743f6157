"""Each way of naming a source's queues is one type (spark/selection.py): what it selects, how
its offsets are written, and what it allows. One queue keeps the single-queue offset format;
the list and the pattern write one entry per queue, and each refuses the other's checkpoint."""

from __future__ import annotations

import pytest

from cassieq_spark.errors import CheckpointMismatchError, QueueNotFoundError
from cassieq_spark.spark.offset import SourceOffset
from cassieq_spark.spark.options import parse_source_settings
from cassieq_spark.spark.selection import ListedQueues, OneQueue, QueuePattern

pytestmark = pytest.mark.unit


def _offset(queue: str, id_: int = 7) -> SourceOffset:
    return SourceOffset(queue, "00000000-0000-0000-0000-000000000001", 3, id_, 1000)


@pytest.mark.parametrize(
    "options, mode",
    [
        ({"queue": "a"}, OneQueue(("a",))),
        ({"queues": "a, b"}, ListedQueues(("a", "b"))),
        ({"queuePattern": "a.*"}, QueuePattern("a.*")),
    ],
)
def test_each_option_gives_its_mode(options: dict, mode: object) -> None:
    assert parse_source_settings(options).selection == mode


def test_one_queue_writes_the_single_queue_offset() -> None:
    one = OneQueue(("a",))
    encoded = one.encode({"a": _offset("a")})
    assert encoded == _offset("a").to_dict()
    assert one.decode(encoded) == {"a": _offset("a")}
    assert one.report({"a": {"behind": 0}}) == {"behind": 0}
    with pytest.raises(CheckpointMismatchError, match="option 'queue'"):
        one.decode(ListedQueues(("a",)).encode({"a": _offset("a")}))


@pytest.mark.parametrize("mode", [ListedQueues(("b", "a")), QueuePattern("[ab]")])
def test_several_queues_write_one_entry_per_queue(mode) -> None:
    offsets = {"b": _offset("b", 9), "a": _offset("a")}
    encoded = mode.encode(offsets)
    assert list(encoded["queues"]) == ["a", "b"]  # sorted: Spark compares offsets as text
    assert mode.decode(encoded) == offsets
    assert mode.report({"b": {"behind": 1}, "a": {"behind": 2}}) == {
        "queues": {"a": {"behind": 2}, "b": {"behind": 1}}
    }
    with pytest.raises(CheckpointMismatchError, match="'queues' or 'queuePattern'"):
        mode.decode(_offset("a").to_dict())


def test_what_each_mode_selects_and_allows() -> None:
    one, listed, pattern = OneQueue(("a",)), ListedQueues(("a", "b")), QueuePattern("a.*")
    assert one.matches("a") and not one.matches("ab")
    assert listed.matches("b") and not listed.matches("c")
    assert pattern.matches("ab") and not pattern.matches("ba")
    assert (one.may_create, listed.may_create, pattern.may_create) == (True, True, False)
    assert pattern.names == () and listed.names == ("a", "b")
    missing = QueueNotFoundError("queue 'b' does not exist")
    assert one.missing_on_replay("a", missing) is missing
    assert "remove 'b' from option 'queues'" in str(listed.missing_on_replay("b", missing))
