"""A put with a deduplication id enqueues its message once within the deduplication window,
however often it is sent: retried after a lost reply, re-sent by a producer restarted after a
crash, or sent by several processes at once. Every test counts the messages a consumer gets."""

from __future__ import annotations

import time

import pytest
from cassandra import WriteTimeout
from support.dedup_producers import finish, run_producer
from support.queues import drain_messages

from cassieq_spark import PutEntry, QueueClient
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.write import producer
from cassieq_spark.errors import ConfigError


class ReplyLost(Exception):
    """The put applied, but its caller never heard back."""


def _lose_the_reply(**_context) -> None:
    raise ReplyLost("the reply to the producer was lost")


@pytest.mark.usefixtures("fault_mode")
def test_a_put_retried_after_its_reply_was_lost_enqueues_once(queue_client, queue_name):
    """Under ``lost-reply`` every compare-and-set of the put also loses its reply."""
    queue_client.create_queue(queue_name)
    faults.on("producer.enqueued", _lose_the_reply)
    with pytest.raises(ReplyLost):
        queue_client.put(queue_name, b"order-1", dedup_id="order-1")
    faults.state.points.clear()
    first = queue_client.put(queue_name, b"order-1", dedup_id="order-1")
    again = queue_client.put(queue_name, b"order-1 sent a third time", dedup_id="order-1")
    got = drain_messages(queue_client, queue_name)
    assert [(m.id, m.payload) for m in got] == [(first, b"order-1")]
    assert again == first


def test_without_a_dedup_id_the_same_retry_enqueues_twice(queue_client, queue_name):
    """The control of the test above: what deduplication prevents."""
    queue_client.create_queue(queue_name)
    faults.on("producer.enqueued", _lose_the_reply)
    try:
        with pytest.raises(ReplyLost):
            queue_client.put(queue_name, b"order-1")
    finally:
        faults.reset()
    queue_client.put(queue_name, b"order-1")
    assert [m.payload for m in drain_messages(queue_client, queue_name)] == [b"order-1"] * 2


def test_a_put_whose_message_write_lost_its_reply_is_retried_into_one_message(
    queue_client, queue_name
):
    """The message row landed but the writer saw a timeout and rolled its block back."""
    queue_client.create_queue(queue_name)
    # the message rows go as one unlogged batch of bound inserts, which the seam sees as "BATCH"
    faults.inject(faults.LOST_REPLY, lambda cql: cql == "BATCH")
    try:
        with pytest.raises(WriteTimeout):
            queue_client.put(queue_name, b"m", dedup_id="m-1")
    finally:
        faults.reset()
    mid = queue_client.put(queue_name, b"m", dedup_id="m-1")
    assert [(m.id, m.payload) for m in drain_messages(queue_client, queue_name)] == [(mid, b"m")]


@pytest.mark.parametrize("kill_at", ["producer.written", "producer.enqueued"])
def test_a_producer_killed_at_its_put_and_restarted_enqueues_once(
    queue_client, queue_name, cassieq_options, kill_at
):
    """Killed with its message written but its block open (``producer.written``), or with
    the put done but not returned (``producer.enqueued``); the restart sends the same ids."""
    queue_client.create_queue(queue_name)
    ids = [f"job-{i}" for i in range(3)]
    status, _ = finish(run_producer(cassieq_options, queue_name, ids, kill_at=kill_at))
    assert status < 0, "the producer was to be killed at its first put"
    status, returned = finish(run_producer(cassieq_options, queue_name, ids))
    assert status == 0
    got = drain_messages(queue_client, queue_name)
    assert sorted(m.payload.decode() for m in got) == ids  # each once, none lost
    assert {m.payload.decode(): m.id for m in got} == returned


def test_concurrent_puts_of_the_same_dedup_ids_from_several_processes_enqueue_once(
    queue_client, queue_name, cassieq_options
):
    queue_client.create_queue(queue_name)
    ids = [f"evt-{i}" for i in range(12)]
    # Each process sends every id, starting at another one, so they collide all along.
    procs = [
        run_producer(cassieq_options, queue_name, ids[k * 3 :] + ids[: k * 3]) for k in range(4)
    ]
    results = [finish(p) for p in procs]
    assert all(status == 0 for status, _ in results)
    got = drain_messages(queue_client, queue_name)
    counted = {d: [m.id for m in got if m.payload.decode() == d] for d in ids}
    assert all(len(v) == 1 for v in counted.values()), counted  # every id once
    assert len(got) == len(ids)
    for _, returned in results:  # every process was told the one id
        assert returned == {d: v[0] for d, v in counted.items()}


def test_put_many_and_put_batch_deduplicate_per_message(queue_client, queue_name):
    queue_client.create_queue(queue_name)
    first = queue_client.put_many(queue_name, [b"a", b"b", b"c"], dedup_ids=["a", None, "c"])
    # "a" again, "c" twice in one call, "b" has no id: only b and d are new
    second = queue_client.put_batch(
        queue_name,
        [
            PutEntry(b"a", headers={"try": "2"}, dedup_id="a"),
            PutEntry(b"b"),
            PutEntry(b"c", dedup_id="c"),
            PutEntry(b"d", headers={"k": "v"}, dedup_id="d"),
            PutEntry(b"c", dedup_id="c"),
        ],
    )
    assert second[0] == first[0] and second[2] == second[4] == first[2]
    got = drain_messages(queue_client, queue_name)
    assert sorted(m.payload for m in got) == [b"a", b"b", b"b", b"c", b"d"]
    assert {m.payload: m.headers for m in got if m.payload in (b"a", b"d")} == {
        b"a": {},
        b"d": {"k": "v"},
    }


def test_the_dedup_window_ends_and_its_keys_expire_with_it(
    queue_client: QueueClient, queue_name, monkeypatch
):
    queue_client.create_queue(queue_name)
    monkeypatch.setattr(producer, "DEDUP_WINDOW_SECONDS", 2)
    first = queue_client.put(queue_name, b"x", dedup_id="x")
    ttl = queue_client.conn.execute(
        "SELECT TTL(lo) AS ttl FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
        (queue_client.get_queue(queue_name).queue_id, producer.dedup_key("x") + "#0"),
    ).one()
    assert ttl is not None and 0 < ttl.ttl <= 2  # storage bounded by the window
    assert queue_client.put(queue_name, b"x", dedup_id="x") == first
    time.sleep(2.5)
    later = queue_client.put(queue_name, b"x", dedup_id="x")  # a new window: a new message
    assert later != first
    assert sorted(m.id for m in drain_messages(queue_client, queue_name)) == [first, later]


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "é", 7])
def test_a_bad_dedup_id_is_refused_naming_it(queue_client, queue_name, bad):
    queue_client.create_queue(queue_name)
    with pytest.raises(ConfigError, match="deduplication id|dedup_id") as info:
        queue_client.put(queue_name, b"x", dedup_id=bad)
    assert "1-128 printable ASCII" in str(info.value)
    assert queue_client.peek(queue_name) == []
