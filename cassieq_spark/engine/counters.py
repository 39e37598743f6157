"""Per-queue totals kept in Cassandra counter columns (enqueued, acked, dead-lettered, ...).

Counter updates are not idempotent: a write that times out and is retried may count twice.
Each is done once per operation (per block for puts, per batch for the Spark source), never on
a retry path, so the totals are exact unless Cassandra itself times out.
"""

from __future__ import annotations

from .queues import QueueInfo
from .session import Connection

NAMES = ("enqueued", "acked", "dead_lettered", "dropped", "republished", "lost")


class Counters:
    def __init__(self, conn: Connection):
        self.conn = conn

    def add(self, queue: QueueInfo, name: str, n: int) -> None:
        if name not in NAMES:
            raise ValueError(name)
        if n:
            self.conn.execute(
                f"UPDATE {{ks}}.counters SET {name} = {name} + ? WHERE queue_id = ?",
                (n, queue.queue_id),
            )

    def read(self, queue: QueueInfo) -> dict[str, int]:
        row = self.conn.execute(
            f"SELECT {', '.join(NAMES)} FROM {{ks}}.counters WHERE queue_id = ?", (queue.queue_id,)
        ).one()
        return {n: int(getattr(row, n) or 0) if row else 0 for n in NAMES}
