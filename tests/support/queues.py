"""Queue helpers for tests that consume through the client."""

from __future__ import annotations

import time
from collections import Counter


def drain(queue_client, queue: str, wait: float = 0.0) -> Counter:
    """Every message a client gets (and acks) until the queue has nothing visible, by payload.

    ``wait``: keep polling this long after the last message (repair copies, timers)."""
    seen: Counter = Counter()
    idle_since = time.monotonic()
    while True:
        m = queue_client.get(queue)
        if m is None:
            if time.monotonic() - idle_since >= wait:
                return seen
            time.sleep(0.1)
            continue
        seen[m.text] += 1
        assert queue_client.ack(queue, m.pop_receipt)
        idle_since = time.monotonic()


def drain_messages(queue_client, queue: str) -> list:
    """Every message a client gets (and acks) until the queue has nothing visible, in order."""
    out = []
    while (m := queue_client.get(queue)) is not None:
        out.append(m)
        assert queue_client.ack(queue, m.pop_receipt)
    return out


def connection_flags(options: dict[str, str]) -> list[str]:
    """The command-line flags of ``cassieq`` and ``jobs/repair.py`` for ``options``."""
    return [
        "--contact-points",
        options["contactPoints"],
        "--port",
        options["port"],
        "--keyspace",
        options["keyspace"],
    ]
