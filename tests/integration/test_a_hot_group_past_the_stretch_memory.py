"""A group with more messages waiting than the reader's stretch memory keeps
(engine/consume/stretch_memory.py, "cut"): the memory keeps the hot group's first rows and the
other groups behind them, so the others are delivered at their pace; once the hot group's kept
rows are delivered and acked, the stretch is read again and the hot group goes on in id order.
Real Cassandra; the second test runs with every compare-and-set's reply lost too."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import pytest

from cassieq_spark.engine.consume import stretch_memory
from cassieq_spark.engine.consume.reader import HORIZON_WINDOW

pytestmark = pytest.mark.integration


def drain(
    q,
    queue_name: str,
    waiting: set[int],
    calls_at_most: int,
    per_call: int = 100,
    before_each: Callable[[], object] | None = None,
):
    """get_many + ack_many until ``waiting`` is delivered or the calls run out; each group's
    deliveries in order, never two of a group in one call. ``before_each`` runs before every
    call (a producer going on)."""
    delivered: dict[str | None, list[int]] = defaultdict(list)
    calls = 0
    while waiting and calls < calls_at_most:
        if before_each is not None:
            before_each()
        got = q.get_many(queue_name, max_messages=per_call)
        calls += 1
        groups = [m.group for m in got if m.group is not None]
        assert len(groups) == len(set(groups)), groups  # one of a group at a time
        for m in got:
            delivered[m.group].append(m.id)
            waiting.discard(m.id)
        assert all(r.ok for r in q.ack_many(queue_name, [m.pop_receipt for m in got]))
    return delivered, calls


def test_other_groups_behind_a_hot_group_longer_than_the_memory_are_delivered(
    queue_client, queue_name
):
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=60)
    hot_count = stretch_memory.MEMORY_ROWS + HORIZON_WINDOW + 100
    hot: list[int] = []
    for i in range(0, hot_count, 2000):
        hot += q.put_many(queue_name, ["h"] * min(2000, hot_count - i), group="hot")
    others = {f"o{i}": q.put_many(queue_name, ["o", "o"], group=f"o{i}") for i in range(20)}
    waiting = {m for ids in others.values() for m in ids}
    delivered, calls = drain(q, queue_name, waiting, calls_at_most=12)
    # Each call reads a window of ids past what the memory holds; without the cut the memory
    # filled with the hot group's rows and ended the stretch before the others.
    assert not waiting, f"{len(waiting)} other messages still waiting after {calls} calls"
    assert delivered["hot"] == hot[:calls]
    assert all(delivered[g] == ids for g, ids in others.items())


@pytest.mark.parametrize("fault_mode", ["none", "lost-reply"], indirect=True)
@pytest.mark.parametrize("pointer", ["moves", "held below"])
def test_a_cut_hot_group_goes_on_in_order_once_its_kept_rows_are_delivered(
    queue_client, queue_name, fault_mode, pointer, monkeypatch
):
    """With the reader pointer held below the hot group (a message of another group held by
    this client, not acked), the memory's start stays put: the hot group's kept rows are all
    finished while the memory still covers them, and the stretch must be read again."""
    monkeypatch.setattr(stretch_memory, "MEMORY_ROWS_PER_GROUP", 3)
    q = queue_client
    q.create_queue(queue_name, visibility_timeout=60)
    if pointer == "held below":
        slow = q.put(queue_name, "s", group="slow")
        assert [m.id for m in q.get_many(queue_name, max_messages=1)] == [slow]
    hot = q.put_many(queue_name, [f"h{i}" for i in range(20)], group="hot")
    a = q.put_many(queue_name, [f"a{i}" for i in range(6)], group="a")
    b = q.put_many(queue_name, [f"b{i}" for i in range(10)], group="b")
    plain = q.put_many(queue_name, ["p"] * 3)
    waiting = set(hot) | set(a) | set(b) | set(plain)
    # A producer goes on adding to the hot group before every call: its newest message lies
    # past the memory's end when the hot group's kept rows run out, and a scan that trusted
    # the memory then would read it from the table and take it before the group's older ones.
    tail: list[int] = []

    def produce() -> None:
        if len(tail) < 30:
            mid = q.put(queue_name, f"t{len(tail)}", group="hot")
            tail.append(mid)
            waiting.add(mid)

    delivered, calls = drain(
        q, queue_name, waiting, calls_at_most=120, per_call=10, before_each=produce
    )
    assert not waiting, f"{len(waiting)} messages still waiting after {calls} calls"
    assert delivered["hot"] == sorted(hot + tail)  # in id order across every cut
    assert delivered["a"] == a and delivered["b"] == b
    assert sorted(delivered[None]) == plain
