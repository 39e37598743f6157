"""Checks for consume loops left without ``with`` or ``close()``: the client's releaser thread
settles what such a loop held (the message in hand visible again, the rest of the batch given
back). Used with the ``no_gc`` and ``own_client`` fixtures of ``support.fixtures``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from cassieq_spark import QueueClient

SETTLE_BOUND = 20.0  # seconds: a liveness bound, far above what settling takes


def eventually(check: Callable[[], bool], what: str) -> None:
    """Polls ``check`` until it holds; fails with ``what`` after :data:`SETTLE_BOUND` seconds."""
    deadline = time.monotonic() + SETTLE_BOUND
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def visible(observer: QueueClient, queue: str, n: int) -> Callable[[], bool]:
    """A check that ``observer`` sees exactly ``n`` visible messages on ``queue`` (up to 100)."""
    return lambda: len(observer.peek(queue, 100)) == n


def release_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that call ``QueueClient.change_visibility_many`` (how a loop's
    messages are given back) from now on to the end of the test, in call order."""
    names: list[str] = []
    release = QueueClient.change_visibility_many

    def recorded(self, *args, **kwargs):
        names.append(threading.current_thread().name)
        return release(self, *args, **kwargs)

    monkeypatch.setattr(QueueClient, "change_visibility_many", recorded)
    return names
