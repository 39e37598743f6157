"""Single puts to one queue that arrive together are written together.

Every put reserves its ids with a compare-and-set on the queue's ``monoton`` row. Puts from
many HTTP clients to one queue race for that row: each lost round costs a Paxos round and a
retry, so concurrent single puts go slower than one at a time. The batcher turns the puts that
arrive while a write to their queue is in flight into the next ``put_many``: one reservation
for all of them.

Invariants:

* A put is answered only after ``put_many`` returned, i.e. after its row is written and its
  reservation closed: 201 means what it means for a lone put.
* A lone put adds no wait: it is written at once. Batches form only from puts that arrive while
  the previous write of the same queue and delay is in flight, so the batching adds no latency
  beyond that write.
* A payload the queue refuses is refused before it joins a batch, so one bad message never
  fails the others. A batch that fails (Cassandra unavailable) fails every put in it, each
  caller gets the error and may retry: at least once, as for a lone put.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

log = logging.getLogger(__name__)

MAX_BATCH = 500  # messages in one put_many: one reservation, a few unlogged batches

WriteMany = Callable[[str, Sequence[bytes], float], Awaitable[list[int]]]


class PutBatcher:
    """One per service instance; ``put`` is called from request handlers on the event loop."""

    def __init__(self, write_many: WriteMany, max_batch: int = MAX_BATCH):
        self._write_many = write_many
        self._max_batch = max_batch
        self._waiting: dict[tuple[str, float], list[tuple[bytes, asyncio.Future[int]]]] = {}
        self._writers: dict[tuple[str, float], asyncio.Task[None]] = {}
        self.batches = 0  # put_many calls made (for tests and metrics)

    @property
    def idle(self) -> bool:
        """No put waiting and no write running (what a draining instance waits for)."""
        return not self._waiting and not self._writers

    async def put(self, queue: str, payload: bytes, delay: float) -> int:
        """The new message's id, once it is written."""
        key = (queue, delay)
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((payload, done))
        if key not in self._writers:
            self._writers[key] = asyncio.create_task(self._write(key))
        return await done

    async def _write(self, key: tuple[str, float]) -> None:
        queue, delay = key
        try:
            while waiting := self._waiting.get(key):
                batch, self._waiting[key] = waiting[: self._max_batch], waiting[self._max_batch :]
                self.batches += 1
                try:
                    ids = await self._write_many(queue, [p for p, _ in batch], delay)
                except Exception as exc:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                for (_, done), message_id in zip(batch, ids, strict=True):
                    if not done.done():
                        done.set_result(message_id)
        finally:
            self._writers.pop(key, None)
            if not self._waiting.get(key):
                self._waiting.pop(key, None)
