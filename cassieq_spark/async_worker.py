"""``await client.worker(queue, handler)`` on an :class:`~cassieq_spark.AsyncQueueClient`: the
worker of :mod:`cassieq_spark.worker` for coroutine handlers, as tasks of one event loop.

The same outcomes and invariants as the threaded worker (acked, released with backoff,
dead-lettered on the queue's last allowed delivery, released at shutdown, stale; at most
``concurrency`` handlers at once, receiving only for idle slots; acks of handlers that finish
together in one ``ack_many``), with :class:`~cassieq_spark.heartbeat.AsyncHeartbeat` keeping
messages hidden. At shutdown (``stop()``, or SIGTERM/SIGINT through the loop's signal handlers
when ``handle_signals`` and the loop supports them) handlers get ``shutdown_grace`` seconds;
those still running are cancelled (``CancelledError`` inside the handler) and their messages
made visible again at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .engine.core.messages import Message
from .errors import ConfigError, StaleReceiptError
from .heartbeat import AsyncHeartbeat
from .worker import (
    POLL_SLICE,
    Backoff,
    WorkerMetrics,
    WorkerOptions,
    WorkerReport,
    is_async_handler,
)

if TYPE_CHECKING:
    from .async_client import AsyncQueueClient

log = logging.getLogger(__name__)

__all__ = ["AsyncWorker"]


class AsyncWorker(WorkerOptions):
    """Runs ``await handler(message)`` for the messages of ``queue``, at most ``concurrency``
    at once (see the module)."""

    def __init__(
        self,
        client: AsyncQueueClient,
        queue: str,
        handler: Callable[[Message], Awaitable[object]],
        concurrency: int = 16,
        batch: int | None = None,
        wait: float = 20.0,
        visibility_timeout: float | None = None,
        heartbeat: bool = True,
        backoff: Backoff | None = None,
        metrics: WorkerMetrics | None = None,
        shutdown_grace: float = 10.0,
        handle_signals: bool = True,
        stop_when_empty: bool = False,
    ):
        super().__init__(
            queue,
            concurrency,
            batch,
            wait,
            visibility_timeout,
            heartbeat,
            backoff,
            metrics,
            shutdown_grace,
            handle_signals,
            stop_when_empty,
        )
        if not is_async_handler(handler):
            raise ConfigError(
                f"handler must be a coroutine function (async def) taking a Message, got "
                f"{handler!r}; for a plain function use Worker (QueueClient.worker), or wrap it: "
                "async def handler(m): await asyncio.to_thread(function, m)"
            )
        self.client = client
        self.handler = handler
        self._stop = asyncio.Event()
        self._tasks: dict[asyncio.Task[None], Message] = {}
        self._released: set[int] = set()  # id() of the deliveries released at shutdown
        self._acks: list[tuple[Message, str, float]] = []
        self._slot_free = asyncio.Event()
        self._hb: AsyncHeartbeat | None = None

    def stop(self) -> None:
        """Stop receiving; :meth:`run` then shuts down as on SIGTERM."""
        self._stop.set()

    async def run(self) -> WorkerReport:
        self.take_queue_settings(await self.client.get_queue(self.queue))
        restore = self._install_signals()
        vt = self.receive_visibility
        self._hb = AsyncHeartbeat(self.client, self.queue, vt) if self.heartbeat else None
        try:
            await self._receive()
        finally:
            try:
                await self._shut_down()
            finally:
                try:
                    if self._hb is not None:
                        await self._hb.close()
                finally:
                    restore()
        return self.report

    async def _receive(self) -> None:
        while not self._stop.is_set():
            while len(self._tasks) >= self.concurrency and not self._stop.is_set():
                self._slot_free.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._slot_free.wait(), 0.5)
            if self._stop.is_set():
                return
            free = self.concurrency - len(self._tasks)
            msgs = await self.client.get_many(
                self.queue,
                min(self.batch, free),
                self.receive_visibility,
                min(self.wait, POLL_SLICE),
            )
            if self._stop.is_set():
                if msgs:
                    await self.client.give_back(self.queue, msgs)
                return
            if not msgs:
                if self.may_stop_empty(bool(self._tasks)):
                    return
                continue
            if self._hb is not None:
                self._hb.hold(msgs)
            for m in msgs:
                task = asyncio.get_running_loop().create_task(self._handle(m))
                self._tasks[task] = m
                task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self._slot_free.set()
        if not task.cancelled() and task.exception() is not None:
            log.warning(
                "worker on queue %r: a delivery failed to settle (its visibility timeout "
                "redelivers it)",
                self.queue,
                exc_info=task.exception(),
            )

    async def _receipt(self, m: Message) -> str | None:
        if id(m) in self._released:
            return None
        return await self._hb.drop(m) if self._hb is not None else m.pop_receipt

    async def _handle(self, m: Message) -> None:
        started = time.monotonic()
        try:
            await self.handler(m)
        except asyncio.CancelledError:
            raise  # cancelled at shutdown: released there
        except Exception as exc:
            await self._failed(m, exc)
            return
        if id(m) in self._released:
            return
        receipt = await self._receipt(m)
        if receipt is None:
            self.metrics.on_stale(m)
            return
        self._acks.append((m, receipt, started))
        await self._flush_acks()

    async def _failed(self, m: Message, exc: Exception) -> None:
        if id(m) in self._released:
            return
        receipt = await self._receipt(m)
        if receipt is None:
            self.metrics.on_stale(m)
            return
        delay = self.failure_delay(m)
        try:
            await self.client.change_visibility(self.queue, receipt, delay or 0.0)
        except StaleReceiptError:
            self.metrics.on_stale(m)
            return
        self.metrics.failure_settled(m, exc, delay)

    async def _flush_acks(self) -> None:
        taken, self._acks = self._acks, []
        if not taken:
            return
        results = await self.client.ack_many(self.queue, [r for _, r, _ in taken])
        self.metrics.acks_settled(taken, results)

    async def _shut_down(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.shutdown_grace)
        left = dict(self._tasks)
        for m in left.values():
            self._released.add(id(m))
        entries = []
        for m in left.values():
            receipt = await self._hb.drop(m) if self._hb is not None else m.pop_receipt
            if receipt is not None:
                entries.append((m, receipt))
        if entries:
            results = await self.client.change_visibility_many(
                self.queue, [(r, 0.0) for _, r in entries]
            )
            self.metrics.releases_settled(entries, results)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(list(left), timeout=5)

    def _install_signals(self) -> Callable[[], None]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        installed = []
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(s, self._stop.set)
            except (NotImplementedError, RuntimeError):  # not on this loop or platform
                continue
            installed.append(s)

        def restore() -> None:
            for s in installed:
                loop.remove_signal_handler(s)

        return restore
