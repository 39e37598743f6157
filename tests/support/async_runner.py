"""The :class:`~cassieq_spark.AsyncQueueClient` behind a synchronous face, so one contract suite
runs against both clients: every coroutine method is run on an event loop that a background
thread keeps running (tasks such as the consume loop's heartbeat go on between calls)."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator
from typing import Any

from cassieq_spark import AsyncQueueClient


class LoopThread:
    """An event loop running on its own thread until :meth:`close`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Any, timeout: float = 120.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class SyncFacade:
    """``facade.put(...)`` runs ``await client.put(...)`` on the loop thread and returns its
    result; ``facade.consume(...)`` iterates the async consume loop."""

    def __init__(self, client: AsyncQueueClient, runner: LoopThread):
        self.client = client
        self.runner = runner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.client, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.runner.run(attr(*args, **kwargs))

        return call

    def consume(self, *args: Any, **kwargs: Any) -> _SyncLoop:
        return _SyncLoop(self.client.consume(*args, **kwargs), self.runner)


class _SyncLoop:
    def __init__(self, loop: Any, runner: LoopThread):
        self._loop = loop
        self._runner = runner

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        try:
            return self._runner.run(self._loop.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self._runner.run(self._loop.aclose())

    def __enter__(self) -> _SyncLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
