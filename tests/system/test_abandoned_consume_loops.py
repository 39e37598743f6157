"""A hundred consume loops left without ``with`` or ``close()`` on one client (by ``break``, by
an exception, dropped after a first message, one held in a reference cycle), the garbage
collector off: every release runs on the client's releaser thread, every message comes back,
no heartbeat thread is left, and the client stays usable. Against the shared node; a load
test of the releaser, kept out of ``make test`` for its time (the three-pass tests of
``tests/integration/test_consume_loop_left_without_close.py`` are the quick ones)."""

from __future__ import annotations

import gc
import threading

import pytest
from support.released_loops import eventually, release_threads, visible


def test_a_hundred_loops_left_without_close_on_one_client_release_everything(
    own_client, queue_client, queue_name, no_gc, monkeypatch
):
    """Left by ``break``, by an exception, or dropped after a first message, a third each;
    one loop also held in a reference cycle, released when a collection finds it: every
    release runs on the client's releaser thread, none in the thread that dropped the loop."""
    queue_client.create_queue(queue_name, visibility_timeout=30, max_delivery_count=1000)
    queue_client.put_many(queue_name, [f"m{i}".encode() for i in range(20)])
    settled_on = release_threads(monkeypatch)
    for i in range(100):
        kind = i % 3
        if kind == 0:
            for _ in own_client.consume(queue_name, batch=1, wait=5):
                break
        elif kind == 1:
            with pytest.raises(KeyError):
                for _ in own_client.consume(queue_name, batch=1, wait=5):
                    raise KeyError(i)
        else:
            loop = own_client.consume(queue_name, batch=1, wait=5)
            next(loop)
            del loop
    cycle: list[object] = [own_client.consume(queue_name, batch=1, wait=5)]
    next(cycle[0])  # type: ignore[call-overload]
    cycle.append(cycle)
    del cycle
    gc.collect()
    eventually(visible(queue_client, queue_name, 20), "not every message came back")
    assert queue_client.stats(queue_name)["in_flight"] == 0
    assert len(settled_on) == 101 and set(settled_on) == {"cassieq-releaser"}
    eventually(
        lambda: not any(t.name.startswith("heartbeat-") for t in threading.enumerate()),
        "a heartbeat thread was left running",
    )
    mid = own_client.put(queue_name, b"after")
    assert mid in {m.id for m in own_client.peek(queue_name, 100)}
