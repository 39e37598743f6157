"""Producer and consumer processes on one queue while its settings change (``update_queue``).

Consumers record every delivery (id, delivery count, when ``get_many`` returned) and leave
each message unacked at its first delivery, so every message comes back once its visibility
timeout ends. At the first delivery they also read the deadline it set (the row's
``invisible_until``): minus the time ``get_many`` returned, that is the visibility timeout the
delivery got (a little less), whatever the redelivery's own latency."""

from __future__ import annotations

import datetime as dt
import time

from cassieq_spark import QueueClient
from cassieq_spark import client as client_module


def produce(options: dict, queue: str, index: int, batches: int, pause: float) -> list[int]:
    ids: list[int] = []
    with QueueClient.from_options(options) as client:
        for b in range(batches):
            ids.extend(client.put_many(queue, [f"{index}:{b}:{i}" for i in range(5)]))
            time.sleep(pause)
    return ids


def consume(
    options: dict, queue: str, done_producing, cache_seconds: float, idle: float = 2.0
) -> list[tuple]:
    """Deliveries as (id, delivery_count, returned_at, acked, seconds hidden for: the first
    delivery's deadline minus ``returned_at``; None for later ones). ``cache_seconds``: how long this
    process keeps a queue's settings (the client's ``QUEUE_CACHE_SECONDS``), shortened so the
    test need not wait out the default."""
    client_module.QUEUE_CACHE_SECONDS = cache_seconds
    records: list[tuple] = []
    idle_since = None
    with QueueClient.from_options(options) as client:
        while True:
            batch = client.get_many(queue, 10, wait_seconds=0.5)
            now = time.time()
            if not batch:
                if done_producing.is_set():
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > idle:
                        return records
                continue
            idle_since = None
            info = client.get_queue(queue)
            for m in batch:
                acked, hidden = False, None
                if m.delivery_count > 1:
                    acked = client.ack(queue, m.pop_receipt)
                else:
                    row = client.conn.execute(
                        "SELECT invisible_until FROM {ks}.messages "
                        "WHERE queue_id = ? AND bucket = ? AND id = ?",
                        (info.queue_id, m.id // info.bucket_size, m.id),
                    ).one()
                    deadline = row.invisible_until.replace(tzinfo=dt.timezone.utc).timestamp()
                    hidden = deadline - now
                records.append((m.id, m.delivery_count, now, acked, hidden))
