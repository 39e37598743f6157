"""Consuming a queue batch by batch for a stream processor (the Spark source's driver side).

A batch is planned on one process, read on others, and acked after the processor committed
it. It delivers

* the *id path*: ids in ``[from, to)`` (``from`` at or above the reader pointer) that are due
  at the batch's time ``end_ts`` (plain messages always are), and
* the *timer path*: delayed or once client-delivered messages below ``from`` that are due at
  ``end_ts`` and not acked, found through their timers in the slots
  ``[timer_scan_start(start_ts), slot(end_ts)]``. The scan looks ``TIMER_SETTLE_SLOTS`` back
  before the previous batch's time: a client whose clock is a little behind can write a due
  time there after that batch was planned, and the message must still come (finding F12).

Batches run one after the other and each is acked before the next is planned, so a message
delivered by one batch is acked (``acked = true``, or the reader pointer for plain messages)
before the next batch looks: nothing is delivered twice without a failure in between.

**Acking what was delivered, nothing else** (F12). The ack re-reads the rows. A row counts as
delivered when it passes the reading rule *and* its delivery state (``invisible_until``,
written only by compare-and-sets, hence stamped with Cassandra's clock) was written before the
batch's time, which comes from Cassandra's clock too: then the executor saw that very state.
A row a client changed since is not acked; it comes again (at least once), never lost.

All pointer moves are fenced by the consumer lease (see ``lease.py``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..errors import QueueNotFoundError
from . import monoton, pointers, queues, timers
from .buckets import bucket_of, split_by_bucket
from .clock import TIMER_SETTLE_SLOTS, from_epoch, timer_slot, to_epoch
from .consumer import record_skipped
from .counters import Counters
from .lease import ClusterClock, Lease
from .messages import COLUMNS as READ_COLUMNS
from .messages import read_range
from .queues import QueueInfo
from .session import Connection

log = logging.getLogger(__name__)

READ_WINDOW = 64  # concurrent single-row reads
STATE_COLUMNS = (
    "id, visible_at, version, invisible_until, acked, dead, "
    "writetime(invisible_until) AS changed_at"
)

_RANGE = "FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
_COUNT = "SELECT COUNT(*) AS n " + _RANGE
# Rows that are not plain: delivered to a client (a version) or delayed (visible_at). The
# filter runs inside one partition slice, on the replicas.
_SPECIAL = "SELECT " + STATE_COLUMNS + " " + _RANGE + " AND %s ALLOW FILTERING"
_NOT_PLAIN = (("version > 0", ()), ("visible_at > ?", (from_epoch(0),)))

__all__ = ["READ_COLUMNS", "STATE_COLUMNS", "StreamConsumer"]


def _gaps(lo: int, hi: int, excluded: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of ``[lo, hi)`` outside the ``excluded`` ranges."""
    out: list[tuple[int, int]] = []
    pos = lo
    for elo, ehi in sorted(excluded):
        if elo > pos:
            out.append((pos, min(elo, hi)))
        pos = max(pos, ehi)
        if pos >= hi:
            break
    if pos < hi:
        out.append((pos, hi))
    return [(a, b) for a, b in out if a < b]


# -- the rules ---------------------------------------------------------------------------------


def _ms(value) -> int:
    return 0 if value is None else round(to_epoch(value) * 1000)


def due_ms(row) -> int:
    """When a message is due (epoch ms): 0 for a plain message that was never delayed or
    delivered to a client; else its ``visible_at``/``invisible_until``, whichever is later."""
    return max(_ms(row.visible_at), _ms(row.invisible_until))


def is_plain(row) -> bool:
    """Never delayed, never delivered to a client: below the reader pointer it is consumed."""
    return row.version is None and row.visible_at is None


def inside(mid: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= mid < hi for lo, hi in ranges)


def slot_of(ms: int) -> int:
    return timer_slot(ms / 1000.0)


def timer_scan_start(start_ts: int) -> int:
    """The first timer slot the timer path of a batch starting at ``start_ts`` looks at."""
    return slot_of(start_ts) - TIMER_SETTLE_SLOTS


def id_path_delivers(row, end_ts: int, excluded: Sequence[tuple[int, int]]) -> bool:
    if row.acked or row.dead or inside(row.id, excluded):
        return False
    return due_ms(row) <= end_ts


def timer_path_delivers(row, end_ts: int, excluded: Sequence[tuple[int, int]]) -> bool:
    # A plain row with a timer is one a client lost the race for: the reader pointer owns it.
    return not is_plain(row) and id_path_delivers(row, end_ts, excluded)


def unchanged_since(row, ts_ms: int) -> bool:
    """The row's delivery state was written before ``ts_ms`` (Cassandra's clock). Needs
    ``changed_at`` (the write time of ``invisible_until``, microseconds)."""
    return row.invisible_until is None or (
        row.changed_at is not None and row.changed_at < ts_ms * 1000
    )


# -- reading -----------------------------------------------------------------------------------


def read_rows_by_id(
    conn: Connection, queue: QueueInfo, ids: Iterable[int], columns: str
) -> Iterator:
    """Rows of the given ids (missing ones left out), in the order asked, pipelined."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    pending: list = []
    for mid in ids:
        pending.append(
            conn.execute_async(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
        )
        if len(pending) >= READ_WINDOW:
            row = pending.pop(0).result().one()
            if row is not None:
                yield row
    for f in pending:
        row = f.result().one()
        if row is not None:
            yield row


def skipped_overlapping(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> list:
    """Ranges handed to repair that overlap ``[lo, hi)`` (done or not: repair owns them)."""
    if hi <= lo:
        return []
    rows = conn.execute(
        "SELECT lo, hi FROM {ks}.skipped WHERE queue_id = ? AND lo >= ? AND lo < ?",
        (queue.queue_id, max(0, lo - monoton.MAX_BLOCK), hi),
    )
    return sorted((r.lo, r.hi) for r in rows if r.hi is not None and r.hi > lo)


def read_id_path(
    conn: Connection,
    queue: QueueInfo,
    lo: int,
    hi: int,
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
) -> Iterator:
    for row in read_range(conn, queue, lo, hi, READ_COLUMNS):
        if id_path_delivers(row, end_ts, excluded):
            yield row


def read_timer_path(
    conn: Connection,
    queue: QueueInfo,
    ids: Sequence[int],
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
) -> Iterator:
    for row in read_rows_by_id(conn, queue, ids, READ_COLUMNS):
        if timer_path_delivers(row, end_ts, excluded):
            yield row


# -- the driver side ---------------------------------------------------------------------------


class StreamConsumer:
    """Planning and acking for one run of a streaming consumer on one queue incarnation."""

    def __init__(self, conn: Connection, queue: QueueInfo, owner: str, lease_timeout: float):
        self.conn = conn
        self.queue = queue
        self.clock = ClusterClock(conn)
        self.lease = Lease(conn, queue, owner, lease_timeout, self.clock)
        # Abandoned reservations this run handed to repair; only those above the last start
        # can come up again, so the set is pruned as the stream moves (finding F21).
        self._recorded: set[tuple[int, int]] = set()
        # id -> timer slot, of timer candidates found acked or dead: final, not read again
        # while their slot stays in the scan window.
        self._finished: dict[int, int] = {}

    def current_incarnation(self) -> uuid.UUID | None:
        """The queue's incarnation now; None once it was deleted."""
        try:
            return queues.get_queue(self.conn, self.queue.name).queue_id
        except QueueNotFoundError:
            return None

    def pointers(self) -> pointers.Pointers:
        return pointers.read(self.conn, self.queue)

    def horizon(self, from_id: int, window: int | None = None) -> monoton.Horizon:
        return monoton.horizon(self.conn, self.queue, from_id, self.clock.now(), window)

    def record_abandoned(self, hz: monoton.Horizon, lo: int, hi: int) -> None:
        """Hand reservations whose writer is presumed dead to repair before passing them."""
        self._recorded = {r for r in self._recorded if r[1] > lo}
        for rlo, rhi in hz.abandoned:
            if rlo < hi and rhi > lo and (rlo, rhi) not in self._recorded:
                record_skipped(self.conn, self.queue, rlo, rhi)
                self._recorded.add((rlo, rhi))

    def excluded(self, lo: int, hi: int) -> list[tuple[int, int]]:
        return skipped_overlapping(self.conn, self.queue, lo, hi)

    def _timer_rows(self, below: int, from_slot: int, to_slot: int) -> Iterator[tuple[Any, int]]:
        """(state row, slot) of ids below ``below`` with a timer in ``[from_slot, to_slot]``,
        except those known to be finished."""
        if to_slot < from_slot:
            return
        self._finished = {i: s for i, s in self._finished.items() if s >= from_slot}
        found: dict[int, int] = {}
        for slot in timers.due_slots(self.conn, self.queue, from_slot, to_slot):
            for mid in timers.ids_in_slot(self.conn, self.queue, slot):
                if mid < below and mid not in self._finished:
                    found.setdefault(mid, slot)
        for row in read_rows_by_id(self.conn, self.queue, sorted(found), STATE_COLUMNS):
            if row.acked or row.dead:
                self._finished[row.id] = found[row.id]
                continue
            yield row, found[row.id]

    def timer_ids(self, below: int, start_ts: int, end_ts: int) -> list[int]:
        """The timer path of a batch: ids due at ``end_ts`` now (the read checks again)."""
        first = timer_scan_start(start_ts)
        rows = [r for r, _ in self._timer_rows(below, first, slot_of(end_ts))]
        if not rows:
            return []
        excluded = self.excluded(rows[0].id, rows[-1].id + 1)
        # The same rule as the ack's: a row is a candidate through the timer of its own state.
        return [
            r.id
            for r in rows
            if timer_path_delivers(r, end_ts, excluded) and slot_of(due_ms(r)) >= first
        ]

    def ack(self, end_id: int, end_ts: int, scan_from: int | None = None) -> int:
        """Ack what the committed batch ending at ``(end_id, end_ts)`` delivered. Idempotent.

        ``scan_from``: the first timer slot its timer path looked at, when known (else the
        invisibility pointer, which the previous ack left there). Returns how many were acked.
        """
        p = self.pointers()
        prev = p.reader
        plain, to_mark = self._id_path_acks(prev, end_id, end_ts)
        lo_slot = p.timer_slot if scan_from is None else scan_from
        rows = list(self._timer_rows(min(prev, end_id), lo_slot, slot_of(end_ts)))
        if rows:
            excluded = self.excluded(min(r.id for r, _ in rows), max(r.id for r, _ in rows) + 1)
            for row, slot in rows:
                # Only a state whose own timer lies in the scanned slots was a candidate.
                if (
                    timer_path_delivers(row, end_ts, excluded)
                    and slot_of(due_ms(row)) >= lo_slot
                    and unchanged_since(row, end_ts)
                ):
                    to_mark[row.id] = slot
        if to_mark:
            self.lease.renew()  # the fence for the plain writes below
            self._mark_acked(sorted(to_mark))
            self._finished.update(to_mark)
        moved = end_id > prev and self.lease.advance("reader", end_id)
        acked = len(to_mark) + (plain if moved else 0)
        Counters(self.conn).add(self.queue, "acked", acked)
        # Clients resume the timer path here; the stream's next batch looks back as far.
        settled = slot_of(end_ts) - TIMER_SETTLE_SLOTS
        if settled > p.timer_slot:
            self.lease.advance("timer_slot", settled)
        log.info(
            "queue %s: acked through id %d, ts %d (%d messages, reader pointer %d -> %d)",
            self.queue.name,
            end_id,
            end_ts,
            acked,
            prev,
            max(prev, end_id),
        )
        return acked

    def _id_path_acks(self, lo: int, hi: int, end_ts: int) -> tuple[int, dict[int, int]]:
        """How many plain messages of ``[lo, hi)`` moving the reader pointer acks, and which
        other ones to mark acked (id -> timer slot).

        Plain messages are only counted, by Cassandra; only rows that were delayed or
        delivered to a client come back, so the driver's work follows those, not the batch
        size (finding F17).
        """
        plain = 0
        to_mark: dict[int, int] = {}
        if hi <= lo:
            return plain, to_mark
        for glo, ghi in _gaps(lo, hi, self.excluded(lo, hi)):
            for bucket, blo, bhi in split_by_bucket(glo, ghi, self.queue.bucket_size):
                key = (self.queue.queue_id, bucket, blo, bhi)
                total = self.conn.execute_async(_COUNT, key)
                special: dict[int, Any] = {}  # driver rows
                for cond, extra in _NOT_PLAIN:
                    for row in self.conn.execute(_SPECIAL % cond, (*key, *extra)):
                        special[row.id] = row
                plain += total.result().one().n - len(special)
                for row in special.values():
                    if row.acked or row.dead:
                        continue
                    if due_ms(row) <= end_ts and unchanged_since(row, end_ts):
                        to_mark[row.id] = slot_of(due_ms(row))
        return plain, to_mark

    def _mark_acked(self, ids: Sequence[int]) -> None:
        stmt = self.conn.prepare(
            "UPDATE {ks}.messages SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
        )
        futures = []
        for mid in ids:
            futures.append(
                self.conn.execute_async(
                    stmt, (self.queue.queue_id, bucket_of(mid, self.queue.bucket_size), mid)
                )
            )
            if len(futures) >= READ_WINDOW:
                futures.pop(0).result()
        for f in futures:
            f.result()
