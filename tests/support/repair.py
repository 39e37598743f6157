"""Late writes for repair to find: blocks a dead writer reserved and readers passed, messages
written into them afterwards, and the check that repair delivered each exactly once."""

from __future__ import annotations

import time
from collections import Counter

from cassieq_spark.engine.consume.consumer import HEADER_ORIGIN_ID
from cassieq_spark.engine.core import monoton, pointers
from cassieq_spark.engine.core.messages import write_messages

TIMEOUT = 1.0  # the test queues' repair timeout


def skip_blocks(client, queue, blocks: int, ids_per_block: int = 1):
    """Reserve blocks a dead writer never closes, then let a reader pass them: returns them."""
    conn = client.conn
    held = [monoton.reserve(conn, queue, ids_per_block) for _ in range(blocks)]
    marker = client.put(queue.name, b"marker")
    time.sleep(TIMEOUT + 0.3)
    msg = client.get(queue.name)
    assert msg is not None and msg.id == marker, "the reader should pass the abandoned blocks"
    assert client.ack(queue.name, msg.pop_receipt)
    assert pointers.read(conn, queue).reader > marker
    return held


def drain_republished(client, queue_name: str, limit: int = 10_000) -> list:
    got = []
    empty_since = None
    while len(got) < limit:
        msg = client.get(queue_name)
        if msg is None:
            # Republished copies may sit behind a young open block for a moment: poll a little.
            empty_since = empty_since or time.monotonic()
            if time.monotonic() - empty_since > 3 * TIMEOUT:
                break
            time.sleep(0.2)
            continue
        empty_since = None
        assert client.ack(queue_name, msg.pop_receipt)
        got.append(msg)
    return got


def late_writes(client, queue, n: int) -> dict[int, bytes]:
    """``n`` single-id reservations passed by readers, whose messages land afterwards."""
    held = skip_blocks(client, queue, n)
    payloads = {}
    for res in held:
        payloads[res.lo] = f"late-{res.lo}".encode()
        write_messages(client.conn, queue, res.lo, [payloads[res.lo]])
    time.sleep(TIMEOUT + 0.2)
    return payloads


def assert_each_once(client, queue, payloads: dict[int, bytes]) -> None:
    got = drain_republished(client, queue.name)
    origins = Counter(int(m.headers[HEADER_ORIGIN_ID]) for m in got)
    assert set(origins) == set(payloads), "every late message is delivered"
    dupes = {k: v for k, v in origins.items() if v > 1}
    assert not dupes, f"delivered more than once: {dupes}"
    assert sorted(m.payload for m in got) == sorted(payloads.values())
