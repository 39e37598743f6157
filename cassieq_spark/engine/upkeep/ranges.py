"""Skipped ranges: reservations readers handed to repair because their writer took longer than
the repair timeout.

Repair waits the repair timeout once more (a slow writer may still land), then:

* republishes every message that did land there and is not acked or dead, each under a
  reservation keyed by its original id, so two repairs at once, or a repair killed and rerun,
  republish it exactly once. Repair owns *every* such row: the Spark source never delivers a
  row of a skipped range, so a delayed row, or one a client holds, would otherwise stay
  forever and pin the repair pointer. A delayed row is taken over (a
  compare-and-set marks it dead, ``moved = 'repair'``) and republished with the delay it has
  left; a row a client holds is left until its visibility timeout passes (the range stays
  not done), then taken over the same way;
* counts the ids that never arrived as lost;
* marks the range done (a compare-and-set: only one repair counts it);
* once the range's buckets are reclaimed, forgets it: the range row goes, and so do the
  reservation row and the keys of the republished copies of an unkeyed block; a keyed block
  keeps both (its row as the *forgotten* marker) for as long as its key may be replayed, so
  that a replay writes what repair did not deliver instead of taking the block for written.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass, field, replace

from ..core import clock, monoton
from ..core.buckets import bucket_of
from ..core.clock import to_epoch
from ..core.counters import Counters
from ..core.messages import (
    MOVED_DLQ,
    MOVED_REPAIR,
    is_expired,
    read_range,
    remaining_ttl,
)
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from ..write.republish import republish
from . import deadletter, lost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkippedRange:
    lo: int
    hi: int
    skipped_at: float
    done: bool
    # The stored timestamp as read, for the compare-and-set that marks the range done.
    stamp: dt.datetime | None = field(default=None, compare=False)
    done_by: str | None = field(default=None, compare=False)  # the repair that counted it
    lost: int = field(default=0, compare=False)  # ids it counted as never written


def skipped_ranges(conn: Connection, queue: QueueInfo) -> list[SkippedRange]:
    rows = conn.execute(
        "SELECT lo, hi, skipped_at, done, done_by, lost FROM {ks}.skipped WHERE queue_id = ?",
        (queue.queue_id,),
    )
    return [
        SkippedRange(
            r.lo, r.hi, to_epoch(r.skipped_at), bool(r.done), r.skipped_at, r.done_by, r.lost or 0
        )
        for r in rows
    ]


def repair_range(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    rng: SkippedRange,
    dry_run: bool = False,
    *,
    repair_timeout: float | None = None,
) -> tuple[int, int]:
    """Republish what landed in one skipped range and mark it done.

    Returns (republished, lost ids) as counted by this call; (0, 0) when another repair
    counted the range first, when a republisher pushed its repair back (see
    :func:`~cassieq_spark.engine.write.republish.claim_stale_block`), or while a client still holds one of its messages: the range
    is then repaired again on a later pass (republishing is keyed, so nothing twice).
    """
    timeout = queue.repair_timeout if repair_timeout is None else repair_timeout
    now = clock.now()
    rows = list(read_range(conn, queue, rng.lo, rng.hi, _RANGE_COLUMNS))
    lost_count = (rng.hi - rng.lo) - len(rows)
    todo: list[tuple[object, float]] = []  # (row, delay left)
    waiting = 0
    for r in rows:
        if r.dead:
            if r.moved == MOVED_REPAIR:
                todo.append((r, _delay_left(r, now)))  # taken over by an earlier pass
            elif r.moved == MOVED_DLQ and not dry_run:
                deadletter.complete(conn, counters, queue, r.id)
            continue
        if r.acked or is_expired(r, queue, now):
            continue
        if r.version is None and r.visible_at is None:
            todo.append((r, 0.0))  # plain: readers pass skipped ranges, nobody else has it
        elif r.version is not None and to_epoch(r.invisible_until) > now:
            waiting += 1  # a client holds it: it may still ack
        elif dry_run or _take_over(conn, queue, r, now):
            todo.append((r, _delay_left(r, now)))
        else:
            waiting += 1  # claimed or acked since it was read: look again next pass
    if dry_run:
        return len(todo), lost_count
    for r, delay in todo:
        republish(conn, queue, r, timeout, delay)
    if waiting:
        log.info(
            "queue %s: range %d..%d waits for %d messages clients hold",
            queue.name,
            rng.lo,
            rng.hi,
            waiting,
        )
        return 0, 0
    # `done_by` tells this call's completion from a concurrent repair's after a lost reply,
    # so the counters move exactly once.
    token = uuid.uuid4().hex
    # The loss report goes first, pending: a repair that dies after the range is done must
    # not take the report with it (the next pass publishes it, see lost.publish_pending).
    landed = {r.id for r in rows}
    report_key = lost.record(
        conn,
        queue,
        rng.lo,
        rng.hi,
        [i for i in range(rng.lo, rng.hi) if i not in landed],
        count=lost_count,
        pending=token,
    )
    if not _mark_done(conn, queue, rng, token, len(todo), lost_count):
        if report_key is not None:
            lost.drop_pending(conn, queue, report_key, token)
        return 0, 0
    counters.add(queue, "republished", len(todo))
    counters.add(queue, "lost", lost_count)
    faults.point("ranges.after_done", queue=queue, rng=rng)
    if report_key is not None:
        lost.publish(conn, queue, report_key, token)
    if todo or lost_count:
        log.info(
            "queue %s: range %d..%d repaired: %d republished, %d never written",
            queue.name,
            rng.lo,
            rng.hi,
            len(todo),
            lost_count,
        )
    return len(todo), lost_count


def _mark_done(
    conn: Connection,
    queue: QueueInfo,
    rng: SkippedRange,
    token: str,
    republished: int,
    lost_count: int,
) -> bool:
    """The compare-and-set that makes this call the one that counts the range; False when
    another repair did, or a republisher pushed the range's repair back."""
    read = "SELECT done, done_by FROM {ks}.skipped WHERE queue_id = ? AND lo = ?"
    cql = (
        "UPDATE {ks}.skipped SET done = true, done_by = ?, republished = ?, lost = ? "
        "WHERE queue_id = ? AND lo = ? IF done = null"
    )
    params: tuple = (token, republished, lost_count, queue.queue_id, rng.lo)
    if rng.stamp is not None:
        cql += " AND skipped_at = ?"
        params = (*params, rng.stamp)
    res = conn.cas(
        cql,
        params,
        read=read,
        read_params=(queue.queue_id, rng.lo),
        applied=lambda row: row is not None and row.done_by == token,
    )
    if res.was_applied:
        return True
    if res.resolved or not getattr(res.one(), "done", None):
        return False
    # "Not applied" on a done range: by another repair, or by this call's own statement sent
    # again after it applied (the reply of a failed condition does not name `done_by`).
    row = conn.read_serial(read, (queue.queue_id, rng.lo))
    return row is not None and row.done_by == token


_RANGE_COLUMNS = (
    "id, payload, headers, enqueued_at, visible_at, version, deliveries, invisible_until, "
    "acked, dead, moved"
)


def _delay_left(row, now: float) -> float:
    """What is left of a never-delivered message's delay (a delivered one is due already)."""
    if row.version is not None or row.visible_at is None:
        return 0.0
    return max(0.0, to_epoch(row.visible_at) - now)


def _take_over(conn: Connection, queue: QueueInfo, row, now: float) -> bool:
    """Mark a row of a skipped range dead before republishing it, at the delivery version it
    was read with, so a client's timer path cannot deliver it as well."""
    key = (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id)
    res = conn.cas(
        "UPDATE {ks}.messages USING TTL ? SET dead = true, moved = ? "
        "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null",
        (remaining_ttl(row, queue, now), MOVED_REPAIR, *key, row.version),
        read="SELECT dead, moved FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
        read_params=key,
        # A concurrent repair that took it over is as good: the republish is keyed.
        applied=lambda cur: cur is not None and bool(cur.dead) and cur.moved == MOVED_REPAIR,
    )
    return bool(res.was_applied)


def due_ranges(ranges: list[SkippedRange], timeout: float, now: float) -> list[SkippedRange]:
    return [r for r in ranges if not r.done and r.skipped_at + timeout <= now]


def assume_repaired(ranges: list[SkippedRange], due: list[SkippedRange]) -> list[SkippedRange]:
    """For a dry run: the ranges as they would be after repairing ``due``."""
    fixed = {r.lo for r in due}
    return [replace(r, done=True) if r.lo in fixed else r for r in ranges]


def forget_ranges(conn: Connection, queue: QueueInfo, below_id: int) -> int:
    """Drop what is kept for skipped ranges whose buckets are reclaimed (all below
    ``below_id``): the range, and the reservation row (:func:`monoton.forget`). First, the
    loss report of every done range that a repair left pending is published.

    Only then: until its bucket is gone a late writer's close must still find the reservation
    marked skipped, and readers exclude the range. The reservation goes first and the range
    row last, so a crash in between repeats the whole step next pass, and a writer that finds
    no range row can tell a forgotten block by its reservation (``settle.restart_repair_clock``).

    A keyed block's reservation stays as the forgotten marker, with the keys of the range's
    republished copies: a replay of its key asks them which rows repair delivered and writes
    the others again. An unkeyed block is never asked for again: its row and those keys go.
    """
    stamp = int((clock.now() + monoton.CLOSE_STAMP_AHEAD) * 1_000_000)
    forgotten = 0
    ranges = skipped_ranges(conn, queue)
    # A counted loss is reported before anything of its range goes (see lost.py).
    lost.publish_pending(
        conn, queue, [(r.lo, r.hi, r.done_by) for r in ranges if r.done and r.done_by and r.lost]
    )
    for rng in ranges:
        if not rng.done or rng.hi > below_id:
            continue
        if not monoton.forget(conn, queue, rng.lo, rng.hi):
            # Keys of republished copies (see republish): inserted by compare-and-set, so the
            # delete is stamped ahead of any ballot; nothing writes these keys again.
            futures = []
            for mid in range(rng.lo, rng.hi):
                futures.append(
                    conn.execute_async(
                        "DELETE FROM {ks}.reservation_keys USING TIMESTAMP ? "
                        "WHERE queue_id = ? AND key = ?",
                        (stamp, queue.queue_id, f"repair:{mid}#0"),
                    )
                )
                if len(futures) >= 64:
                    futures.pop(0).result()
            for f in futures:
                f.result()
        conn.cas(
            "DELETE FROM {ks}.skipped WHERE queue_id = ? AND lo = ? IF done = true",
            (queue.queue_id, rng.lo),
            read="SELECT hi FROM {ks}.skipped WHERE queue_id = ? AND lo = ?",
            read_params=(queue.queue_id, rng.lo),
            applied=lambda row: row is None,
        )
        forgotten += 1
    return forgotten


def record_skipped(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> bool:
    """Hand an abandoned reservation to repair before readers pass it.

    Returns False when its writer closed it first: then the block is complete and must be
    read as usual. Idempotent: recording a range again keeps its first ``skipped_at``. A
    reservation repair already forgot (a reader whose view predates the forget) is passed
    without being recorded again: that would count its ids lost a second time.
    """
    handed = monoton.skip(conn, queue, lo, hi)
    if handed is monoton.Handed.CLOSED:
        return False
    if handed is monoton.Handed.FORGOTTEN:
        return True
    res = conn.cas(
        "INSERT INTO {ks}.skipped (queue_id, lo, hi, skipped_at) VALUES (?, ?, ?, toTimestamp(now())) "
        "IF NOT EXISTS",
        (queue.queue_id, lo, hi),
        read="SELECT hi FROM {ks}.skipped WHERE queue_id = ? AND lo = ?",
        read_params=(queue.queue_id, lo),
        applied=lambda row: row is not None,
    )
    if res.was_applied:
        log.warning(
            "queue %s: reservation of ids %d..%d was not written within the repair timeout; "
            "readers pass it and repair will republish whatever lands there",
            queue.name,
            lo,
            hi,
        )
    return True
