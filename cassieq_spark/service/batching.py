"""Calls that arrive together, made together: the shape the put and ack batchers share.

Requests of one key (a queue, a queue and delay) that arrive while a call for that key is in
flight wait and go out in the next call, all together: ``call_many(key, items)`` returns one
result per item, in order, and each caller gets its own.

Invariants:

* A caller is answered only after the call that carried its item returned.
* A lone request adds no wait: its call starts at once. Batches form only from requests that
  arrive while the previous call of the same key is in flight, so batching adds no latency
  beyond that call.
* A call that fails fails every request it carried, each with that error, as each would have
  failed alone; the next batch still goes out. A call that returns a wrong number of results
  fails each request it carried, and a runner cancelled mid-call cancels every request it
  carried or that was waiting for it: no request is left waiting for ever.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741
R = TypeVar("R")


class Batcher(Generic[K, I, R]):
    """One per service instance and kind of call; ``submit`` runs on the event loop."""

    def __init__(
        self, call_many: Callable[[K, Sequence[I]], Awaitable[Sequence[R]]], max_batch: int
    ):
        self._call_many = call_many
        self._max_batch = max_batch
        self._waiting: dict[K, list[tuple[I, asyncio.Future[R]]]] = {}
        self._callers: dict[K, asyncio.Task[None]] = {}
        self.batches = 0  # calls made (for tests and metrics)

    @property
    def idle(self) -> bool:
        """No request waiting and no call running (what a draining instance waits for)."""
        return not self._waiting and not self._callers

    async def submit(self, key: K, item: I) -> R:
        """``item``'s result, once the call that carried it returned."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key, []).append((item, done))
        if key not in self._callers:
            self._callers[key] = asyncio.create_task(self._run(key))
        return await done

    async def _run(self, key: K) -> None:
        batch: list[tuple[I, asyncio.Future[R]]] = []
        try:
            while waiting := self._waiting.get(key):
                batch, self._waiting[key] = waiting[: self._max_batch], waiting[self._max_batch :]
                self.batches += 1
                try:
                    results = list(await self._call_many(key, [item for item, _ in batch]))
                    if len(results) != len(batch):
                        raise RuntimeError(
                            f"{len(batch)} requests were carried and {len(results)} results came "
                            "back; each request is failed rather than given another's result"
                        )
                except Exception as exc:
                    for _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                for (_, done), result in zip(batch, results, strict=True):
                    if not done.done():
                        done.set_result(result)
        except BaseException:
            # Cancelled (a shutdown past its drain): no request it carried or that waits for
            # the next call may be left waiting for an answer that will never come.
            for _, done in [*batch, *self._waiting.pop(key, [])]:
                if not done.done():
                    done.cancel()
            raise
        finally:
            self._callers.pop(key, None)
            if not self._waiting.get(key):
                self._waiting.pop(key, None)
