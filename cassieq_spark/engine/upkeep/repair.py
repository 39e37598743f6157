"""Repair: republish what readers skipped, count what never arrived, reclaim finished buckets.

Readers never pass an id whose reservation is open and younger than the repair timeout. When a
writer dies holding a reservation, readers pass it after that timeout and record it in
``skipped``. Repair waits the repair timeout once more (a slow writer may still land), then:

* republishes every message that did land there and is not acked or dead, exactly once
  (see ``ranges.py``: delayed rows and rows clients hold included);
* counts the ids that never arrived as lost;
* marks the range done (a compare-and-set: only one repair counts it).

Buckets that lie wholly below the reader pointer, whose messages are all finished (acked, dead,
consumed by a streaming query, or handed to repair and repaired), are dropped as whole
partitions and the repair pointer moves over the contiguous prefix of them, so storage and
scans do not grow with history. What only mattered for those buckets goes with them: the
skipped ranges below the pointer with the reservation rows and republish keys of unkeyed
blocks (a keyed block leaves a marker, see ``ranges.forget_ranges``), the dead-letter copy
keys; and timers well behind the invisibility pointer.

The steps are separate functions so that the Spark job (``cassieq_spark.spark.repair_job``) can
run range repairs and bucket checks as parallel tasks; :func:`repair_queue` runs them here.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from ..core import clock, pointers, timers
from ..core.buckets import bucket_end, bucket_start
from ..core.counters import Counters
from ..core.messages import (
    MOVED_DLQ,
    MOVED_DLQ_DONE,
    MOVED_DLQ_MISSING,
    is_done,
    is_expired,
    read_range,
)
from ..core.progress import ProgressSink, start_task
from ..core.queues import QueueInfo
from ..store.session import Connection
from ..write.republish import MAX_REPUBLISH_HOPS, republish
from . import deadletter
from .ranges import (
    SkippedRange,
    assume_repaired,
    due_ranges,
    forget_ranges,
    repair_range,
    skipped_ranges,
)

__all__ = [
    "MAX_REPUBLISH_HOPS",
    "RepairReport",
    "SkippedRange",
    "assume_repaired",
    "bucket_finished",
    "buckets_to_check",
    "due_ranges",
    "finish_pass",
    "finished_prefix",
    "forget_ranges",
    "reclaim_buckets",
    "repair_queue",
    "repair_range",
    "republish",
    "skipped_ranges",
]

log = logging.getLogger(__name__)


@dataclass
class RepairReport:
    queue: str
    buckets_scanned: int = 0
    republished: int = 0
    lost_reservations: int = 0
    lost_ids: int = 0
    buckets_reclaimed: int = 0
    repair_pointer: int = 0
    reader_pointer: int = 0
    ranges_repaired: int = 0
    pending_ranges: int = 0
    dry_run: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def bucket_finished(
    conn: Connection,
    queue: QueueInfo,
    bucket: int,
    reader: int,
    ranges: list[SkippedRange],
    *,
    dry_run: bool = False,
) -> bool:
    """May ``bucket`` be dropped? Only when nothing in it still needs a reader or repair.

    ``ranges`` must have been read *after* ``reader``: readers record a skipped range before
    they move the pointer past it, so every range below that pointer is then in the list.
    A dead-letter move a crash left half done is finished here first (unless ``dry_run``);
    once the bucket is finished, the keys of its dead-letter copies are dropped.
    """
    lo, hi = bucket_start(bucket, queue.bucket_size), bucket_end(bucket, queue.bucket_size)
    if hi > reader:
        return False
    if any(not r.done and r.lo < hi and r.hi > lo for r in ranges):
        return False
    now = clock.now()
    copies: list[int] = []
    for row in read_range(
        conn, queue, lo, hi, "id, enqueued_at, version, visible_at, acked, dead, moved"
    ):
        if row.dead and row.moved == MOVED_DLQ:
            if dry_run:
                return False
            deadletter.complete(conn, Counters(conn), queue, row.id)
            copies.append(row.id)
        elif row.dead and row.moved in (MOVED_DLQ_DONE, MOVED_DLQ_MISSING):
            copies.append(row.id)
        elif is_expired(row, queue, now):
            continue  # its payload is gone: nothing left to deliver
        elif not is_done(row, reader):  # rows of a repaired range count as consumed
            return False  # in flight, waiting for redelivery, or delayed
    if not dry_run:
        deadletter.forget_copy_keys(conn, queue, copies)
    return True


def reclaim_bucket(conn: Connection, queue: QueueInfo, bucket: int) -> None:
    conn.execute(
        "DELETE FROM {ks}.messages WHERE queue_id = ? AND bucket = ?", (queue.queue_id, bucket)
    )


def reclaim_buckets(conn: Connection, queue: QueueInfo, first: int, end: int) -> None:
    """Drop the partitions of buckets ``first..end-1`` (idempotent), a window at a time."""
    futures = []
    for bucket in range(first, end):
        futures.append(
            conn.execute_async(
                "DELETE FROM {ks}.messages WHERE queue_id = ? AND bucket = ?",
                (queue.queue_id, bucket),
            )
        )
        if len(futures) >= 64:
            futures.pop(0).result()
    for f in futures:
        f.result()


def buckets_to_check(
    queue: QueueInfo, ptrs: pointers.Pointers, max_buckets: int | None = None
) -> range:
    """The buckets between the repair pointer and the last bucket wholly behind the reader."""
    last = ptrs.reader // queue.bucket_size
    if max_buckets is not None:
        last = min(last, ptrs.repair + max_buckets)
    return range(ptrs.repair, max(ptrs.repair, last))


def finished_prefix(start: int, checks: dict[int, bool]) -> int:
    """The first bucket from ``start`` on that is not finished (or was not checked)."""
    bucket = start
    while checks.get(bucket):
        bucket += 1
    return bucket


def finish_pass(
    conn: Connection,
    queue: QueueInfo,
    ptrs: pointers.Pointers,
    checks: dict[int, bool],
    report: RepairReport,
) -> None:
    """Drop the contiguous prefix of finished buckets and move the repair pointer over it."""
    report.buckets_scanned = len(checks)
    report.reader_pointer = ptrs.reader
    to = finished_prefix(ptrs.repair, checks)
    report.buckets_reclaimed = to - ptrs.repair
    if report.dry_run:
        report.repair_pointer = ptrs.repair
        return
    if to > ptrs.repair:
        # Drops first, pointer second: a crash in between leaves the pointer behind
        # buckets already gone, and the next pass just drops them again.
        reclaim_buckets(conn, queue, ptrs.repair, to)
        pointers.advance(conn, queue, "repair", to)
    current = pointers.read(conn, queue)
    report.repair_pointer = max(to, current.repair)
    forget_ranges(conn, queue, report.repair_pointer * queue.bucket_size)
    timers.reclaim(conn, queue, current.timer_slot)


def repair_queue(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    *,
    repair_timeout: float | None = None,
    dry_run: bool = False,
    max_buckets: int | None = None,
    now: float | None = None,
    progress: ProgressSink | None = None,
) -> RepairReport:
    """One repair pass over one queue, in this process (the Spark job spreads the same steps).
    ``progress``: two tasks, the due skipped ranges repaired, then the buckets checked."""
    started = time.monotonic()
    now = clock.now() if now is None else now
    timeout = queue.repair_timeout if repair_timeout is None else repair_timeout
    report = RepairReport(queue=queue.name, dry_run=dry_run)
    # Pointers before ranges: see bucket_finished.
    ptrs = pointers.read(conn, queue)
    ranges = skipped_ranges(conn, queue)
    due = due_ranges(ranges, timeout, now)
    ranges_task = start_task(progress, "repair ranges", queue.name, len(due), unit="ranges")
    for rng in due:
        republished, lost = repair_range(
            conn, counters, queue, rng, dry_run, repair_timeout=timeout
        )
        report.republished += republished
        report.lost_ids += lost
        report.lost_reservations += 1 if lost else 0
        report.ranges_repaired += 1
        ranges_task.advance(1, republished=republished, lost_ids=lost)
    ranges_task.finish()
    ranges = assume_repaired(ranges, due) if dry_run else skipped_ranges(conn, queue)
    report.pending_ranges = sum(1 for r in ranges if not r.done)
    checks: dict[int, bool] = {}
    to_check = buckets_to_check(queue, ptrs, max_buckets)
    buckets_task = start_task(progress, "repair buckets", queue.name, len(to_check), "buckets")
    for bucket in to_check:
        checks[bucket] = bucket_finished(conn, queue, bucket, ptrs.reader, ranges, dry_run=dry_run)
        buckets_task.advance(1)
        if not checks[bucket]:
            break  # in this process, stop at the first bucket that holds the pointer back
    finish_pass(conn, queue, ptrs, checks, report)
    buckets_task.finish(reclaimed=report.buckets_reclaimed)
    report.seconds = round(time.monotonic() - started, 3)
    return report
