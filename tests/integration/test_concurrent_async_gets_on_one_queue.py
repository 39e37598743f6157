"""Fifty asyncio gets at once on one queue, on one event loop, against the real Cassandra,
counted: every message delivered once and acked once, and every message given back (its
visibility set to a short delay) delivered exactly once more, through the timer path.

A get sends reads and a timer ahead of the pointers' read (``Reader.read_ahead``,
``TimerPath.read_ahead``) and keeps what it sent in per-call state (``suspend.CallLocal``):
under the asyncio client these gets all run on one thread, racing for the same rows."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from cassieq_spark import AsyncQueueClient

pytestmark = [pytest.mark.integration]

CALLS = 50
MESSAGES = 100
GIVE_BACK_EVERY = 5  # every 5th message is given back once, due again 0.5 s later
VISIBILITY = 120.0  # far beyond the run: no redelivery but the ones given back


def test_fifty_concurrent_async_gets_deliver_each_message_as_often_as_it_was_given_back(
    queue_client, queue_name, cassieq_options
):
    queue_client.create_queue(queue_name)
    ids = queue_client.put_many(queue_name, [f"m{i}" for i in range(MESSAGES)])
    give_back = {mid for k, mid in enumerate(ids) if k % GIVE_BACK_EVERY == 0}
    deliveries: collections.Counter[int] = collections.Counter()
    acked: collections.Counter[int] = collections.Counter()
    refused: list[int] = []

    async def consumer(client: AsyncQueueClient, deadline: float) -> None:
        while len(acked) < MESSAGES and time.monotonic() < deadline:
            m = await client.get(queue_name, visibility_timeout=VISIBILITY)
            if m is None:
                await asyncio.sleep(0.05)
                continue
            deliveries[m.id] += 1
            if m.id in give_back and m.delivery_count == 1:
                await client.change_visibility(queue_name, m.pop_receipt, 0.5)
            elif await client.ack(queue_name, m.pop_receipt):
                acked[m.id] += 1
            else:
                refused.append(m.id)

    async def scenario() -> None:
        async with await AsyncQueueClient.from_options(cassieq_options) as client:
            deadline = time.monotonic() + 90
            await asyncio.gather(*(consumer(client, deadline) for _ in range(CALLS)))

    asyncio.run(scenario())

    missing = sorted(set(ids) - set(acked))
    assert not missing, f"{len(missing)} of {MESSAGES} never acked: {missing[:10]}"
    assert not refused, f"acks refused for ids {refused[:10]}"
    assert set(acked) == set(ids) and max(acked.values()) == 1
    wrong = {mid: n for mid, n in deliveries.items() if n != (2 if mid in give_back else 1)}
    assert not wrong, (
        f"ids delivered a wrong number of times (id: times): {dict(list(wrong.items())[:10])}"
    )
    assert queue_client.stats(queue_name)["backlog"] == 0
