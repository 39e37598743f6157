"""``for msg in client.consume(queue)``: receiving in a loop, with acks and a heartbeat.

The loop long-polls ``get_many`` for up to ``batch`` messages and hands them out one by one.
Invariants:

- A message is acked when the loop is asked for the next one: the body that handled it
  finished. With the heartbeat, finished messages stay renewed until their acks go out
  together (``ack_many``) before the next receive, or once the oldest has waited a third of
  the visibility timeout; without it each is acked at once (its receipt could expire).
- Leaving the loop any other way (``break``, an exception in the body, ``close()``, the
  ``with`` block ending, the loop object dropped) acks nothing more than what finished: the
  message in hand is released (``change_visibility(receipt, 0)``: visible again at once, its
  delivery counted, so a message that keeps failing reaches its queue's dead-letter limit),
  and the rest of the batch, never handed out, is given back (visible at once, its delivery
  not counted).
- ``close()`` and the ``with`` block settle the loop on the caller's thread. A loop left
  without them (``break``, an exception, garbage collection) is settled as soon as its object
  is dropped, by the client's releaser thread (:class:`Releaser`): the loop's finalizer only
  hands the work over, so no engine call ever runs inside a finalizer, on whatever thread the
  collection happened (a driver's event-loop thread included, which alone could read the
  reply). The loop object holds no reference cycle, so ``break`` or an exception drops it at
  once, not at the next garbage collection.
- With ``heartbeat=True`` (the default) every received message stays hidden while it waits in
  the batch or is in hand (:mod:`cassieq_spark.heartbeat`); the loop owns the receipts then, so
  the body must not ack or change the visibility of the message itself (a receipt the loop
  finds stale is logged).

``stop_when_empty=True`` ends the loop when a receive (after its long poll) comes back empty.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue as queue_mod
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

from . import validate
from .engine.core.messages import Message
from .errors import ConfigError
from .heartbeat import AsyncHeartbeat, Heartbeat

if TYPE_CHECKING:
    from .async_client import AsyncQueueClient
    from .client import QueueClient
    from .engine.consume.batch_ack import ReceiptResult

log = logging.getLogger(__name__)

__all__ = ["AsyncConsumeLoop", "ConsumeLoop", "Releaser"]

# How long closing a client waits for its releaser to settle the loops handed to it.
RELEASER_CLOSE_SECONDS = 10.0
# How long the releaser waits for an abandoned async loop's heartbeat task to stop on its
# event loop before it settles the loop's messages anyway.
ASYNC_HEARTBEAT_STOP_SECONDS = 5.0


class Releaser:
    """A daemon thread of one client's own that settles the consume loops left without
    ``close()``. :meth:`submit` only queues the work (``SimpleQueue.put``, safe inside a
    finalizer and reentrant), so a finalizer never blocks and never calls the engine; the
    thread runs each job with a client of its own on the same connection."""

    def __init__(self, client: QueueClient):
        self._client = client.sibling()  # no reference back to the owner: no cycle
        self._jobs: queue_mod.SimpleQueue[Callable[[QueueClient], None] | None] = (
            queue_mod.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name="cassieq-releaser", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[QueueClient], None]) -> None:
        self._jobs.put(job)

    def close(self, timeout: float = RELEASER_CLOSE_SECONDS) -> None:
        """Settle what was handed over so far (waiting at most ``timeout``), then stop."""
        self._jobs.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job(self._client)
            except Exception:  # the messages come back when their visibility timeout ends
                log.warning("settling an abandoned consume loop failed", exc_info=True)


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{what} must be True or False, got {value!r}")
    return value


def _loop_arguments(
    batch: object, wait: object, visibility_timeout: object, heartbeat: object, stop: object
) -> tuple[int, float, float | None, bool, bool]:
    """``consume``'s arguments, checked before anything starts (no thread, no receive)."""
    return (
        validate.max_messages(batch, "batch"),
        validate.wait_seconds(validate.number(wait, "wait"), "wait"),
        None
        if visibility_timeout is None
        else validate.visibility_seconds(validate.number(visibility_timeout, "visibility_timeout")),
        _flag(heartbeat, "heartbeat"),
        _flag(stop, "stop_when_empty"),
    )


def _warn_stale(queue: str, results: list[ReceiptResult], what: str) -> None:
    for r in results:
        if not r.ok:
            log.warning(
                "consume loop on queue %r: %s of a message came back %s: its receipt was used "
                "by someone else (the body must not ack or change the visibility of a message "
                "of the loop) or its visibility timeout ended",
                queue,
                what,
                r.status,
            )


class _State:
    """Everything a :class:`ConsumeLoop` holds, with no reference to the loop object, so that
    its finalizer can hand this to the :class:`Releaser`."""

    def __init__(self, queue: str, batch: int, wait: float, vt: float, heartbeat: bool, stop: bool):
        self.queue, self.batch, self.wait, self.vt = queue, batch, wait, vt
        self.heartbeat, self.stop_when_empty = heartbeat, stop
        self.hb: Heartbeat | None = None
        self.pending: list[Message] = []
        self.done: list[Message] = []  # finished, still renewed by the heartbeat until acked
        self.first_done = 0.0
        self.current: Message | None = None
        self.settled = False

    def _receipt(self, m: Message) -> str | None:
        return self.hb.drop(m) if self.hb is not None else m.pop_receipt

    def _flush(self, c: QueueClient) -> None:
        if self.done:
            receipts = [self._receipt(m) for m in self.done]
            self.done.clear()
            taken = [r for r in receipts if r is not None]
            if taken:
                _warn_stale(self.queue, c.ack_many(self.queue, taken), "the ack")

    def next(self, c: QueueClient) -> Message:
        if self.settled:
            raise StopIteration
        try:
            if self.current is not None:  # the body finished with it
                if not self.done:
                    self.first_done = time.monotonic()
                self.done.append(self.current)
                self.current = None
                if self.hb is None or time.monotonic() - self.first_done > self.vt / 3:
                    self._flush(c)
            while not self.pending:
                self._flush(c)
                if self.heartbeat and self.hb is None:
                    self.hb = Heartbeat(c, self.queue, self.vt)
                got = c.get_many(self.queue, self.batch, self.vt, self.wait)
                if got:
                    if self.hb is not None:
                        self.hb.hold(got)
                    self.pending = got
                elif self.stop_when_empty:
                    raise StopIteration
            self.current = self.pending.pop(0)
            return self.current
        except BaseException:
            self.settle(c)
            raise

    def settle(self, c: QueueClient) -> None:
        """Ack what finished, release the message in hand, give back the rest; once."""
        if self.settled:
            return
        self.settled = True
        try:
            self._flush(c)
            if self.current is not None:
                receipt = self._receipt(self.current)
                self.current = None
                if receipt is not None:
                    c.change_visibility_many(self.queue, [(receipt, 0.0)])
            if self.pending:
                for m in self.pending:
                    m.pop_receipt = self._receipt(m)
                back = [m for m in self.pending if m.pop_receipt is not None]
                self.pending = []
                if back:
                    c.give_back(self.queue, back)
        finally:
            if self.hb is not None:
                self.hb.close()


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
        b, w, vt, hb, stop = _loop_arguments(
            batch, wait, visibility_timeout, heartbeat, stop_when_empty
        )
        self.client = client
        self.queue = queue
        self.batch, self.wait, self.heartbeat, self.stop_when_empty = b, w, hb, stop
        self.visibility_timeout = client.get_queue(queue).visibility_timeout if vt is None else vt
        # The loop's receives, acks and releases go through a client of its own on the same
        # connection: what a client remembers of the deliveries it holds is kept per client, so
        # the caller's client never waits out a delivery that this loop's releaser gave back.
        self._receiver = client.sibling()
        self._state = _State(queue, b, w, self.visibility_timeout, hb, stop)
        self._finalizer = weakref.finalize(self, client.releaser().submit, self._state.settle)
        self._finalizer.atexit = False  # at exit the releaser thread may be gone already

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        try:
            return self._state.next(self._receiver)
        finally:
            if self._state.settled:
                self._finalizer.detach()

    def close(self) -> None:
        """Stop: acks what finished, releases the message in hand, gives back the rest."""
        self._finalizer.detach()
        self._state.settle(self._receiver)

    def __enter__(self) -> ConsumeLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _AsyncState:
    """:class:`_State` for an :class:`AsyncConsumeLoop`, also settled by the releaser thread
    with the synchronous client when the loop object is dropped unsettled."""

    def __init__(
        self, queue: str, batch: int, wait: float, vt: float | None, heartbeat: bool, stop: bool
    ):
        self.queue, self.batch, self.wait, self.vt = queue, batch, wait, vt
        self.heartbeat, self.stop_when_empty = heartbeat, stop
        self.hb: AsyncHeartbeat | None = None
        self.event_loop: asyncio.AbstractEventLoop | None = None
        self.pending: list[Message] = []
        self.done: list[Message] = []
        self.first_done = 0.0
        self.current: Message | None = None
        self.settled = False

    async def _receipt(self, m: Message) -> str | None:
        return await self.hb.drop(m) if self.hb is not None else m.pop_receipt

    async def _flush(self, c: AsyncQueueClient) -> None:
        if self.done:
            receipts = [await self._receipt(m) for m in self.done]
            self.done.clear()
            taken = [r for r in receipts if r is not None]
            if taken:
                _warn_stale(self.queue, await c.ack_many(self.queue, taken), "the ack")

    async def next(self, c: AsyncQueueClient) -> Message:
        if self.settled:
            raise StopAsyncIteration
        try:
            if self.vt is None:
                self.vt = (await c.get_queue(self.queue)).visibility_timeout
            if self.current is not None:
                if not self.done:
                    self.first_done = time.monotonic()
                self.done.append(self.current)
                self.current = None
                if self.hb is None or time.monotonic() - self.first_done > self.vt / 3:
                    await self._flush(c)
            while not self.pending:
                await self._flush(c)
                if self.heartbeat and self.hb is None:
                    self.event_loop = asyncio.get_running_loop()
                    self.hb = AsyncHeartbeat(c, self.queue, self.vt)
                got = await c.get_many(self.queue, self.batch, self.vt, self.wait)
                if got:
                    if self.hb is not None:
                        self.hb.hold(got)
                    self.pending = got
                elif self.stop_when_empty:
                    raise StopAsyncIteration
            self.current = self.pending.pop(0)
            return self.current
        except GeneratorExit:  # closed unfinished (a task destroyed): no await is allowed now;
            raise  # the loop's finalizer hands the settling to the releaser
        except BaseException:
            await self.settle(c)
            raise

    async def settle(self, c: AsyncQueueClient) -> None:
        if self.settled:
            return
        self.settled = True
        try:
            await self._flush(c)
            if self.current is not None:
                receipt = await self._receipt(self.current)
                self.current = None
                if receipt is not None:
                    await c.change_visibility_many(self.queue, [(receipt, 0.0)])
            if self.pending:
                for m in self.pending:
                    m.pop_receipt = await self._receipt(m)
                back = [m for m in self.pending if m.pop_receipt is not None]
                self.pending = []
                if back:
                    await c.give_back(self.queue, back)
        finally:
            if self.hb is not None:
                await self.hb.close()

    def settle_abandoned(self, c: QueueClient) -> None:
        """:meth:`settle` on the releaser thread, with the synchronous client: the heartbeat
        task is stopped on its own event loop first (so no renewal races the release), then the
        messages are settled with receipts no renewal can change any more."""
        if self.settled:
            return
        self.settled = True
        hb = self.hb
        if hb is not None and self.event_loop is not None:
            try:
                asyncio.run_coroutine_threadsafe(hb.close(), self.event_loop).result(
                    ASYNC_HEARTBEAT_STOP_SECONDS
                )
            except RuntimeError:  # the event loop is closed: its tasks were cancelled with it
                pass
            except concurrent.futures.TimeoutError:
                log.warning(
                    "consume loop on queue %r: its heartbeat did not stop within %g s (the event "
                    "loop is busy); settling its messages anyway",
                    self.queue,
                    ASYNC_HEARTBEAT_STOP_SECONDS,
                )

        def receipt(m: Message) -> str | None:
            return hb.take(m) if hb is not None else m.pop_receipt

        taken = [r for r in map(receipt, self.done) if r is not None]
        self.done.clear()
        if taken:
            _warn_stale(self.queue, c.ack_many(self.queue, taken), "the ack")
        if self.current is not None:
            r = receipt(self.current)
            self.current = None
            if r is not None:
                c.change_visibility_many(self.queue, [(r, 0.0)])
        for m in self.pending:
            m.pop_receipt = receipt(m)
        back = [m for m in self.pending if m.pop_receipt is not None]
        self.pending = []
        if back:
            c.give_back(self.queue, back)


class AsyncConsumeLoop:
    """``async for msg in client.consume(queue)`` on an
    :class:`~cassieq_spark.async_client.AsyncQueueClient`: the same invariants as
    :class:`ConsumeLoop` (see the module); ``await loop.aclose()`` or ``async with`` to stop.
    A loop dropped unsettled is settled by the synchronous client's releaser thread."""

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
        b, w, vt, hb, stop = _loop_arguments(
            batch, wait, visibility_timeout, heartbeat, stop_when_empty
        )
        self.client = client
        self.queue = queue
        self.batch, self.wait, self.visibility_timeout = b, w, vt
        self.heartbeat, self.stop_when_empty = hb, stop
        self._receiver = type(client)(client.sync.sibling())  # as ConsumeLoop's
        self._state = _AsyncState(queue, b, w, vt, hb, stop)
        self._finalizer = weakref.finalize(
            self, client.releaser().submit, self._state.settle_abandoned
        )
        self._finalizer.atexit = False

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self._state.next(self._receiver)
        finally:
            if self._state.settled:
                self._finalizer.detach()

    async def aclose(self) -> None:
        self._finalizer.detach()
        await self._state.settle(self._receiver)

    async def __aenter__(self) -> AsyncConsumeLoop:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
