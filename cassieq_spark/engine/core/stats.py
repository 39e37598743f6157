"""Queue statistics: totals from counters, current state from a scan of the live buckets.

The scan covers only buckets that repair has not reclaimed yet, so its cost follows the backlog
and the repair lag, not the queue's history.
"""

from __future__ import annotations

from ..store.session import Connection
from ..upkeep import lost
from . import clock, monoton, pointers
from .clock import to_epoch
from .counters import Counters
from .messages import is_done, is_expired, read_range
from .queues import QueueInfo


def stats(conn: Connection, counters: Counters, queue: QueueInfo) -> dict:
    now = clock.now()
    ptrs = pointers.read(conn, queue)
    hz = monoton.horizon(conn, queue, ptrs.reader, now)
    totals = counters.read(queue)
    backlog = in_flight = delayed = 0
    oldest = None
    first = ptrs.repair * queue.bucket_size
    cols = "id, enqueued_at, visible_at, version, invisible_until, acked, dead"
    for row in read_range(conn, queue, first, hz.next_id, cols):
        if is_done(row, ptrs.reader) or is_expired(row, queue, now):
            continue
        if row.version is not None and to_epoch(row.invisible_until) > now:
            in_flight += 1
        elif row.version is None and to_epoch(row.visible_at) > now:
            delayed += 1
        else:
            backlog += 1
            if row.enqueued_at is not None:
                t = to_epoch(row.enqueued_at)
                oldest = t if oldest is None else min(oldest, t)
    lost_ranges, unreported = lost.lost_ranges_count(conn, queue)
    return {
        "queue": queue.name,
        **totals,
        # `lost` (a total) above; these are the ranges kept for streaming queries to report
        "lost_ranges": lost_ranges,
        "lost_ranges_unreported": unreported,
        "backlog": backlog,
        "in_flight": in_flight,
        "delayed": delayed,
        "oldest_age_seconds": round(now - oldest, 3) if oldest is not None else 0.0,
        "next_id": hz.next_id,
        "reader_pointer": ptrs.reader,
        "repair_pointer": ptrs.repair,
        "open_reservations": hz.open_count,
        "consumer": ptrs.lease_owner if ptrs.lease_held(now) else None,
    }
