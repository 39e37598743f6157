"""A consume loop left without ``with`` or ``close()`` (an exception in its body, ``break``,
the loop object dropped) is settled at once by the client's releaser thread, with the garbage
collector off: the message in hand is visible again, the rest of the batch given back, and the
client stays usable. Sync and async, on the real Cassandra."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from support.async_runner import LoopThread
from support.released_loops import SETTLE_BOUND, eventually, release_threads, visible

from cassieq_spark import AsyncQueueClient

pytestmark = [pytest.mark.integration]


def test_three_loops_whose_body_raises_each_get_the_message_back_on_one_client(
    own_client, queue_client, queue_name, no_gc, monkeypatch
):
    """Each release runs on the client's releaser thread, none on the thread that left."""
    queue_client.create_queue(queue_name, visibility_timeout=2)
    queue_client.put(queue_name, b"poison")
    deliveries: list[int] = []
    released_on = release_threads(monkeypatch)

    def passes() -> None:
        for _ in range(3):
            with pytest.raises(RuntimeError):
                for m in own_client.consume(queue_name, batch=1, wait=5):
                    deliveries.append(m.delivery_count)
                    raise RuntimeError("handler failed")
            eventually(visible(queue_client, queue_name, 1), "the message was not released")

    runner = threading.Thread(target=passes, daemon=True)
    runner.start()
    runner.join(3 * (5 + SETTLE_BOUND))
    assert not runner.is_alive(), "a pass hung"
    assert deliveries == [1, 2, 3]
    assert released_on == ["cassieq-releaser"] * 3
    # The client that ran the loops still works.
    own_client.put(queue_name, b"after")
    assert sorted(m.payload for m in own_client.peek(queue_name)) == [b"after", b"poison"]
    got = own_client.get_many(queue_name, 10, wait_seconds=1)
    assert got and all(r.ok for r in own_client.ack_many(queue_name, [m.pop_receipt for m in got]))


def test_three_async_loops_whose_body_raises_each_get_the_message_back_on_one_client(
    cassieq_options, queue_client, queue_name, no_gc
):
    queue_client.create_queue(queue_name, visibility_timeout=2)
    queue_client.put(queue_name, b"poison")
    runner = LoopThread()
    deliveries: list[int] = []

    async def passes(client: AsyncQueueClient) -> None:
        for _ in range(3):
            with pytest.raises(RuntimeError):
                async for m in client.consume(queue_name, batch=1, wait=5):
                    deliveries.append(m.delivery_count)
                    raise RuntimeError("handler failed")
            deadline = time.monotonic() + SETTLE_BOUND
            while len(await client.peek(queue_name)) != 1:
                assert time.monotonic() < deadline, "the message was not released"
                await asyncio.sleep(0.05)
        await client.put(queue_name, b"after")
        assert sorted(m.payload for m in await client.peek(queue_name)) == [b"after", b"poison"]

    try:
        client = runner.run(AsyncQueueClient.from_options(cassieq_options))
        try:
            runner.run(passes(client), timeout=3 * (5 + SETTLE_BOUND))
        finally:
            runner.run(client.close())
    finally:
        runner.close()
    assert deliveries == [1, 2, 3]


def test_an_async_loop_left_by_break_gives_its_batch_back(
    cassieq_options, queue_client, queue_name, no_gc
):
    queue_client.create_queue(queue_name, visibility_timeout=30)
    queue_client.put_many(queue_name, [b"a", b"b", b"c"])
    runner = LoopThread()

    async def leave(client: AsyncQueueClient) -> None:
        async for _ in client.consume(queue_name, batch=3, wait=0):
            break

    try:
        client = runner.run(AsyncQueueClient.from_options(cassieq_options))
        try:
            runner.run(leave(client))
            eventually(visible(queue_client, queue_name, 3), "the batch was not given back")
        finally:
            runner.run(client.close())
    finally:
        runner.close()
    assert queue_client.stats(queue_name)["in_flight"] == 0


def test_a_loop_left_by_break_acks_nothing_more_and_gives_its_batch_back(
    own_client, queue_client, queue_name, no_gc
):
    queue_client.create_queue(queue_name, visibility_timeout=30)
    queue_client.put_many(queue_name, [b"a", b"b", b"c"])
    for _ in own_client.consume(queue_name, batch=3, wait=0):
        break
    eventually(visible(queue_client, queue_name, 3), "the batch was not given back")
    s = queue_client.stats(queue_name)
    assert (s["in_flight"], s["acked"]) == (0, 0), s


def test_a_body_that_acks_its_own_message_is_warned_about(queue_client, queue_name, caplog):
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [b"a", b"b"])
    loop = queue_client.consume(queue_name, batch=2, wait=0, stop_when_empty=True)
    with caplog.at_level("WARNING", logger="cassieq_spark.consume_loop"), loop:
        for m in loop:
            queue_client.ack(queue_name, m.pop_receipt)
    assert "the body must not ack or change the visibility" in caplog.text
    assert queue_client.stats(queue_name)["acked"] == 2
