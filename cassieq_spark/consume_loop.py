"""``for msg in client.consume(queue)``: receiving in a loop, with acks and a heartbeat.

The loop long-polls ``get_many`` for up to ``batch`` messages and yields them one by one.
Invariants:

- A message is acked when the loop is asked for the next one: the body that handled it
  finished. With the heartbeat, finished messages stay renewed until their acks go out
  together (``ack_many``) before the next receive, or once the oldest has waited a third of
  the visibility timeout; without it each is acked at once (its receipt could expire).
- Leaving the loop any other way (``break``, an exception in the body, ``close()``, the
  ``with`` block ending) acks nothing more than what finished: the message in hand is released
  (``change_visibility(receipt, 0)``: visible again at once, its delivery counted, so a message
  that keeps failing reaches its queue's dead-letter limit), and the rest of the batch, never
  handed out, is given back (visible at once, its delivery not counted).
- With ``heartbeat=True`` (the default) every received message stays hidden while it waits in
  the batch or is in hand (:mod:`cassieq_spark.heartbeat`); the loop owns the receipts then, so
  the body must not ack or change the visibility of the message itself.

``stop_when_empty=True`` ends the loop when a receive (after its long poll) comes back empty.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import TYPE_CHECKING

from .engine.core.messages import Message
from .heartbeat import AsyncHeartbeat, Heartbeat

if TYPE_CHECKING:
    from .async_client import AsyncQueueClient
    from .client import QueueClient

__all__ = ["AsyncConsumeLoop", "ConsumeLoop"]


class ConsumeLoop:
    """The iterator returned by :meth:`QueueClient.consume` (see the module)."""

    def __init__(
        self,
        client: QueueClient,
        queue: str,
        batch: int = 10,
        wait: float = 20.0,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        stop_when_empty: bool = False,
    ):
        self.client = client
        self.queue = queue
        self.batch = batch
        self.wait = wait
        self.visibility_timeout = (
            client.get_queue(queue).visibility_timeout
            if visibility_timeout is None
            else float(visibility_timeout)
        )
        self.heartbeat = heartbeat
        self.stop_when_empty = stop_when_empty
        self._gen = self._loop()

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        return next(self._gen)

    def close(self) -> None:
        """Stop: acks what finished, releases the message in hand, gives back the rest."""
        self._gen.close()

    def __enter__(self) -> ConsumeLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _loop(self) -> Generator[Message, None, None]:
        c, q = self.client, self.queue
        hb = Heartbeat(c, q, self.visibility_timeout) if self.heartbeat else None
        pending: list[Message] = []
        done: list[Message] = []  # finished, still renewed by the heartbeat until acked
        first_done = 0.0
        current: Message | None = None

        def flush() -> None:
            if done:
                receipts = [hb.drop(m) if hb is not None else m.pop_receipt for m in done]
                done.clear()
                c.ack_many(q, [r for r in receipts if r is not None])

        try:
            while True:
                if not pending:
                    flush()
                    pending = c.get_many(q, self.batch, self.visibility_timeout, self.wait)
                    if not pending:
                        if self.stop_when_empty:
                            return
                        continue
                    if hb is not None:
                        hb.hold(pending)
                current = pending.pop(0)
                yield current
                if not done:
                    first_done = time.monotonic()
                done.append(current)
                current = None
                if hb is None or time.monotonic() - first_done > self.visibility_timeout / 3:
                    flush()
        finally:
            try:
                flush()
                if current is not None:
                    receipt = hb.drop(current) if hb is not None else current.pop_receipt
                    if receipt is not None:
                        c.change_visibility_many(q, [(receipt, 0.0)])
                if pending:
                    for m in pending:
                        if hb is not None:
                            m.pop_receipt = hb.drop(m)
                    c.give_back(q, [m for m in pending if m.pop_receipt is not None])
            finally:
                if hb is not None:
                    hb.close()


class AsyncConsumeLoop:
    """``async for msg in client.consume(queue)`` on an
    :class:`~cassieq_spark.async_client.AsyncQueueClient`: the same invariants as
    :class:`ConsumeLoop` (see the module); ``await loop.aclose()`` or ``async with`` to stop."""

    def __init__(
        self,
        client: AsyncQueueClient,
        queue: str,
        batch: int = 10,
        wait: float = 20.0,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        stop_when_empty: bool = False,
    ):
        self.client = client
        self.queue = queue
        self.batch = batch
        self.wait = wait
        self.visibility_timeout = visibility_timeout
        self.heartbeat = heartbeat
        self.stop_when_empty = stop_when_empty
        self._gen = self._loop()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        await self._gen.aclose()

    async def __aenter__(self) -> AsyncConsumeLoop:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _loop(self) -> AsyncGenerator[Message, None]:
        c, q = self.client, self.queue
        vt = self.visibility_timeout
        if vt is None:
            vt = (await c.get_queue(q)).visibility_timeout
        hb = AsyncHeartbeat(c, q, vt) if self.heartbeat else None
        pending: list[Message] = []
        done: list[Message] = []  # finished, still renewed by the heartbeat until acked
        first_done = 0.0
        current: Message | None = None

        async def flush() -> None:
            if done:
                receipts = [await hb.drop(m) if hb is not None else m.pop_receipt for m in done]
                done.clear()
                await c.ack_many(q, [r for r in receipts if r is not None])

        try:
            while True:
                if not pending:
                    await flush()
                    pending = await c.get_many(q, self.batch, vt, self.wait)
                    if not pending:
                        if self.stop_when_empty:
                            return
                        continue
                    if hb is not None:
                        hb.hold(pending)
                current = pending.pop(0)
                yield current
                if not done:
                    first_done = time.monotonic()
                done.append(current)
                current = None
                if hb is None or time.monotonic() - first_done > vt / 3:
                    await flush()
        finally:
            try:
                await flush()
                if current is not None:
                    receipt = await hb.drop(current) if hb is not None else current.pop_receipt
                    if receipt is not None:
                        await c.change_visibility_many(q, [(receipt, 0.0)])
                if pending:
                    for m in pending:
                        if hb is not None:
                            m.pop_receipt = await hb.drop(m)
                    await c.give_back(q, [m for m in pending if m.pop_receipt is not None])
            finally:
                if hb is not None:
                    await hb.close()
