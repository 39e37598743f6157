"""Single v1 gets of one queue that arrive together are served by one ``get_many``.

A lone ``get`` claims its message with a compare-and-set on the first visible row. Concurrent
gets of one queue all see the same first rows and race for them: each lost race costs a Paxos
round and a retry, so concurrent single gets go slower than one at a time. The batcher turns
the gets of a queue (and visibility timeout) that arrive while a receive of it is in flight
into the next ``get_many(n)``, n the number of waiting requests: one conditional batch claims
the messages for all of them, and each waiter is handed one.

Invariants:

* A waiter is answered only after the ``get_many`` that served it returned: its message is
  claimed (in flight, hidden for the visibility timeout) as for a lone get, with the same
  receipt and delivery count.
* A lone get adds no wait: it is served at once. Batches form only from gets that arrive while
  the previous receive of the same queue and timeout is in flight.
* No message stays claimed for nobody. A waiter that is gone before the receive (its client
  disconnected, its request cancelled) is not counted in it; one that went while the receive
  ran does not get its message: that message, and any the receive returned beyond the waiters
  left, are given back at once (visible again, the delivery not counted). The client is looked
  at once more when its handler resumes with the message, right before the reply is written
  (the server drops a reply to a client already gone without a word), and a request cancelled
  between the hand-out and that moment gives its message back too. Only a client that leaves
  after its reply was written loses it on the way: at least once, the message is visible again
  when its visibility timeout ends.
* An empty receive answers every waiter of its batch with ``None`` (204) at once. A receive
  that returned some messages but fewer than waiters keeps the unserved ones, first in line,
  for the next receive: a get answers 204 only when a receive for it found nothing.
* A receive that fails (Cassandra unavailable, a streaming query holds the queue) fails every
  waiter of its batch with that error, as each would have failed alone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

MAX_BATCH = 100  # gets served by one get_many (the HTTP clients of one queue rarely exceed it)

M = TypeVar("M")
Gone = Callable[[], Awaitable[bool]]


@dataclass
class Waiter(Generic[M]):
    gone: Gone
    done: asyncio.Future[M | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )

    async def vanished(self) -> bool:
        """The request is no longer waiting: cancelled, answered, or its client left."""
        return self.done.done() or await self.client_left()

    async def client_left(self) -> bool:
        try:
            return await self.gone()
        except Exception:  # a broken connection is a gone client
            log.debug("disconnect check failed; treating the client as gone", exc_info=True)
            return True


class GetBatcher(Generic[M]):
    """One per service instance; ``get`` is called from request handlers on the event loop.

    ``read_many(queue, vt, n)`` claims up to ``n`` messages; ``give_back(queue, messages)``
    makes claimed messages visible again without counting the delivery.
    """

    def __init__(
        self,
        read_many: Callable[[str, float, int], Awaitable[Sequence[M]]],
        give_back: Callable[[str, Sequence[M]], Awaitable[object]],
        max_batch: int = MAX_BATCH,
    ):
        self._read_many = read_many
        self._give_back = give_back
        self._max_batch = max_batch
        self._waiting: dict[tuple[str, float], list[Waiter[M]]] = {}
        self._readers: dict[tuple[str, float], asyncio.Task[None]] = {}
        self.batches = 0  # get_many calls made (for tests and metrics)
        self.given_back = 0  # messages claimed for a waiter that was gone, given back
        self._returning: set[asyncio.Task[None]] = set()

    @property
    def idle(self) -> bool:
        """No get waiting, no receive and no give-back running (what a draining instance
        waits for)."""
        return not self._waiting and not self._readers and not self._returning

    async def get(self, queue: str, vt: float, gone: Gone) -> M | None:
        """The next message of ``queue``, claimed for ``vt`` seconds; None if none is visible.
        ``gone()`` says whether the caller's client has left (checked before and after the
        receive)."""
        key = (queue, vt)
        waiter: Waiter[M] = Waiter(gone)
        self._waiting.setdefault(key, []).append(waiter)
        if key not in self._readers:
            self._readers[key] = asyncio.create_task(self._read(key))
        try:
            m = await waiter.done
        except asyncio.CancelledError:
            # Cancelled after its message was handed over but before it resumed: no reply
            # will carry it.
            held = waiter.done
            if (
                held.done()
                and not held.cancelled()
                and held.exception() is None
                and (message := held.result()) is not None
            ):
                task = asyncio.create_task(self._return(queue, [message]))
                self._returning.add(task)
                task.add_done_callback(self._returning.discard)
            raise
        if m is not None and await waiter.client_left():
            await self._return(queue, [m])
            return None
        return m

    async def _read(self, key: tuple[str, float]) -> None:
        queue, vt = key
        try:
            while waiting := self._waiting.get(key):
                batch, self._waiting[key] = waiting[: self._max_batch], waiting[self._max_batch :]
                live = [w for w in batch if not await w.vanished()]
                for w in batch:
                    if w not in live and not w.done.done():
                        w.done.set_result(None)
                if not live:
                    continue
                self.batches += 1
                try:
                    messages = list(await self._read_many(queue, vt, len(live)))
                except Exception as exc:
                    for w in live:
                        if not w.done.done():
                            w.done.set_exception(exc)
                    continue
                unserved = await self._hand_out(queue, live, messages)
                if unserved and messages:
                    self._waiting[key] = unserved + self._waiting.get(key, [])
                else:
                    for w in unserved:
                        if not w.done.done():
                            w.done.set_result(None)
        finally:
            self._readers.pop(key, None)
            if not self._waiting.get(key):
                self._waiting.pop(key, None)

    async def _hand_out(self, queue: str, live: list[Waiter[M]], messages: list[M]) -> list:
        """One message to each waiter still there, in arrival order; the waiters left without
        one are returned; messages nobody took are given back."""
        spare = list(reversed(messages))
        unserved = []
        for w in live:
            if await w.vanished():
                if not w.done.done():
                    w.done.set_result(None)
            elif spare:
                w.done.set_result(spare.pop())
            else:
                unserved.append(w)
        if spare:
            spare.reverse()
            await self._return(queue, spare)
        return unserved

    async def _return(self, queue: str, messages: list[M]) -> None:
        """Give back messages claimed for clients that left; a failure is logged, not raised."""
        self.given_back += len(messages)
        try:
            await self._give_back(queue, messages)
        except Exception:
            # Not given back: visible again when the visibility timeout ends (at least
            # once, as for a reply lost on the way to its client).
            log.warning(
                "%d message(s) of %s claimed for clients that left could not be given "
                "back; they become visible when their visibility timeout ends",
                len(messages),
                queue,
                exc_info=True,
            )
