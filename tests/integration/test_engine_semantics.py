"""Delivery semantics of the queue engine against the real Cassandra: visibility, receipts,
delays, dead letters, delete/re-create, peek and stats."""

from __future__ import annotations

import time

import pytest

from cassieq_spark import StaleReceiptError
from cassieq_spark.engine.consume.consumer import (
    HEADER_DELIVERY_COUNT,
    HEADER_ORIGIN_ID,
    HEADER_ORIGIN_QUEUE,
)

pytestmark = [pytest.mark.integration, pytest.mark.fast, pytest.mark.usefixtures("fault_mode")]


def _get_within(client, queue, seconds, **kw):
    """Poll ``get`` until a message comes or ``seconds`` pass (timers resolve per second)."""
    deadline = time.monotonic() + seconds
    while True:
        msg = client.get(queue, **kw)
        if msg is not None or time.monotonic() > deadline:
            return msg
        time.sleep(0.1)


def test_put_get_ack_round_trip(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    first = queue_client.put(queue_name, "héllo", headers={"k": "v"})
    ids = queue_client.put_many(queue_name, [b"a", b"b"])
    assert ids == [first + 1, first + 2]
    msg = queue_client.get(queue_name)
    assert (msg.id, msg.payload, msg.headers, msg.delivery_count) == (
        first,
        "héllo".encode(),
        {"k": "v"},
        1,
    )
    assert msg.enqueued_at is not None
    assert queue_client.ack(queue_name, msg.pop_receipt) is True
    assert queue_client.ack(queue_name, msg.pop_receipt) is False  # a second ack changes nothing
    got = {queue_client.get(queue_name).payload for _ in range(2)}
    assert got == {b"a", b"b"}
    assert queue_client.get(queue_name) is None


def test_get_hides_message_and_expiry_redelivers_with_new_receipt(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    mid = queue_client.put(queue_name, b"x")
    first = queue_client.get(queue_name, visibility_timeout=1.0)
    assert first.id == mid and first.delivery_count == 1
    assert queue_client.get(queue_name) is None  # hidden while in flight
    second = _get_within(queue_client, queue_name, 8, visibility_timeout=30)
    assert second is not None and second.id == mid
    assert second.delivery_count == 2
    assert second.pop_receipt != first.pop_receipt
    assert second.payload == b"x"
    # The first consumer's receipt can neither ack nor extend any more.
    assert queue_client.ack(queue_name, first.pop_receipt) is False
    with pytest.raises(StaleReceiptError, match="stale"):
        queue_client.change_visibility(queue_name, first.pop_receipt, 10)
    assert queue_client.ack(queue_name, second.pop_receipt) is True
    assert queue_client.stats(queue_name)["acked"] == 1


def test_change_visibility_zero_releases_and_extension_holds(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    mid = queue_client.put(queue_name, b"x")
    msg = queue_client.get(queue_name, visibility_timeout=60)
    released = queue_client.change_visibility(queue_name, msg.pop_receipt, 0)
    assert released != msg.pop_receipt
    again = _get_within(queue_client, queue_name, 5)
    assert again is not None and again.id == mid and again.delivery_count == 2
    assert queue_client.ack(queue_name, released) is False  # superseded by the new delivery

    # Extending: a 1 s delivery extended to 30 s does not come back after 1 s.
    longer = queue_client.change_visibility(queue_name, again.pop_receipt, 30)
    time.sleep(2.5)
    assert queue_client.get(queue_name) is None
    assert queue_client.ack(queue_name, again.pop_receipt) is False
    assert queue_client.ack(queue_name, longer) is True
    with pytest.raises(StaleReceiptError):
        queue_client.change_visibility(queue_name, longer, 5)  # acked: nothing to extend


def test_delayed_message_invisible_until_due_then_delivered(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    delayed = queue_client.put(queue_name, b"later", delay=2.0)
    now_id = queue_client.put(queue_name, b"now")
    assert queue_client.stats(queue_name)["delayed"] == 1
    assert [m.id for m in queue_client.peek(queue_name)] == [now_id]
    msg = queue_client.get(queue_name)
    assert msg.id == now_id
    queue_client.ack(queue_name, msg.pop_receipt)
    assert queue_client.get(queue_name) is None  # the reader has moved past the delayed id
    assert queue_client.stats(queue_name)["reader_pointer"] > delayed
    late = _get_within(queue_client, queue_name, 10)
    assert late is not None and late.id == delayed and late.payload == b"later"
    assert late.delivery_count == 1
    assert queue_client.ack(queue_name, late.pop_receipt)


@pytest.mark.parametrize("with_dlq", [True, False])
def test_dead_letter_after_max_deliveries(queue_client, queue_name, with_dlq):
    dlq = f"{queue_name}_dlq"
    if with_dlq:
        queue_client.create_queue(dlq)
    queue_client.create_queue(
        queue_name, max_delivery_count=2, dead_letter_queue=dlq if with_dlq else None
    )
    mid = queue_client.put(queue_name, b"poison", headers={"h": "1"})
    for n in (1, 2):
        msg = _get_within(queue_client, queue_name, 8, visibility_timeout=0.5)
        assert msg is not None and msg.id == mid and msg.delivery_count == n
    time.sleep(1.5)
    # The third delivery would exceed the maximum: the message leaves the queue instead.
    assert _get_within(queue_client, queue_name, 3) is None
    stats = queue_client.stats(queue_name)
    assert stats["backlog"] == 0 and stats["in_flight"] == 0
    if with_dlq:
        assert stats["dead_lettered"] == 1 and stats["dropped"] == 0
        dead = queue_client.get(dlq)
        assert dead.payload == b"poison"
        assert dead.headers["h"] == "1"
        assert dead.headers[HEADER_ORIGIN_QUEUE] == queue_name
        assert dead.headers[HEADER_ORIGIN_ID] == str(mid)
        assert dead.headers[HEADER_DELIVERY_COUNT] == "2"
        assert queue_client.get(dlq) is None  # moved once
    else:
        assert stats["dropped"] == 1 and stats["dead_lettered"] == 0


def test_delete_and_recreate_sees_no_old_messages(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"old1", b"old2", b"old3"])
    queue_client.get(queue_name)
    queue_client.delete_queue(queue_name)
    assert queue_name not in [q.name for q in queue_client.list_queues()]
    queue_client.create_queue(queue_name)
    assert queue_client.get(queue_name) is None
    assert queue_client.peek(queue_name) == []
    queue_client.put(queue_name, b"new")
    msg = queue_client.get(queue_name)
    assert msg.payload == b"new" and msg.delivery_count == 1
    assert queue_client.get(queue_name) is None
    stats = queue_client.stats(queue_name)
    assert stats["enqueued"] == 1 and stats["acked"] == 0


def test_peek_has_no_side_effects(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    ids = queue_client.put_many(queue_name, [b"1", b"2", b"3"])
    assert [m.id for m in queue_client.peek(queue_name, limit=2)] == ids[:2]
    assert [m.id for m in queue_client.peek(queue_name)] == ids
    before = queue_client.stats(queue_name)
    assert before["backlog"] == 3 and before["in_flight"] == 0
    msg = queue_client.get(queue_name)
    assert msg.delivery_count == 1  # peeking delivered nothing
    assert [m.id for m in queue_client.peek(queue_name)] == [i for i in ids if i != msg.id]


def test_stats_are_consistent(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"m"] * 5)
    queue_client.put(queue_name, b"d", delay=60)
    time.sleep(0.2)
    a = queue_client.get(queue_name)
    b = queue_client.get(queue_name)
    assert queue_client.ack(queue_name, a.pop_receipt)
    s = queue_client.stats(queue_name)
    assert s["enqueued"] == 6
    assert s["acked"] == 1
    assert s["in_flight"] == 1
    assert s["backlog"] == 3
    assert s["delayed"] == 1
    assert s["dead_lettered"] == 0
    assert s["oldest_age_seconds"] > 0
    # Every message is exactly one of: acked, in flight, visible, delayed.
    assert s["acked"] + s["in_flight"] + s["backlog"] + s["delayed"] == s["enqueued"]
    queue_client.ack(queue_name, b.pop_receipt)
    s2 = queue_client.stats(queue_name)
    assert (s2["acked"], s2["in_flight"], s2["backlog"]) == (2, 0, 3)
