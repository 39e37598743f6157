"""Messages delivered too often leave the queue: to its dead-letter queue, or dropped.

The original is taken out first, by a compare-and-set on the delivery version it was read
with (``dead = true`` plus a ``moved`` marker); the copy is written second, keyed by the
original id. The other order let a late ack (or ``change_visibility``) of the last holder
land between the copy and the CAS: the message was then processed *and* in the
dead-letter queue. A crash between the two steps leaves ``moved = 'dlq'``:
the timer path that reads the row again, or repair before it reclaims the bucket, finishes
the copy; the key makes every finisher write the same copy once.

A dead-letter queue deleted since the queue was created does not stop the queue: the
message is dropped, counted as such and logged.
"""

from __future__ import annotations

import logging
import uuid

from ...errors import QueueNotFoundError
from ..core import clock, queues
from ..core.buckets import bucket_of
from ..core.counters import Counters
from ..core.messages import (
    HEADER_ORIGIN_ID,
    HEADER_ORIGIN_QUEUE,
    MOVED_DLQ,
    MOVED_DLQ_DONE,
    MOVED_DLQ_MISSING,
    is_expired,
    read_one,
    remaining_ttl,
)
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from ..write.producer import enqueue

log = logging.getLogger(__name__)

HEADER_DELIVERY_COUNT = "cassieq-delivery-count"
MOVED_DROPPED = "dropped"  # no dead-letter queue configured

_READ = "SELECT version, dead, moved, claimed_by FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"


def _key(queue: QueueInfo, message_id: int) -> tuple:
    return (queue.queue_id, bucket_of(message_id, queue.bucket_size), message_id)


def copy_key(queue: QueueInfo, message_id: int) -> str:
    """The reservation key of a message's copy in the dead-letter queue (per original id)."""
    return f"dlq:{queue.queue_id}:{message_id}"


def take(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    row,
    now: float,
    deliveries: int | None = None,
) -> bool:
    """Take ``row`` (read with ``id, version, deliveries, enqueued_at``) out of the queue and
    move it on. False when someone acked or claimed it since it was read: it stays.
    ``deliveries``: the count to record (and give the copy), when the row's own is not it (a
    streaming query counts its deliveries outside the row: ``stream/deliveries.py``)."""
    count = row.deliveries if deliveries is None else deliveries
    moved = MOVED_DLQ if queue.dead_letter_queue else MOVED_DROPPED
    faults.point("deadletter.before_mark", queue=queue, row=row)
    key = _key(queue, row.id)
    # The token tells our mark from a racing consumer's after a lost reply: only the one
    # whose mark applied counts a drop.
    token = uuid.uuid4().hex[:16]
    res = conn.cas(
        "UPDATE {ks}.messages USING TTL ? SET dead = true, moved = ?, claimed_by = ?, "
        "deliveries = ? "
        "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null",
        (remaining_ttl(row, queue, now), moved, token, count, *key, row.version),
        read=_READ,
        read_params=key,
        applied=lambda cur: cur is not None and bool(cur.dead) and cur.claimed_by == token,
    )
    if not res.was_applied:
        return False
    if moved == MOVED_DROPPED:
        counters.add(queue, "dropped", 1)
        log.info(
            "queue %s: message %d dropped after %d deliveries",
            queue.name,
            row.id,
            count,
        )
        return True
    faults.point("deadletter.marked", queue=queue, row=row)
    complete(conn, counters, queue, row.id)
    return True


def complete(conn: Connection, counters: Counters, queue: QueueInfo, message_id: int) -> None:
    """Write the dead-letter copy of a message marked ``moved = 'dlq'`` and record it written.
    Idempotent: the copy's block is keyed by the original id."""
    now = clock.now()
    row = read_one(
        conn, queue, message_id, "payload, headers, deliveries, enqueued_at, version, moved"
    )
    if row is None or row.moved != MOVED_DLQ:
        return
    if is_expired(row, queue, now):
        if _finish(conn, queue, message_id, row, MOVED_DLQ_MISSING, now):
            counters.add(queue, "dropped", 1)
        return
    try:
        if queue.dead_letter_queue is None:  # the setting was removed after the message moved
            raise QueueNotFoundError(queue.name)
        dlq = queues.get_queue(conn, queue.dead_letter_queue)
    except QueueNotFoundError:
        if _finish(conn, queue, message_id, row, MOVED_DLQ_MISSING, now):
            counters.add(queue, "dropped", 1)
            log.error(
                "queue %s: dead-letter queue %r does not exist (deleted?); message %d dropped "
                "after %d deliveries. Create the queue or change the dead-letter queue setting.",
                queue.name,
                queue.dead_letter_queue,
                message_id,
                row.deliveries or 0,
            )
        return
    headers = dict(row.headers or {})
    headers.update(
        {
            HEADER_ORIGIN_QUEUE: queue.name,
            HEADER_ORIGIN_ID: str(message_id),
            HEADER_DELIVERY_COUNT: str(row.deliveries or 0),
        }
    )
    enqueue(conn, counters, dlq, [row.payload or b""], [headers], key=copy_key(queue, message_id))
    if _finish(conn, queue, message_id, row, MOVED_DLQ_DONE, now):
        counters.add(queue, "dead_lettered", 1)
        log.info(
            "queue %s: message %d moved to %s after %d deliveries",
            queue.name,
            message_id,
            dlq.name,
            row.deliveries or 0,
        )


def _finish(
    conn: Connection, queue: QueueInfo, message_id: int, row, state: str, now: float
) -> bool:
    """Record the end of a move; True for the one finisher whose compare-and-set applied
    (that one counts it)."""
    key = _key(queue, message_id)
    token = uuid.uuid4().hex[:16]  # several finishers may run at once (see take)
    res = conn.cas(
        "UPDATE {ks}.messages USING TTL ? SET moved = ?, claimed_by = ? "
        "WHERE queue_id = ? AND bucket = ? AND id = ? IF moved = ?",
        (remaining_ttl(row, queue, now), state, token, *key, MOVED_DLQ),
        read=_READ,
        read_params=key,
        applied=lambda cur: cur is not None and cur.moved == state and cur.claimed_by == token,
    )
    return bool(res.was_applied)


def forget_copy_keys(conn: Connection, queue: QueueInfo, message_ids: list[int]) -> None:
    """Drop the reservation keys of finished dead-letter copies (repair, once their bucket is
    finished: no finisher can run for them any more)."""
    if not message_ids or not queue.dead_letter_queue:
        return
    try:
        dlq = queues.get_queue(conn, queue.dead_letter_queue)
    except QueueNotFoundError:
        return
    futures = [
        conn.execute_async(
            "DELETE FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
            (dlq.queue_id, f"{copy_key(queue, mid)}#0"),
        )
        for mid in message_ids
    ]
    for f in futures:
        f.result()
