"""One contract, two clients: every test here runs against :class:`QueueClient` and against
:class:`AsyncQueueClient` (its coroutines run on an event loop thread, ``support.async_runner``),
on the real Cassandra (the compare-and-set paths also with every reply lost: ``fault_mode``,
settled by reading back through the asynchronous path too). Plus what only the asynchronous client promises: a long poll leaves the
event loop free, and concurrent calls start no thread."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import threading
import time
from collections.abc import Iterator

import pytest
from support.async_runner import LoopThread, SyncFacade

from cassieq_spark import AsyncQueueClient, QueueClient
from cassieq_spark.errors import (
    ConfigError,
    InvalidReceiptError,
    QueueExistsError,
    QueueNotFoundError,
    StaleReceiptError,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    runner = LoopThread()
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def async_client(queue_client, cassieq_options, loop_thread) -> Iterator[AsyncQueueClient]:
    client = loop_thread.run(AsyncQueueClient.from_options(cassieq_options))
    yield client
    loop_thread.run(client.close())


@pytest.fixture(params=["sync", "async"])
def client(request, queue_client, async_client, loop_thread):
    """The client under contract: the synchronous one, or the asynchronous one behind a
    synchronous face (same calls, same results)."""
    if request.param == "sync":
        return queue_client
    return SyncFacade(async_client, loop_thread)


@pytest.mark.usefixtures("fault_mode")
def test_put_get_ack(client, queue_name):
    client.create_queue(queue_name)
    mid = client.put(queue_name, "hello", headers={"k": "v"})
    m = client.get(queue_name)
    assert (m.id, m.text, m.headers, m.delivery_count) == (mid, "hello", {"k": "v"}, 1)
    assert client.get(queue_name) is None
    assert client.ack(queue_name, m.pop_receipt) is True
    assert client.ack(queue_name, m.pop_receipt) is False
    s = client.stats(queue_name)
    assert (s["enqueued"], s["acked"], s["backlog"], s["in_flight"]) == (1, 1, 0, 0)


def test_a_message_not_acked_comes_back_after_its_visibility_timeout(client, queue_name):
    client.create_queue(queue_name)
    mid = client.put(queue_name, b"x")
    first = client.get(queue_name, visibility_timeout=1)
    assert first.id == mid and client.get(queue_name) is None
    again = client.get_many(queue_name, 1, wait_seconds=5)
    assert [m.id for m in again] == [mid] and again[0].delivery_count == 2
    with pytest.raises(StaleReceiptError):
        client.change_visibility(queue_name, first.pop_receipt, 10)
    assert client.ack(queue_name, again[0].pop_receipt)


@pytest.mark.usefixtures("fault_mode")
def test_change_visibility_hides_releases_and_replaces_the_payload(client, queue_name):
    client.create_queue(queue_name)
    client.put(queue_name, "a")
    m = client.get(queue_name)
    r2 = client.change_visibility(queue_name, m.pop_receipt, 0, payload="b")
    assert client.ack(queue_name, m.pop_receipt) is False
    m2 = client.get(queue_name)
    assert (m2.id, m2.text) == (m.id, "b")
    results = client.change_visibility_many(queue_name, [(m2.pop_receipt, 30), (r2, 30)])
    assert [r.status for r in results] == ["ok", "stale"]
    assert client.ack_many(queue_name, [results[0].new_receipt])[0].ok


@pytest.mark.usefixtures("fault_mode")
def test_get_many_and_ack_many_in_order_with_per_receipt_results(client, queue_name):
    client.create_queue(queue_name)
    ids = client.put_many(queue_name, [f"m{i}" for i in range(25)])
    got = client.get_many(queue_name, 10)
    got += client.get_many(queue_name, 20)
    assert sorted(m.id for m in got) == ids
    results = client.ack_many(queue_name, [m.pop_receipt for m in got] + [got[0].pop_receipt])
    assert [r.status for r in results] == ["ok"] * 25 + ["stale"]
    assert client.get_many(queue_name, 10) == []


def receipt_for(receipt: str, message_id: int, version: int = 1) -> str:
    """A receipt made from ``receipt``: its queue id and tag, another message id and version
    (what a holder of one receipt can build without the queue's key)."""
    raw = base64.urlsafe_b64decode(receipt[2:] + "=" * (-len(receipt[2:]) % 4))
    made = raw[:16] + message_id.to_bytes(8, "big") + version.to_bytes(4, "big") + raw[28:]
    return receipt[:2] + base64.urlsafe_b64encode(made).decode().rstrip("=")


@pytest.mark.usefixtures("fault_mode")
def test_a_receipt_made_from_another_in_flight_message_s_id_is_refused_everywhere(
    client, queue_name
):
    """Seven messages in flight; the holder of the fourth makes receipts for the first and the
    last (its own id -3 and +3, version 1, its own tag). Ack, change_visibility, ack_many,
    change_visibility_many and give_back refuse them, and the real holders' receipts still
    ack."""
    client.create_queue(queue_name)
    client.put_many(queue_name, [f"m{i}" for i in range(7)])
    held = sorted(client.get_many(queue_name, 7, visibility_timeout=60), key=lambda m: m.id)
    assert len(held) == 7
    own = held[3]
    made = [receipt_for(own.pop_receipt, own.id - 3), receipt_for(own.pop_receipt, own.id + 3)]
    for text in made:
        with pytest.raises(InvalidReceiptError, match="tag does not match"):
            client.ack(queue_name, text)
        with pytest.raises(InvalidReceiptError, match="tag does not match"):
            client.change_visibility(queue_name, text, 0)
    assert [r.status for r in client.ack_many(queue_name, made)] == ["invalid", "invalid"]
    results = client.change_visibility_many(queue_name, [(t, 0) for t in made])
    assert [r.status for r in results] == ["invalid", "invalid"]
    given = [dataclasses.replace(held[0], pop_receipt=made[0])]
    assert client.give_back(queue_name, given) == 0
    assert client.get(queue_name) is None  # nothing was released
    results = client.ack_many(queue_name, [m.pop_receipt for m in held])
    assert [r.status for r in results] == ["ok"] * 7
    assert client.stats(queue_name)["acked"] == 7


def test_peek_changes_nothing_and_give_back_does_not_count_a_delivery(client, queue_name):
    client.create_queue(queue_name)
    ids = client.put_many(queue_name, ["a", "b", "c"])
    assert [m.id for m in client.peek(queue_name, 10)] == ids
    got = client.get_many(queue_name, 3)
    assert client.peek(queue_name, 10) == []
    assert client.give_back(queue_name, got) == 3
    again = client.get_many(queue_name, 3)
    assert sorted(m.id for m in again) == ids and {m.delivery_count for m in again} == {1}
    client.ack_many(queue_name, [m.pop_receipt for m in again])


def test_a_long_poll_returns_when_a_message_arrives_and_waits_out_an_empty_queue(
    client, queue_client, queue_name
):
    client.create_queue(queue_name)
    t0 = time.monotonic()
    assert client.get_many(queue_name, 5, wait_seconds=1.0) == []
    assert time.monotonic() - t0 >= 1.0
    timer = threading.Timer(0.5, lambda: queue_client.put(queue_name, "late"))
    timer.start()
    t0 = time.monotonic()
    got = client.get_many(queue_name, 5, wait_seconds=10)
    took = time.monotonic() - t0
    timer.join()
    assert [m.text for m in got] == ["late"] and took < 5, took
    client.ack(queue_name, got[0].pop_receipt)


def test_queues_are_created_listed_and_deleted(client, queue_name):
    info = client.create_queue(queue_name, visibility_timeout=7, max_delivery_count=2)
    assert (info.visibility_timeout, info.max_delivery_count) == (7.0, 2)
    assert client.create_queue(queue_name, exist_ok=True).queue_id == info.queue_id
    with pytest.raises(QueueExistsError):
        client.create_queue(queue_name)
    assert queue_name in {q.name for q in client.list_queues()}
    assert client.get_queue(queue_name).queue_id == info.queue_id
    client.delete_queue(queue_name)
    with pytest.raises(QueueNotFoundError):
        client.get_queue(queue_name)


def test_errors_name_what_is_wrong(client, queue_name):
    with pytest.raises(QueueNotFoundError):
        client.put(queue_name, "x")
    client.create_queue(queue_name)
    with pytest.raises(ConfigError, match="max_messages"):
        client.get_many(queue_name, 0)
    with pytest.raises(ConfigError, match="put_many takes an iterable"):
        client.put_many(queue_name, "abc")
    with pytest.raises(InvalidReceiptError):
        client.ack(queue_name, "not-a-receipt")


def test_the_consume_loop_acks_what_finished_and_releases_what_was_in_hand(client, queue_name):
    client.create_queue(queue_name)
    ids = client.put_many(queue_name, [f"m{i}" for i in range(6)])
    seen = []
    with client.consume(queue_name, batch=4, wait=0.5) as loop:
        for msg in loop:
            if len(seen) == 2:
                break  # the third is in hand, the fourth waits in the batch
            seen.append(msg.id)
    s = client.stats(queue_name)
    assert (s["acked"], s["in_flight"]) == (2, 0), s
    rest = []
    with client.consume(queue_name, batch=10, wait=0.5, stop_when_empty=True) as loop:
        rest = [(m.id, m.delivery_count) for m in loop]
    assert sorted(seen + [i for i, _ in rest]) == ids
    counts = dict(rest)
    assert sorted(counts.values()) == [1, 1, 1, 2], counts  # the one in hand was delivered
    assert client.stats(queue_name)["acked"] == 6


def test_the_consume_loop_keeps_a_message_past_its_visibility_timeout(client, queue_name):
    """The heartbeat renews the message in hand, the rest of its batch and the finished one
    whose ack waits to be batched, while the second body runs 1.5 s under a 1 s visibility
    timeout: another consumer then gets nothing, each is delivered once, all are acked."""
    client.create_queue(queue_name, visibility_timeout=1)
    ids = client.put_many(queue_name, ["a", "b", "c"])
    seen = []
    with client.consume(queue_name, batch=3, wait=0.5, stop_when_empty=True) as loop:
        for msg in loop:
            seen.append((msg.id, msg.delivery_count))
            if len(seen) == 2:
                time.sleep(1.5)
                # Another consumer meanwhile: every message is still hidden.
                assert client.get_many(queue_name, 10) == []
    assert sorted(seen) == [(i, 1) for i in ids], seen
    s = client.stats(queue_name)
    assert (s["acked"], s["in_flight"], s["backlog"]) == (3, 0, 0)


def test_a_2_second_long_poll_leaves_the_event_loop_free(async_client, queue_name, loop_thread):
    """Another coroutine ticks every 10 ms during a 2 s long poll on an empty queue."""

    async def scenario() -> tuple[list[float], float]:
        await async_client.create_queue(queue_name)
        ticks: list[float] = []

        async def tick() -> None:
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        t0 = time.monotonic()
        got = await async_client.get_many(queue_name, 10, wait_seconds=2.0)
        took = time.monotonic() - t0
        ticker.cancel()
        assert got == []
        return ticks, took

    ticks, took = loop_thread.run(scenario())
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    # Time the ticker was kept from running beyond its own 10 ms: a poll that blocked the loop
    # would keep it out for about the whole 2 s (its pauses are 0.05 s doubling to 0.5 s).
    blocked = sum(g - 0.01 for g in gaps if g > 0.1)
    assert took >= 2.0
    assert len(ticks) >= 50, len(ticks)
    assert blocked < 1.0, f"the loop was blocked for {blocked:.2f} s of {took:.2f} s"


def test_fifty_concurrent_calls_start_no_thread(
    async_client, queue_client, queue_name, loop_thread
):
    """Round trips ride the driver's asynchronous execution: 50 concurrent get_many+ack_many
    on one loop leave the process's thread count as it was (warmed up first: the first
    preparation of a statement runs on a worker thread)."""
    queue_client.create_queue(queue_name)
    queue_client.put_many(queue_name, [f"m{i}" for i in range(300)])

    async def one() -> int:
        got = await async_client.get_many(queue_name, 3)
        if got:
            await async_client.ack_many(queue_name, [m.pop_receipt for m in got])
        return len(got)

    async def scenario() -> tuple[int, int, int]:
        await one()  # warm-up: statements prepared
        before = threading.active_count()
        peak = before

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, threading.active_count())
                await asyncio.sleep(0.005)

        watcher = asyncio.create_task(watch())
        counts = await asyncio.gather(*(one() for _ in range(50)))
        watcher.cancel()
        return before, peak, sum(counts)

    before, peak, n = loop_thread.run(scenario())
    assert n > 50
    assert peak == before, (before, peak)


def test_both_clients_offer_the_same_methods_with_the_same_parameters():
    import inspect

    for name, fn in inspect.getmembers(QueueClient, inspect.isfunction):
        if name.startswith("_") or name in ("close", "sibling"):
            continue
        twin = getattr(AsyncQueueClient, name, None)
        assert twin is not None, f"AsyncQueueClient has no {name}"
        ps = list(inspect.signature(fn).parameters)
        assert list(inspect.signature(twin).parameters) == ps, name
