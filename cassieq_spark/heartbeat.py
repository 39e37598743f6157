"""Keeping received messages hidden while they are worked on (a visibility heartbeat).

A :class:`Heartbeat` renews, every third of the visibility timeout, the visibility of every
message it holds (one ``change_visibility_many`` for all of them), and writes each new receipt
back into its :class:`~cassieq_spark.engine.core.messages.Message`. Invariant: a held message's
``pop_receipt`` is only read or changed under :attr:`Heartbeat.lock`, so an ack or a release
(:meth:`Heartbeat.drop` first, then the call with the receipt it returns) never races a renewal
that would make its receipt stale. Messages are held by identity, not id: one message
delivered again (its timeout ran out) is another delivery with its own receipt. A message whose renewal comes back ``stale`` (its timeout
ran out before the renewal, another consumer may have it) is dropped and reported by
:meth:`Heartbeat.lost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING

from .engine.core.messages import Message

if TYPE_CHECKING:
    from .async_client import AsyncQueueClient
    from .client import QueueClient

log = logging.getLogger(__name__)

RENEWALS_PER_TIMEOUT = 3


class Heartbeat:
    """A daemon thread renewing the visibility of the messages it holds (see the module)."""

    def __init__(self, client: QueueClient, queue: str, visibility_timeout: float):
        self.client = client.sibling()  # its own consumer caches: it runs on its own thread
        self.queue = queue
        self.visibility_timeout = visibility_timeout
        self.interval = max(0.05, visibility_timeout / RENEWALS_PER_TIMEOUT)
        self.lock = threading.Lock()
        self._held: dict[int, Message] = {}
        self._lost: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{queue}", daemon=True)
        self._thread.start()

    def hold(self, messages: list[Message]) -> None:
        with self.lock:
            for m in messages:
                self._held[id(m)] = m

    def drop(self, message: Message) -> str | None:
        """Stop renewing ``message``; its current receipt (None if its renewal found it stale:
        its visibility timeout had ended)."""
        with self.lock:
            self._held.pop(id(message), None)
            if id(message) in self._lost:
                self._lost.discard(id(message))
                return None
            return message.pop_receipt

    def lost(self, message: Message) -> bool:
        with self.lock:
            return id(message) in self._lost

    def held(self) -> list[Message]:
        with self.lock:
            return list(self._held.values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 30)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.renew()
            except Exception:  # a failed round: the next one tries again, within the timeout
                log.warning("visibility heartbeat on queue %r failed", self.queue, exc_info=True)

    def renew(self) -> None:
        """One renewal of every held message (also called by tests)."""
        with self.lock:
            held = list(self._held.values())
            if not held:
                return
            entries = [(m.pop_receipt or "", self.visibility_timeout) for m in held]
            results = self.client.change_visibility_many(self.queue, entries)
            for m, r in zip(held, results, strict=True):
                if r.ok and r.new_receipt:
                    m.pop_receipt = r.new_receipt
                else:
                    log.warning(
                        "message %d of queue %r: visibility renewal %s (its timeout ended "
                        "first); another consumer may receive it",
                        m.id,
                        self.queue,
                        r.status,
                    )
                    self._held.pop(id(m), None)
                    self._lost.add(id(m))


class AsyncHeartbeat:
    """:class:`Heartbeat` for an :class:`~cassieq_spark.async_client.AsyncQueueClient`: an
    asyncio task instead of a thread, the same invariant under an ``asyncio.Lock``."""

    def __init__(self, client: AsyncQueueClient, queue: str, visibility_timeout: float):
        self.client = client
        self.queue = queue
        self.visibility_timeout = visibility_timeout
        self.interval = max(0.05, visibility_timeout / RENEWALS_PER_TIMEOUT)
        self.lock = asyncio.Lock()
        self._held: dict[int, Message] = {}
        self._lost: set[int] = set()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def hold(self, messages: list[Message]) -> None:
        for m in messages:
            self._held[id(m)] = m

    async def drop(self, message: Message) -> str | None:
        async with self.lock:
            self._held.pop(id(message), None)
            if id(message) in self._lost:
                self._lost.discard(id(message))
                return None
            return message.pop_receipt

    def held(self) -> list[Message]:
        return list(self._held.values())

    def take(self, message: Message) -> str | None:
        """:meth:`drop` without the lock, for a heartbeat already closed (no renewal can run),
        from any thread."""
        self._held.pop(id(message), None)
        if id(message) in self._lost:
            self._lost.discard(id(message))
            return None
        return message.pop_receipt

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.renew()
            except Exception:  # a failed round: the next one tries again, within the timeout
                log.warning("visibility heartbeat on queue %r failed", self.queue, exc_info=True)

    async def renew(self) -> None:
        async with self.lock:
            held = list(self._held.values())
            if not held:
                return
            entries = [(m.pop_receipt or "", self.visibility_timeout) for m in held]
            results = await self.client.change_visibility_many(self.queue, entries)
            for m, r in zip(held, results, strict=True):
                if r.ok and r.new_receipt:
                    m.pop_receipt = r.new_receipt
                else:
                    log.warning(
                        "message %d of queue %r: visibility renewal %s (its timeout ended "
                        "first); another consumer may receive it",
                        m.id,
                        self.queue,
                        r.status,
                    )
                    self._held.pop(id(m), None)
                    self._lost.add(id(m))
