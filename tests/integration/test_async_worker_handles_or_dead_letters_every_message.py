"""The asyncio worker (``await AsyncQueueClient.worker(...)``) against the real Cassandra,
counted: every message acked or dead-lettered whatever its coroutine handler does (crashes
always or once, hangs past the visibility timeout under the heartbeat); ``stop()`` cancels the
handlers still running after the grace and makes their messages visible again at once."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from cassieq_spark import AsyncQueueClient
from cassieq_spark.async_worker import AsyncWorker
from cassieq_spark.engine.consume.consumer import HEADER_ORIGIN_ID
from cassieq_spark.worker import Backoff, WorkerMetrics

pytestmark = [pytest.mark.integration]


class Events(WorkerMetrics):
    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def on_ack(self, message, seconds):
        self.seen.append(("ack", message.id))

    def on_failure(self, message, error, retry_in):
        self.seen.append(("failure", message.id))

    def on_dead_letter(self, message, error):
        self.seen.append(("dead", message.id))

    def on_stale(self, message):
        self.seen.append(("stale", message.id))

    def on_release(self, message):
        self.seen.append(("release", message.id))


def test_every_message_is_acked_or_dead_lettered_by_the_async_worker(
    queue_client, queue_name, cassieq_options
):
    dlq = queue_name + "_dlq"
    queue_client.create_queue(dlq)
    queue_client.create_queue(
        queue_name, visibility_timeout=2, max_delivery_count=3, dead_letter_queue=dlq
    )
    payloads = [f"ok:{i}" for i in range(30)] + [f"crash:{i}" for i in range(3)]
    payloads += [f"flaky:{i}" for i in range(3)] + ["hang:0", "hang:1"]
    ids = dict(zip(queue_client.put_many(queue_name, payloads), payloads, strict=True))
    starts: collections.Counter = collections.Counter()
    events = Events()

    async def handler(m) -> None:
        starts[m.id] += 1
        kind = m.text.split(":")[0]
        if kind == "crash" or (kind == "flaky" and m.delivery_count == 1):
            raise RuntimeError(m.text)
        if kind == "hang":
            await asyncio.sleep(3.0)  # past the 2 s visibility timeout

    async def scenario():
        async with await AsyncQueueClient.from_options(cassieq_options) as client:
            return await client.worker(
                queue_name,
                handler,
                concurrency=8,
                wait=1.0,
                backoff=Backoff(first=0.2, cap=1.0),
                metrics=events,
                stop_when_empty=True,
            )

    report = asyncio.run(asyncio.wait_for(scenario(), 120))
    dead: dict[int, str] = {}
    while got := queue_client.get_many(dlq, 100):
        dead.update((int(m.headers[HEADER_ORIGIN_ID]), m.text) for m in got)
        queue_client.ack_many(dlq, [m.pop_receipt for m in got])
    acks = collections.Counter(i for kind, i in events.seen if kind == "ack")
    crash = {i for i, p in ids.items() if p.startswith("crash")}
    assert set(acks) | set(dead) == set(ids) and not set(acks) & set(dead)
    assert max(acks.values()) == 1
    assert set(dead) == crash
    assert {i for kind, i in events.seen if kind == "dead"} == crash
    assert all(starts[i] == 1 for i, p in ids.items() if p.startswith("hang")), starts
    assert (report.acked, report.dead_lettered) == (len(ids) - len(crash), len(crash))
    s = queue_client.stats(queue_name)
    assert (s["backlog"], s["in_flight"], s["dead_lettered"]) == (0, 0, len(crash))


def test_stop_releases_the_messages_in_hand_long_before_their_visibility_timeout(
    queue_client, queue_name, cassieq_options
):
    vt = 20.0
    queue_client.create_queue(queue_name, visibility_timeout=vt)
    ids = queue_client.put_many(queue_name, ["a", "b"])
    started: list[int] = []
    cancelled: list[int] = []

    async def handler(m) -> None:
        started.append(m.id)
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(m.id)
            raise

    async def scenario() -> tuple[float, object]:
        async with await AsyncQueueClient.from_options(cassieq_options) as client:
            worker = AsyncWorker(
                client, queue_name, handler, concurrency=2, wait=1.0, shutdown_grace=0.5
            )
            run = asyncio.create_task(worker.run())
            while len(started) < 2:
                await asyncio.sleep(0.05)
            t0 = time.monotonic()
            worker.stop()
            report = await asyncio.wait_for(run, 10)
            got = []
            while len(got) < 2 and time.monotonic() - t0 < vt:
                got += await client.get_many(queue_name, 2, wait_seconds=1.0)
            assert sorted(m.id for m in got) == sorted(ids)
            return time.monotonic() - t0, report

    back, report = asyncio.run(scenario())
    assert back < vt / 4, f"redelivered {back:.1f} s after stop() (timeout {vt} s)"
    assert report.released == 2 and sorted(cancelled) == sorted(ids)
