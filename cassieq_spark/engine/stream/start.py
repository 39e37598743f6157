"""Where a new stream (one without a checkpoint) starts: ``earliest``, ``latest``, an id or a
time (the Spark source's ``startingPosition``).

``earliest`` is the queue's reader pointer: the oldest message nobody consumed. Every other
start is an id ``N`` at or above the reader pointer; the stream's id path then begins at ``N``
and the messages in ``[reader, N)`` are *not its own*: it neither delivers them through its id
path nor acks them. Since the stream acks by moving the shared reader pointer, it must not
move it across them: while the reader pointer lies below the id path of a batch, that batch is
acked message by message (``acked = true``, plain writes, see ``ack.py``) and the
pointer stays where it was, so clients (once the stream's lease is gone) or a later
``earliest`` stream still get those messages. Once clients have consumed them (the pointer
moves past acked rows by itself), the stream acks by pointer moves again.

``{"timestamp": ms}`` starts at the first id at or above the reader pointer whose message was
enqueued at or after ``ms`` (``enqueued_at``, the writer's clock); ids are handed out in
order, so that is where messages of that time begin (a block reserved earlier and written
later may hold a few younger ones below it; they stay in the queue like any before the start).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..core import monoton
from ..core.buckets import bucket_of
from ..core.clock import from_epoch
from ..core.messages import read_range
from ..core.queues import QueueInfo
from ..store.session import Connection

log = logging.getLogger(__name__)

EARLIEST = "earliest"
LATEST = "latest"
AT_ID = "id"
AT_TIMESTAMP = "timestamp"
KINDS = (EARLIEST, LATEST, AT_ID, AT_TIMESTAMP)

__all__ = ["AT_ID", "AT_TIMESTAMP", "EARLIEST", "KINDS", "LATEST", "StartingPosition", "first_id"]


@dataclass(frozen=True)
class StartingPosition:
    """``kind`` one of ``KINDS``; ``value`` the id or the epoch milliseconds (else None)."""

    kind: str = EARLIEST
    value: int | None = None

    def describe(self) -> str:
        if self.value is None:
            return self.kind
        return f'{{"{self.kind}": {self.value}}}'


def first_id(conn: Connection, queue: QueueInfo, start: StartingPosition, reader: int) -> int:
    """The first id of a new stream's id path (never below the reader pointer ``reader``:
    ids below it were consumed by others)."""
    if start.kind == EARLIEST:
        return reader
    next_id = monoton.horizon(conn, queue, reader, window=1).next_id
    if start.kind == AT_ID:
        wanted = int(start.value or 0)
        if wanted > next_id:
            log.warning(
                "queue %s: startingPosition %s lies beyond the ids handed out so far (next "
                "%d): the %d messages enqueued next will not be delivered by this query",
                queue.name,
                start.describe(),
                next_id,
                wanted - next_id,
            )
        return max(reader, wanted)
    if start.kind == LATEST:
        return max(reader, next_id)
    if start.kind == AT_TIMESTAMP:
        return _first_at_or_after(conn, queue, reader, next_id, int(start.value or 0))
    raise ValueError(f"unknown starting position {start!r}")


def _first_at_or_after(conn: Connection, queue: QueueInfo, lo: int, hi: int, ms: int) -> int:
    """The first id of ``[lo, hi)`` enqueued at or after ``ms``; ``hi`` if none is. A bucket
    whose newest message is older is passed with one aggregate read."""
    since = from_epoch(ms / 1000.0)
    newest = conn.prepare(
        "SELECT max(enqueued_at) AS newest FROM {ks}.messages WHERE queue_id = ? AND bucket = ?"
    )
    pos = lo
    while pos < hi:
        bucket = bucket_of(pos, queue.bucket_size)
        end = min(hi, (bucket + 1) * queue.bucket_size)
        row = conn.execute(newest, (queue.queue_id, bucket)).one()
        if row is not None and row.newest is not None and row.newest >= since:
            for msg in read_range(conn, queue, pos, end, "id, enqueued_at"):
                if msg.enqueued_at is not None and msg.enqueued_at >= since:
                    return int(msg.id)
        pos = end
    return hi
