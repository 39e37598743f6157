"""get / ack / change_visibility for clients outside Spark.

Delivery is a compare-and-set on the message row (one lightweight transaction per *delivered*
message: the only way two consumers can never hold the same message at once without a lock
service). Acks are plain writes checked against the receipt's version, so they cost no Paxos
round. Where a message is looked for:

1. due timers (expired deliveries, delayed messages), from the invisibility pointer up to now;
2. fresh messages from the reader pointer up to the horizon (never past an id that may still be
   in flight).

The reader pointer moves past every message that has been delivered once, is delayed, or lies
in a reservation handed to repair: those come back through timers or repair, so the pointer
never stalls behind them.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field

from ..errors import QueueBusyError, StaleReceiptError
from . import monoton, pointers, timers
from .buckets import bucket_of
from .clock import TIMER_SETTLE_SLOTS, from_epoch, timer_slot, to_epoch
from .messages import COLUMNS, Message, read_one
from .queues import QueueInfo
from .receipts import PopReceipt
from .session import Connection

log = logging.getLogger(__name__)

SCAN_CHUNK = 256
CANDIDATE_SPREAD = 8  # consumers pick among the first few candidates to race less
POINTER_MOVE_INTERVAL = 0.5  # seconds between reader-pointer moves by one client
HEADER_ORIGIN_QUEUE = "cassieq-origin-queue"
HEADER_ORIGIN_ID = "cassieq-origin-id"
HEADER_DELIVERY_COUNT = "cassieq-delivery-count"

_CLAIM = (
    "UPDATE {ks}.messages SET version = ?, deliveries = ?, invisible_until = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null"
)


@dataclass
class _ReaderCache:
    """What one client knows of a queue's reader pointer between its (throttled) moves."""

    position: int = 0
    moved_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Consumer:
    """Stateful per client: caches the reader position so moves can be throttled."""

    def __init__(self, conn: Connection, counters):
        self.conn = conn
        self.counters = counters
        self._readers: dict = {}
        self._skip_cache: dict = {}

    # -- delivery ---------------------------------------------------------------------------

    def get(self, queue: QueueInfo, visibility_timeout: float, put_dead_letter) -> Message | None:
        now = time.time()
        ptrs = pointers.read(self.conn, queue)
        if ptrs.lease_held(now) and (ptrs.lease_owner or "").startswith("stream:"):
            raise QueueBusyError(
                f"queue {queue.name!r} is consumed by streaming query {ptrs.lease_owner[7:]!r} until "
                f"{from_epoch(ptrs.lease_until).isoformat()}Z; stop that query (its lease then expires) "
                "or consume another queue"
            )
        msg = self._from_timers(queue, ptrs, now, visibility_timeout, put_dead_letter)
        if msg is None:
            msg = self._from_reader(queue, ptrs, now, visibility_timeout)
        return msg

    def _claim(self, queue: QueueInfo, row, now: float, vt: float) -> Message | None:
        version = (row.version or 0) + 1
        deliveries = (row.deliveries or 0) + 1
        due = now + vt
        # The timer goes first: if we die right after the claim, the message still comes back.
        timers.schedule(self.conn, queue, due, row.id)
        res = self.conn.execute(
            _CLAIM,
            (
                version,
                deliveries,
                from_epoch(due),
                queue.queue_id,
                bucket_of(row.id, queue.bucket_size),
                row.id,
                row.version,
            ),
        )
        if not res.was_applied:
            return None
        return Message(
            id=row.id,
            payload=row.payload or b"",
            headers=dict(row.headers or {}),
            pop_receipt=PopReceipt(queue.queue_id, row.id, version).encode(),
            delivery_count=deliveries,
            enqueued_at=row.enqueued_at,
        )

    def _from_timers(self, queue, ptrs, now, vt, put_dead_letter) -> Message | None:
        now_slot = timer_slot(now)
        resolved_to = ptrs.timer_slot
        contiguous = True
        for slot in timers.due_slots(self.conn, queue, ptrs.timer_slot, now_slot):
            slot_resolved = True
            for mid in timers.ids_in_slot(self.conn, queue, slot):
                row = read_one(self.conn, queue, mid)
                if row is None or row.acked or row.dead:
                    continue
                due = max(to_epoch(row.visible_at), to_epoch(row.invisible_until))
                if due > now:
                    if timer_slot(due) <= slot:
                        slot_resolved = False  # due later within this very slot
                    continue  # otherwise a later timer owns it
                if row.version is None and to_epoch(row.visible_at) == 0:
                    # never delivered and never delayed: the reader path owns it
                    continue
                if (row.deliveries or 0) >= queue.max_delivery_count:
                    self._dead_letter(queue, row, put_dead_letter)
                    continue
                msg = self._claim(queue, row, now, vt)
                if msg is not None:
                    return msg
            if contiguous and slot_resolved:
                resolved_to = slot + 1
            else:
                contiguous = False
        if contiguous:
            resolved_to = max(resolved_to, now_slot + 1)
        target = min(resolved_to, now_slot - TIMER_SETTLE_SLOTS)
        if target > ptrs.timer_slot:
            pointers.advance(self.conn, queue, "timer_slot", target)
        return None

    def _dead_letter(self, queue: QueueInfo, row, put_dead_letter) -> None:
        """Move a message that was delivered too often to the dead-letter queue (or drop it)."""
        if queue.dead_letter_queue:
            headers = dict(row.headers or {})
            headers.update(
                {
                    HEADER_ORIGIN_QUEUE: queue.name,
                    HEADER_ORIGIN_ID: str(row.id),
                    HEADER_DELIVERY_COUNT: str(row.deliveries or 0),
                }
            )
            # Keyed by the original, so a retry or a racing consumer dead-letters it once.
            put_dead_letter(
                queue.dead_letter_queue,
                row.payload or b"",
                headers,
                f"dlq:{queue.queue_id}:{row.id}",
            )
        res = self.conn.execute(
            "UPDATE {ks}.messages SET dead = true WHERE queue_id = ? AND bucket = ? AND id = ? "
            "IF version = ? AND acked = null AND dead = null",
            (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id, row.version),
        )
        if res.was_applied:
            self.counters.add(queue, "dead_lettered" if queue.dead_letter_queue else "dropped", 1)
            log.info(
                "queue %s: message %d %s after %d deliveries",
                queue.name,
                row.id,
                f"moved to {queue.dead_letter_queue}" if queue.dead_letter_queue else "dropped",
                row.deliveries or 0,
            )

    def _skipped_ranges(
        self, queue: QueueInfo, from_id: int, horizon: monoton.Horizon
    ) -> list[tuple[int, int]]:
        """Reservations handed to repair that overlap the scan; newly abandoned ones are recorded
        *before* the reader pointer can move past them."""
        rows = self.conn.execute(
            "SELECT lo, hi FROM {ks}.skipped WHERE queue_id = ? AND lo >= ?",
            (queue.queue_id, max(0, from_id - monoton.MAX_BLOCK)),
        )
        known = {(r.lo, r.hi) for r in rows}
        for lo, hi in horizon.abandoned:
            if (lo, hi) not in known:
                record_skipped(self.conn, queue, lo, hi)
                known.add((lo, hi))
        return sorted(known)

    def _from_reader(self, queue: QueueInfo, ptrs, now: float, vt: float) -> Message | None:
        cache = self._readers.setdefault(queue.queue_id, _ReaderCache())
        start = max(cache.position, ptrs.reader)
        horizon = monoton.horizon(self.conn, queue, start, now)
        skipped = (
            self._skipped_ranges(queue, start, horizon)
            if horizon.abandoned or start < horizon.safe_end
            else []
        )
        pos = start
        passable_to = start  # every id below this needs nothing more from the reader
        result = None
        while pos < horizon.safe_end:
            end = min(horizon.safe_end, pos + SCAN_CHUNK)
            candidates = [
                row
                for row in _read_chunk(self.conn, queue, pos, end)
                if not (
                    row.acked
                    or row.dead
                    or row.version is not None
                    or to_epoch(row.visible_at) > now
                    or any(lo <= row.id < hi for lo, hi in skipped)
                )
            ]
            if not candidates:
                passable_to = pos = end  # all handed off (or never written: released ids)
                continue
            passable_to = candidates[0].id
            # The oldest first (FIFO for a lone consumer); racing consumers that lose it spread
            # over the next few instead of all fighting for the same one.
            rest = candidates[1:CANDIDATE_SPREAD]
            random.shuffle(rest)
            for row in [candidates[0], *rest, *candidates[CANDIDATE_SPREAD:]]:
                result = self._claim(queue, row, now, vt)
                if result is not None:
                    if row is candidates[0]:
                        passable_to = candidates[1].id if len(candidates) > 1 else end
                    break
            break  # the pointer cannot move past an undelivered message anyway
        # Under load the move is throttled; an idle reader persists where it got to at once.
        self._move_reader(queue, cache, ptrs.reader, passable_to, now, force=result is None)
        return result

    def _move_reader(
        self, queue: QueueInfo, cache: _ReaderCache, stored: int, to: int, now: float, force: bool
    ) -> None:
        cache.position = max(cache.position, to)
        if to > stored and (force or now - cache.moved_at >= POINTER_MOVE_INTERVAL):
            cache.moved_at = now
            pointers.advance(self.conn, queue, "reader", to)

    # -- acknowledgement ------------------------------------------------------------------------

    def ack(self, queue: QueueInfo, receipt: str) -> bool:
        r = PopReceipt.decode(receipt)
        if r.queue_id != queue.queue_id:
            return False
        row = read_one(self.conn, queue, r.message_id, "version, acked, dead")
        if row is None or row.acked or row.dead or row.version != r.version:
            return False
        self.conn.execute(
            "UPDATE {ks}.messages SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?",
            (queue.queue_id, bucket_of(r.message_id, queue.bucket_size), r.message_id),
        )
        self.counters.add(queue, "acked", 1)
        return True

    def change_visibility(self, queue: QueueInfo, receipt: str, timeout: float) -> str:
        r = PopReceipt.decode(receipt)
        stale = StaleReceiptError(
            f"pop receipt for message {r.message_id} of queue {queue.name!r} is stale: the message "
            "was acked or redelivered since; get it again"
        )
        if r.queue_id != queue.queue_id:
            raise stale
        now = time.time()
        due = now + timeout
        timers.schedule(self.conn, queue, due, r.message_id)
        res = self.conn.execute(
            "UPDATE {ks}.messages SET version = ?, invisible_until = ? WHERE queue_id = ? AND bucket = ? "
            "AND id = ? IF version = ? AND acked = null AND dead = null",
            (
                r.version + 1,
                from_epoch(due),
                queue.queue_id,
                bucket_of(r.message_id, queue.bucket_size),
                r.message_id,
                r.version,
            ),
        )
        if not res.was_applied:
            raise stale
        return PopReceipt(queue.queue_id, r.message_id, r.version + 1).encode()


def _read_chunk(conn: Connection, queue: QueueInfo, lo: int, hi: int):
    from .messages import read_range

    return read_range(conn, queue, lo, hi, COLUMNS)


def record_skipped(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> None:
    """Hand an abandoned reservation to repair (idempotent: the first record wins)."""
    conn.execute(
        "INSERT INTO {ks}.skipped (queue_id, lo, hi, skipped_at) VALUES (?, ?, ?, toTimestamp(now())) IF NOT EXISTS",
        (queue.queue_id, lo, hi),
    )
    log.warning(
        "queue %s: reservation of ids %d..%d was not written within the repair timeout; readers pass "
        "it and repair will republish whatever lands there",
        queue.name,
        lo,
        hi,
    )
