"""Purging a queue: drop every message written so far while producers keep writing.

The purge line is the *horizon* when the purge starts (``core/monoton.py``): every id below it
belongs to a block that was completely written (or handed to repair), every block still being
written lies at or above it. So

1. abandoned reservations below the line are handed to repair first (as any reader does);
2. the reader pointer moves to the line (one forward-only compare-and-set): every plain
   message below it is consumed at once, and a client that reads from the pointer from now on
   starts above it;
3. the rows below the line that the pointer does not finish (delayed, delivered to a client,
   in a range handed to repair) are marked ``acked``, so their timers and repair skip them.
   Rows of a range repair already finished are neither marked nor counted: repair
   republished them (their copies are counted where they lie) or counted them lost.

Messages reserved after the purge read the horizon, and blocks still being written when it
did, lie at or above the line and are never touched: nothing a producer writes after the purge
starts is lost. A message a client claims while the purge runs may still be delivered once,
like any message in flight. The purged messages are counted as ``dropped``, and kept as one
lost range (``lost.py``, cause "purged"; kept apart from repair's report of the same range):
a streaming query stopped meanwhile reports them when it restarts (``failOnDataLoss``), as
Kafka's does for records deleted before it read them; a new query starting above them is not
told.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..core import clock, monoton, pointers
from ..core.buckets import bucket_of
from ..core.counters import Counters
from ..core.messages import is_done, is_expired, read_range, remaining_ttl
from ..core.progress import ProgressSink, start_task
from ..core.queues import QueueInfo
from ..store.session import Connection
from ..stream.lease import stream_busy
from ..stream.read import READ_WINDOW, inside
from . import lost
from .ranges import record_skipped, skipped_ranges

log = logging.getLogger(__name__)

_COLUMNS = "id, enqueued_at, version, visible_at, acked, dead"
PROGRESS_EVERY = 1000  # ids between two progress reports

__all__ = ["PurgeReport", "purge"]


@dataclass(frozen=True)
class PurgeReport:
    """What a purge dropped: ``purged`` messages below id ``through_id``; ids from there up
    to ``next_id`` were still being written (or reserved after a block still being written)
    and were kept."""

    queue: str
    purged: int
    through_id: int
    next_id: int

    def as_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "purged": self.purged,
            "through_id": self.through_id,
            "next_id": self.next_id,
        }


def purge(conn: Connection, queue: QueueInfo, progress: ProgressSink | None = None) -> PurgeReport:
    """Drop every message of ``queue`` below the horizon (see the module's docstring). Raises
    QueueBusyError while a streaming query consumes the queue. ``progress``: the ids looked at
    so far, of those from the repair pointer to the purge line."""
    ptrs = pointers.read(conn, queue)
    busy = stream_busy(queue, ptrs, clock.now())
    if busy is not None:
        raise busy
    hz = monoton.horizon(conn, queue, ptrs.reader)
    line = max(ptrs.reader, hz.safe_end)
    for lo, hi in hz.abandoned:
        if lo < line:
            record_skipped(conn, queue, lo, hi)
    pointers.advance(conn, queue, "reader", line)
    first = ptrs.repair * queue.bucket_size
    ranges = [r for r in skipped_ranges(conn, queue) if r.hi > first and r.lo < line]
    excluded = sorted((r.lo, r.hi) for r in ranges if not r.done)
    # A done range's rows were republished (the copies lie elsewhere) or counted lost.
    repaired = sorted((r.lo, r.hi) for r in ranges if r.done)
    purged = 0
    named: list[int] = []  # the first purged ids, for the lost range
    to_mark: list[tuple[int, int]] = []  # (id, what is left of its TTL)
    now = clock.now()
    task = start_task(progress, "purge", queue.name, max(0, line - first), unit="ids")
    at = first
    for row in read_range(conn, queue, first, line, _COLUMNS):
        if row.id - at >= PROGRESS_EVERY:
            task.advance(row.id - at, purged=0)
            at = row.id
        if inside(row.id, repaired):
            continue
        repairs = inside(row.id, excluded)  # repair republishes what is not acked or dead
        if row.acked or row.dead or (not repairs and is_done(row, ptrs.reader)):
            continue
        if is_expired(row, queue, now):
            continue
        purged += 1
        if len(named) < lost.MAX_IDS_KEPT:
            named.append(row.id)
        # Rows the pointer move does not finish: delayed, delivered, or repair's.
        if repairs or not (row.version is None and row.visible_at is None):
            to_mark.append((row.id, remaining_ttl(row, queue, now)))
    task.advance(max(0, line - at))
    _mark_acked(conn, queue, to_mark)
    task.finish(purged=purged)
    Counters(conn).add(queue, "dropped", purged)
    if purged:
        lost.record(conn, queue, named[0], line, named, lost.CAUSE_PURGED, count=purged)
    log.info(
        "queue %s: purged %d messages below id %d (%d marked; ids %d..%d kept: still being "
        "written)",
        queue.name,
        purged,
        line,
        len(to_mark),
        line,
        hz.next_id,
    )
    return PurgeReport(queue.name, purged, line, hz.next_id)


def _mark_acked(conn: Connection, queue: QueueInfo, ids: list[tuple[int, int]]) -> None:
    stmt = conn.prepare(
        "UPDATE {ks}.messages USING TTL ? SET acked = true "
        "WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    pending = []
    for mid, ttl in ids:
        key = (ttl, queue.queue_id, bucket_of(mid, queue.bucket_size), mid)
        pending.append(conn.execute_async(stmt, key))
        if len(pending) >= READ_WINDOW:
            pending.pop(0).result()
    for f in pending:
        f.result()
