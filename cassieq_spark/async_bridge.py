"""Runs the synchronous engine under asyncio, one suspendable call stack per operation.

Why this design: the engine's protocol (claims, timers, reservations, settling a lost
compare-and-set reply) is thousands of lines of careful synchronous code whose round trips all
pass through :class:`~cassieq_spark.engine.store.session.Connection`. A second, asynchronous
copy would drift from it; rewriting it as sans-IO steps would touch every module. Instead,
:func:`run` starts the engine call in a greenlet (a call stack that can be suspended and
resumed on the same thread). Whenever that code waits (a driver request, a pause such as a
long poll's, a rare blocking call), :mod:`cassieq_spark.engine.store.suspend` hands control
back here: the coroutine awaits an ``asyncio`` future that the driver's own callback completes
through ``loop.call_soon_threadsafe`` (or ``asyncio.sleep``), then resumes the call stack with
the reply. The request itself goes out on the driver's ``execute_async``: no thread per call,
and many operations in flight on one event-loop thread.

The few waits with no asynchronous form run on the loop's default executor (a worker thread),
never on the loop: the first preparation of each statement on a connection (the driver has no
asynchronous ``prepare``). Connecting, closing and ``bootstrap`` (schema changes and their
schema-agreement waits) run whole on a worker thread (:mod:`cassieq_spark.async_client`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from greenlet import getcurrent, greenlet

from .engine.store import suspend

T = TypeVar("T")

__all__ = ["run"]


class _Request:
    """What a suspended operation waits for, handed to the coroutine that runs it."""

    __slots__ = ("kind", "arg")

    def __init__(self, kind: str, arg: Any):
        self.kind = kind
        self.arg = arg


class _Suspender:
    """The :class:`~cassieq_spark.engine.store.suspend.Suspender` of every operation: each wait
    switches to the coroutine (the operation's parent greenlet) with a request."""

    @staticmethod
    def _ask(kind: str, arg: Any) -> Any:
        parent = getcurrent().parent
        assert parent is not None
        return parent.switch(_Request(kind, arg))

    def wait_future(self, future: Any) -> None:
        self._ask("future", future)

    def pause(self, seconds: float) -> None:
        self._ask("pause", seconds)

    def call_blocking(self, fn: Callable[[], T]) -> T:
        return self._ask("blocking", fn)


_SUSPENDER = _Suspender()


class _Operation(greenlet):
    """One engine call in progress under :func:`run`."""

    suspender = _SUSPENDER


def _lookup() -> suspend.Suspender | None:
    return getattr(getcurrent(), "suspender", None)


def _operation() -> _Operation | None:
    current = getcurrent()
    return current if isinstance(current, _Operation) else None


suspend.install(_lookup, _operation)


def _driver_done(loop: asyncio.AbstractEventLoop, future: Any) -> asyncio.Future[None]:
    """An asyncio future completed (from the driver's I/O thread) when ``future`` is."""
    done: asyncio.Future[None] = loop.create_future()

    def settle(_: Any = None) -> None:
        if not done.done():
            done.set_result(None)

    def callback(*_: Any) -> None:
        loop.call_soon_threadsafe(settle)

    # Called at once, on this thread, when the reply is already in.
    future.add_callbacks(callback, callback)
    return done


async def _perform(request: _Request) -> Any:
    loop = asyncio.get_running_loop()
    if request.kind == "future":
        await _driver_done(loop, request.arg)
        return None
    if request.kind == "pause":
        await asyncio.sleep(request.arg)
        return None
    return await loop.run_in_executor(None, request.arg)


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` (synchronous engine or client code), its waits awaited on the
    running loop. Cancelling the coroutine raises ``CancelledError`` inside ``fn`` at its
    current wait (a request already sent may still apply, as after a timeout)."""
    op = _Operation(lambda: fn(*args, **kwargs))
    value = op.switch()
    while not op.dead:
        if not isinstance(value, _Request):
            raise RuntimeError(f"an operation under async_bridge.run switched out with {value!r}")
        try:
            result = await _perform(value)
        except BaseException as exc:  # the operation decides what a failed wait means
            value = op.throw(exc)
        else:
            value = op.switch(result)
    return value
