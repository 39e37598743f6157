"""Repair: republish what readers skipped, count what never arrived, reclaim finished buckets.

Readers never pass an id whose reservation is open and younger than the repair timeout. When a
writer dies holding a reservation, readers pass it after that timeout and record it in
``skipped``. Repair waits the repair timeout once more (a slow writer may still land), then:

* republishes every message that did land there, each under a reservation keyed by its
  original id, so two repairs at once, or a repair killed and rerun, republish it exactly once;
* counts the ids that never arrived as lost;
* marks the range done (a compare-and-set: only one repair counts it).

Buckets that lie wholly below the reader pointer, whose messages are all finished (acked, dead,
consumed by a streaming query, or handed to repair and repaired), are dropped as whole
partitions and the repair pointer moves over them, so storage and scans do not grow with history.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

from . import pointers
from .buckets import bucket_end, bucket_start
from .clock import to_epoch
from .consumer import HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE
from .counters import Counters
from .messages import read_range
from .producer import enqueue
from .queues import QueueInfo
from .session import Connection

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
    pending_ranges: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SkippedRange:
    lo: int
    hi: int
    skipped_at: float
    done: bool


def skipped_ranges(conn: Connection, queue: QueueInfo) -> list[SkippedRange]:
    rows = conn.execute(
        "SELECT lo, hi, skipped_at, done FROM {ks}.skipped WHERE queue_id = ?", (queue.queue_id,)
    )
    return [SkippedRange(r.lo, r.hi, to_epoch(r.skipped_at), bool(r.done)) for r in rows]


def repair_range(
    conn: Connection, counters: Counters, queue: QueueInfo, rng: SkippedRange, dry_run: bool = False
) -> tuple[int, int]:
    """Republish what landed in one skipped range. Returns (republished, lost ids)."""
    present = [
        r
        for r in read_range(
            conn, queue, rng.lo, rng.hi, "id, payload, headers, acked, dead, version"
        )
        if not r.dead and not r.acked
    ]
    seen = {r.id for r in read_range(conn, queue, rng.lo, rng.hi, "id")}
    lost = (rng.hi - rng.lo) - len(seen)
    if dry_run:
        return len(present), lost
    for r in present:
        headers = dict(r.headers or {})
        headers[HEADER_ORIGIN_QUEUE] = queue.name
        headers[HEADER_ORIGIN_ID] = str(r.id)
        enqueue(conn, counters, queue, [r.payload or b""], [headers], key=f"repair:{r.id}")
    res = conn.execute(
        "UPDATE {ks}.skipped SET done = true, republished = ?, lost = ? WHERE queue_id = ? AND lo = ? IF done = null",
        (len(present), lost, queue.queue_id, rng.lo),
    )
    if res.was_applied:
        counters.add(queue, "republished", len(present))
        counters.add(queue, "lost", lost)
        if present or lost:
            log.info(
                "queue %s: range %d..%d repaired: %d republished, %d never written",
                queue.name,
                rng.lo,
                rng.hi,
                len(present),
                lost,
            )
    return len(present), lost


def bucket_finished(
    conn: Connection, queue: QueueInfo, bucket: int, reader: int, ranges: list[SkippedRange]
) -> bool:
    """May ``bucket`` be dropped? Only when nothing in it still needs a reader or repair."""
    lo, hi = bucket_start(bucket, queue.bucket_size), bucket_end(bucket, queue.bucket_size)
    if hi > reader:
        return False
    if any(not r.done and r.lo < hi and r.hi > lo for r in ranges):
        return False
    for row in read_range(conn, queue, lo, hi, "id, version, visible_at, acked, dead"):
        if row.acked or row.dead:
            continue
        if row.version is None and row.visible_at is None:
            continue  # consumed by a streaming query, or repaired
        return False  # in flight, waiting for redelivery, or delayed
    return True


def reclaim_bucket(conn: Connection, queue: QueueInfo, bucket: int) -> None:
    conn.execute(
        "DELETE FROM {ks}.messages WHERE queue_id = ? AND bucket = ?", (queue.queue_id, bucket)
    )


def due_ranges(ranges: list[SkippedRange], timeout: float, now: float) -> list[SkippedRange]:
    return [r for r in ranges if not r.done and r.skipped_at + timeout <= now]


def repair_queue(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    *,
    repair_timeout: float | None = None,
    dry_run: bool = False,
    max_buckets: int | None = None,
    now: float | None = None,
) -> RepairReport:
    """One repair pass over one queue, in this process (the Spark job spreads the same steps)."""
    now = time.time() if now is None else now
    timeout = queue.repair_timeout if repair_timeout is None else repair_timeout
    report = RepairReport(queue=queue.name, dry_run=dry_run)
    ranges = skipped_ranges(conn, queue)
    for rng in due_ranges(ranges, timeout, now):
        republished, lost = repair_range(conn, counters, queue, rng, dry_run)
        report.republished += republished
        report.lost_ids += lost
        report.lost_reservations += 1 if lost else 0
    ranges = skipped_ranges(conn, queue) if not dry_run else ranges
    report.pending_ranges = sum(1 for r in ranges if not r.done)
    ptrs = pointers.read(conn, queue)
    report.reader_pointer = ptrs.reader
    bucket = ptrs.repair
    last = ptrs.reader // queue.bucket_size  # buckets below this lie wholly behind the reader
    reclaimable_to = bucket
    while bucket < last and (max_buckets is None or report.buckets_scanned < max_buckets):
        report.buckets_scanned += 1
        if not bucket_finished(conn, queue, bucket, ptrs.reader, ranges):
            break
        if not dry_run:
            reclaim_bucket(conn, queue, bucket)
        report.buckets_reclaimed += 1
        bucket += 1
        reclaimable_to = bucket
    if not dry_run and reclaimable_to > ptrs.repair:
        pointers.advance(conn, queue, "repair", reclaimable_to)
    report.repair_pointer = reclaimable_to if not dry_run else ptrs.repair
    return report
