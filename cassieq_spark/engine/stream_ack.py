"""Acking a committed stream batch: what it delivered, nothing else (finding F12).

Plain messages (never delayed, never delivered to a client) are acked by the reader pointer
moving past them: one fenced compare-and-set per batch, no per-message write. Cassandra counts
them; only rows that were delayed or delivered to a client come back to the driver, so its work
follows those, not the batch size (finding F17). Each of those, and each timer-path delivery,
gets ``acked = true``.

A row counts as delivered when it passes the reading rule (``stream_read.py``) *and* its
delivery state (``invisible_until``, written only by compare-and-sets, hence stamped with
Cassandra's clock) was written before the batch's time, which comes from Cassandra's clock too:
then the reader saw that very state. A row a client changed since is not acked; it comes again
(at least once), never lost.

Every write here is fenced by the consumer lease (``lease.py``): the pointer moves are
compare-and-sets conditioned on it, and the lease is renewed right before the plain writes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from . import pointers
from .buckets import bucket_of, split_by_bucket
from .clock import TIMER_SETTLE_SLOTS, from_epoch
from .counters import Counters
from .lease import Lease
from .queues import QueueInfo
from .session import Connection
from .stream_read import (
    READ_WINDOW,
    STATE_COLUMNS,
    due_ms,
    skipped_overlapping,
    slot_of,
    timer_path_delivers,
    unchanged_since,
)
from .stream_timers import TimerCandidates

log = logging.getLogger(__name__)

_RANGE = "FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id >= ? AND id < ?"
_COUNT = "SELECT COUNT(*) AS n " + _RANGE
# Rows that are not plain: delivered to a client (a version) or delayed (visible_at). The
# filter runs inside one partition slice, on the replicas.
_SPECIAL = "SELECT " + STATE_COLUMNS + " " + _RANGE + " AND %s ALLOW FILTERING"
_NOT_PLAIN = (("version > 0", ()), ("visible_at > ?", (from_epoch(0),)))


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


class BatchAck:
    """Acks committed batches of one stream run (see the module's docstring)."""

    def __init__(
        self, conn: Connection, queue: QueueInfo, lease: Lease, candidates: TimerCandidates
    ):
        self.conn = conn
        self.queue = queue
        self.lease = lease
        self.candidates = candidates

    def ack(self, end_id: int, end_ts: int, scan_from: int | None = None) -> int:
        """Ack what the committed batch ending at ``(end_id, end_ts)`` delivered. Idempotent.

        ``scan_from``: the first timer slot its timer path looked at, when known (else the
        invisibility pointer, which the previous ack left there). Returns how many were acked.
        """
        p = pointers.read(self.conn, self.queue)
        prev = p.reader
        plain, to_mark = self._id_path_acks(prev, end_id, end_ts)
        lo_slot = p.timer_slot if scan_from is None else scan_from
        rows = list(self.candidates.rows(min(prev, end_id), lo_slot, slot_of(end_ts)))
        if rows:
            excluded = skipped_overlapping(
                self.conn,
                self.queue,
                min(r.id for r, _ in rows),
                max(r.id for r, _ in rows) + 1,
            )
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
            self.candidates.finished(to_mark)
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
        other ones to mark acked (id -> timer slot)."""
        plain = 0
        to_mark: dict[int, int] = {}
        if hi <= lo:
            return plain, to_mark
        for glo, ghi in _gaps(lo, hi, skipped_overlapping(self.conn, self.queue, lo, hi)):
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
