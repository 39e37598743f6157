"""How engine code waits: for a round trip to Cassandra, for a pause, for a blocking call.

The engine is written as plain synchronous code (one call stack per operation, every round
trip through :class:`~cassieq_spark.engine.store.session.Connection`). Outside asyncio, waiting
blocks the calling thread, as it always did. An asyncio caller
(:mod:`cassieq_spark.async_bridge`) runs the same engine code as a suspendable call stack and
installs a :class:`Suspender` lookup here: each wait then hands control back to the event loop
until the driver's future completes (or the pause ends), so one event-loop thread drives many
operations at once with no thread per call and no second copy of the protocol.

Invariant: engine code never holds a ``threading`` lock across a wait (two suspended operations
share one thread, so the second would deadlock on the first's lock). For the same reason, state
that belongs to one call is kept in a :class:`CallLocal`, never in a ``threading.local``: under
a runner, every operation on the loop's thread would share the latter.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Suspender(Protocol):
    """What an asynchronous runner offers to engine code running under it."""

    def wait_future(self, future: Any) -> None:
        """Return once the driver ``ResponseFuture`` has its result (or error)."""

    def pause(self, seconds: float) -> None:
        """Return after ``seconds``, letting other operations run meanwhile."""

    def call_blocking(self, fn: Callable[[], T]) -> T:
        """``fn()`` on a worker thread (a rare call that has no asynchronous form)."""


_lookup: Callable[[], Suspender | None] = lambda: None  # noqa: E731
_operation: Callable[[], object | None] = lambda: None  # noqa: E731


def install(lookup: Callable[[], Suspender | None], operation: Callable[[], object | None]) -> None:
    """Set how the current operation's suspender is found (None: block the thread), and the
    operation itself (an object that lives as long as the operation and can be weakly
    referenced; None outside one): what a :class:`CallLocal` keys its state by."""
    global _lookup, _operation
    _lookup, _operation = lookup, operation


class CallLocal:
    """One dict per call in progress: per operation under an asynchronous runner (many share
    the event loop's thread), per thread otherwise (a thread runs one call at a time).

    Invariant: what one call stores is never seen by another call running at the same time, so
    a call that sends statements ahead (``Reader.read_ahead``) only ever uses its own replies.
    An operation's dict goes away with the operation."""

    def __init__(self) -> None:
        self._threads = threading.local()
        self._operations: weakref.WeakKeyDictionary[Any, dict] = weakref.WeakKeyDictionary()

    def get(self) -> dict:
        """The current call's dict (made empty on first use)."""
        op = _operation()
        if op is None:
            state = getattr(self._threads, "state", None)
            if state is None:
                state = self._threads.state = {}
            return state
        state = self._operations.get(op)
        if state is None:
            state = self._operations[op] = {}
        return state


def current() -> Suspender | None:
    return _lookup()


def pause(seconds: float) -> None:
    """``time.sleep`` for engine code: under an asynchronous runner, the loop runs meanwhile."""
    s = _lookup()
    if s is None:
        time.sleep(seconds)
    else:
        s.pause(seconds)


def wait_future(future: Any) -> None:
    """Wait for a driver ``ResponseFuture`` without blocking an event loop; a no-op outside one
    (``result()`` then blocks as usual)."""
    s = _lookup()
    if s is not None:
        s.wait_future(future)


def call_blocking(fn: Callable[[], T]) -> T:
    """``fn()``; under an asynchronous runner, on a worker thread so the loop is not blocked."""
    s = _lookup()
    return fn() if s is None else s.call_blocking(fn)
