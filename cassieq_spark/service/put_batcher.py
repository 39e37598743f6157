"""Single puts to one queue that arrive together are written together.

Every put reserves its ids with a compare-and-set on the queue's ``monoton`` row. Puts from
many HTTP clients to one queue race for that row: each lost round costs a Paxos round and a
retry, so concurrent single puts go slower than one at a time. The batcher turns the puts that
arrive while a write to their queue is in flight into the next ``put_many``: one reservation
for all of them (the batching rules are :mod:`.batching`'s).

Invariants:

* A put is answered only after ``put_many`` returned, i.e. after its row is written and its
  reservation closed: 201 means what it means for a lone put.
* A lone put adds no wait: it is written at once. Batches form only from puts that arrive while
  the previous write of the same queue, delay and message group is in flight.
* Puts of one message group keep their arrival order: a batch is one ``put_many`` of the puts
  in the order they arrived, and the next batch of the key is written after it.
* A payload the queue refuses is refused before it joins a batch, so one bad message never
  fails the others. A batch that fails (Cassandra unavailable) fails every put in it, each
  caller gets the error and may retry: at least once, as for a lone put.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from .batching import Batcher

MAX_BATCH = 500  # messages in one put_many: one reservation, a few unlogged batches

WriteMany = Callable[[str, Sequence[bytes], float, str | None], Awaitable[list[int]]]


class PutBatcher(Batcher[tuple[str, float, str | None], bytes, int]):
    """One per service instance; ``put`` is called from request handlers on the event loop."""

    def __init__(self, write_many: WriteMany, max_batch: int = MAX_BATCH):
        async def call_many(
            key: tuple[str, float, str | None], payloads: Sequence[bytes]
        ) -> list[int]:
            return await write_many(key[0], payloads, key[1], key[2])

        super().__init__(call_many, max_batch)

    async def put(self, queue: str, payload: bytes, delay: float, group: str | None = None) -> int:
        """The new message's id, once it is written."""
        return await self.submit((queue, delay, group), payload)
