"""Acking a committed stream batch: what it delivered, nothing else.

Plain messages (never delayed, never delivered to a client) are acked by the reader pointer
moving past them: one fenced compare-and-set per batch, no per-message write. How many there
were, and which other messages the id path delivered, comes from the tallies the batch's tasks
recorded (``tally.py``: one read for the whole batch); only the parts of the id path no tally
covers are scanned, where Cassandra counts the rows and returns only those that were delayed or
delivered to a client. So the driver's work, and Cassandra's, follows those messages, not the
batch size. Each of those, and each timer-path delivery, gets ``acked = true``.

A row counts as delivered when it passes the reading rule (``read.py``) *and* its
delivery state (``invisible_until``, written only by compare-and-sets, hence stamped with
Cassandra's clock) was written before the batch's time, which comes from Cassandra's clock too:
then the reader saw that very state. A row a client changed since is not acked; it comes again
(at least once), never lost.

**A stream that started above the reader pointer** (``start.py``: ``latest``, an id,
a time) must not move the pointer over the messages below its start, which it never
delivered. While the pointer lies below a batch's id path ``[from, end)``, the ack marks each
message that path delivered ``acked = true`` instead (a plain write each, no Paxos) and leaves
the pointer alone; clients move it over acked rows by themselves later.

**A pointer move that did not apply** (its compare-and-set timed out and the read settling it
showed it had not applied, as with a coordinator cut off by the network) leaves the pointer
below the next batch's id path. Those ids were this run's, though: while a run's acks have
meant to move the pointer through ``[low, high)``, a pointer found inside that span is moved by
the next ack over the ids between as well, which it scans like any range no tally covers. So
a missed move costs one batch of delay, never an ack (a run that dies before its next ack
leaves those ids to clients and other queries, at least once).

Every write here is fenced by the consumer lease (``lease.py``): the pointer moves are
compare-and-sets conditioned on it, and the lease is renewed right before the plain writes.
An ``acked`` cell on a queue with a message TTL carries what is left of the message's own, so
it expires with the message.

The queue's ``acked`` counter counts what the batch delivered: the plain rows Cassandra
counts, less every row that is not plain, and those of the others that the ack marks. Rows
marked dead (moved to the dead-letter queue by the stream's delivery count, rolled back by a
writer) are not plain: they were not delivered, so they are not counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..core import clock, pointers
from ..core.buckets import bucket_of, split_by_bucket
from ..core.clock import TIMER_SETTLE_SLOTS, from_epoch
from ..core.counters import Counters
from ..core.messages import read_range, remaining_ttl
from ..core.queues import QueueInfo
from ..store.session import Connection
from . import tally
from .lease import Lease
from .read import (
    READ_WINDOW,
    STATE_COLUMNS,
    due_ms,
    id_path_delivers,
    is_message,
    read_rows_by_id,
    skipped_overlapping,
    slot_of,
    timer_path_delivers,
    unchanged_since,
)
from .timer_path import TimerCandidates

log = logging.getLogger(__name__)

# One scan (a count and two filtered reads) covers up to this many consecutive buckets and ids,
# so a batch costs the driver the same few statements up to there, and each statement stays
# far below the request timeout whatever the batch size.
SCAN_MAX_BUCKETS = 100
SCAN_MAX_IDS = 100_000
SCANS_IN_FLIGHT = 8

_RANGE = "FROM {ks}.messages WHERE queue_id = ? AND bucket IN ? AND id >= ? AND id < ?"
_COUNT = "SELECT COUNT(*) AS n " + _RANGE
# Rows that are not plain: delivered to a client (a version) or delayed (visible_at), acked
# already (a stream that started above the reader pointer acks one by one; such rows are not
# counted again), or dead (moved or rolled back: never delivered). The filter runs inside one
# partition slice, on the replicas.
_SPECIAL = "SELECT " + STATE_COLUMNS + " " + _RANGE + " AND %s ALLOW FILTERING"
_NOT_PLAIN = (
    ("version > 0", ()),
    ("visible_at > ?", (from_epoch(0),)),
    ("acked = ?", (True,)),
    ("dead = ?", (True,)),
)


def uncovered(lo: int, hi: int, excluded: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
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


def scan_ranges(
    lo: int, hi: int, excluded: Sequence[tuple[int, int]], bucket_size: int
) -> list[tuple[list[int], int, int]]:
    """``[lo, hi)`` outside the ``excluded`` ranges as scans ``(buckets, slo, shi)``: runs of
    consecutive buckets within one gap. ``id >= slo AND id < shi`` clips every bucket of a run
    to the gap, since a bucket holds only ids of its own span."""
    out: list[tuple[list[int], int, int]] = []
    for glo, ghi in uncovered(lo, hi, excluded):
        buckets: list[int] = []
        slo = shi = glo
        for bucket, blo, bhi in split_by_bucket(glo, ghi, bucket_size):
            if buckets and (len(buckets) >= SCAN_MAX_BUCKETS or bhi - slo > SCAN_MAX_IDS):
                out.append((buckets, slo, shi))
                buckets, slo = [], blo
            buckets.append(bucket)
            shi = bhi
        if buckets:
            out.append((buckets, slo, shi))
    return out


class BatchAck:
    """Acks committed batches of one stream run (see the module's docstring)."""

    def __init__(
        self,
        conn: Connection,
        queue: QueueInfo,
        lease: Lease,
        candidates: TimerCandidates,
        run: str = "",
    ):
        self.conn = conn
        self.queue = queue
        self.lease = lease
        self.candidates = candidates
        self.run = run  # the run whose tasks' tallies the acks use ("": none, scan)
        # [low, high): the ids this run's acks have meant to move the reader pointer over, one
        # batch after the other (None before its first such ack).
        self._meant: tuple[int, int] | None = None

    def ack(
        self, end_id: int, end_ts: int, scan_from: int | None = None, from_id: int | None = None
    ) -> int:
        """Ack what the committed batch ending at ``(end_id, end_ts)`` delivered. Idempotent.

        ``scan_from``: the first timer slot its timer path looked at, when known (else the
        invisibility pointer, which the previous ack left there). ``from_id``: where the
        batch's id path started; a reader pointer below it is not moved (the ids between are
        not this stream's). Returns how many were acked.
        """
        p = pointers.read(self.conn, self.queue)
        prev = p.reader
        lo = prev if from_id is None else from_id  # where the batch's id path started
        # May the pointer move over [prev, end_id)? Yes when the batch started at or below it,
        # or when an earlier ack of this run meant to move it past ``prev`` and did not.
        own = prev >= lo or (
            self._meant is not None and self._meant[0] <= prev and lo <= self._meant[1]
        )
        ttls: dict[int, int] = {}  # id -> TTL of its ack (what is left of the message's)
        if own:
            plain, to_mark = self._id_path_acks(lo, prev, end_id, end_ts, ttls)
            below = min(prev, end_id)
        else:
            plain, to_mark = 0, self._delivered_in(min(lo, end_id), end_id, end_ts, ttls)
            below = min(lo, end_id)
        lo_slot = p.timer_slot if scan_from is None else scan_from
        rows = list(self.candidates.rows(below, lo_slot, slot_of(end_ts)))
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
                    ttls[row.id] = self._ttl(row)
        if to_mark:
            self.lease.renew()  # the fence for the plain writes below
            self._mark_acked(sorted(to_mark), ttls)
            self.candidates.finished(to_mark)
        moved = own and end_id > prev and self.lease.advance("reader", end_id)
        if own:
            low = prev if self._meant is None else min(self._meant[0], prev)
            self._meant = (low, max(end_id, self._meant[1] if self._meant else end_id))
            if end_id > prev and not moved:
                log.warning(
                    "queue %s: the reader pointer did not move %d -> %d; the next ack moves it",
                    self.queue.name,
                    prev,
                    end_id,
                )
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
            max(prev, end_id) if own else prev,
        )
        return acked

    def _ttl(self, row) -> int:
        return remaining_ttl(row, self.queue, clock.now())

    def _id_path_acks(
        self, from_id: int, lo: int, hi: int, end_ts: int, ttls: dict[int, int]
    ) -> tuple[int, dict[int, int]]:
        """How many plain messages of ``[lo, hi)`` moving the reader pointer acks, and which
        other ones to mark acked (id -> timer slot; their acks' TTLs go to ``ttls``).

        The tallies of the batch (id path from ``from_id``) give both for the ranges they
        cover, with one read; the rest is scanned: Cassandra counts the rows and filters out
        the plain ones, a run of buckets per statement, so the driver receives only the rows
        that were delayed or delivered to a client."""
        plain = 0
        to_mark: dict[int, int] = {}
        if hi <= lo:
            return plain, to_mark
        special: dict[int, Any] = {}  # driver rows
        gaps = [(lo, hi)]
        if self.run:
            found = tally.read_tallies(
                self.conn, self.queue.queue_id, self.run, end_ts, from_id, hi
            )
            used, gaps = tally.cover(lo, hi, found)
            plain += sum(t.plain for t in used)
            others = tally.others_of(used)
            if others:
                for row in read_rows_by_id(self.conn, self.queue, others, STATE_COLUMNS):
                    special[row.id] = row
        if gaps:
            plain += self._scan_gaps(gaps, special)
        for row in special.values():
            if row.acked or row.dead or not is_message(row):
                continue
            if due_ms(row) <= end_ts and unchanged_since(row, end_ts):
                to_mark[row.id] = slot_of(due_ms(row))
                ttls[row.id] = self._ttl(row)
        return plain, to_mark

    def _scan_gaps(self, gaps: Sequence[tuple[int, int]], special: dict[int, Any]) -> int:
        """The plain rows of ``gaps`` (Cassandra counts them); the others go to ``special``."""
        excluded = skipped_overlapping(self.conn, self.queue, gaps[0][0], gaps[-1][1])
        scans = [
            scan
            for glo, ghi in gaps
            for scan in scan_ranges(glo, ghi, excluded, self.queue.bucket_size)
        ]
        counted = 0
        found: dict[int, Any] = {}
        for i in range(0, len(scans), SCANS_IN_FLIGHT):
            counts, filtered = [], []
            for buckets, slo, shi in scans[i : i + SCANS_IN_FLIGHT]:
                key = (self.queue.queue_id, buckets, slo, shi)
                counts.append(self.conn.execute_async(_COUNT, key))
                for cond, extra in _NOT_PLAIN:
                    filtered.append(self.conn.execute_async(_SPECIAL % cond, (*key, *extra)))
            for f in filtered:
                for row in f.result():
                    found[row.id] = row
            counted += sum(f.result().one().n for f in counts)
        special.update(found)
        return counted - len(found)

    def _delivered_in(self, lo: int, hi: int, end_ts: int, ttls: dict[int, int]) -> dict[int, int]:
        """Every message the id path ``[lo, hi)`` of a batch at ``end_ts`` delivered (id ->
        timer slot), plain ones included: the ack of a stream that may not move the pointer."""
        out: dict[int, int] = {}
        if hi <= lo:
            return out
        excluded = skipped_overlapping(self.conn, self.queue, lo, hi)
        for row in read_range(self.conn, self.queue, lo, hi, STATE_COLUMNS):
            if id_path_delivers(row, end_ts, excluded) and unchanged_since(row, end_ts):
                out[row.id] = slot_of(due_ms(row))
                ttls[row.id] = self._ttl(row)
        return out

    def _mark_acked(self, ids: Sequence[int], ttls: dict[int, int]) -> None:
        stmt = self.conn.prepare(
            "UPDATE {ks}.messages USING TTL ? SET acked = true "
            "WHERE queue_id = ? AND bucket = ? AND id = ?"
        )
        futures = []
        for mid in ids:
            key = (self.queue.queue_id, bucket_of(mid, self.queue.bucket_size), mid)
            futures.append(self.conn.execute_async(stmt, (ttls.get(mid, 0), *key)))
            if len(futures) >= READ_WINDOW:
                futures.pop(0).result()
        for f in futures:
            f.result()
