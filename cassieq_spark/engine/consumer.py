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
from dataclasses import dataclass, field

from ..errors import QueueBusyError, StaleReceiptError
from . import clock, monoton, pointers, timers
from .buckets import bucket_of
from .clock import TIMER_SETTLE_SLOTS, from_epoch, timer_slot, to_epoch
from .messages import Message, read_one, read_range
from .queues import QueueInfo
from .receipts import PopReceipt
from .session import Connection

log = logging.getLogger(__name__)

SCAN_FIRST_CHUNK = 32  # enough for a few racing consumers; grows over stretches handed off
# A get looks at most this far ahead of the reader for reservations, so its cost does not
# grow with the backlog.
HORIZON_WINDOW = 4096
SCAN_CHUNK = 1024
CANDIDATE_SPREAD = 8  # consumers pick among the first few candidates to race less
POINTER_MOVE_INTERVAL = 0.5  # seconds between reader-pointer moves by one client
CONTENDED_SECONDS = 1.0  # after a lost claim, a client spreads its first try for this long
# What scans need to decide; payloads are fetched only for the one message claimed, so a scan
# costs the same for 1 MiB payloads as for 10-byte ones.
SCAN_COLUMNS = "id, visible_at, version, deliveries, invisible_until, acked, dead"
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
    # The last horizon and the skipped ranges read with it. Ids below ``horizon.safe_end`` stay
    # safe for good (new reservations only start at or above ``next_id``, closed ones never
    # reopen), so the horizon is re-read only when a scan reaches its end.
    horizon: monoton.Horizon | None = None
    skipped: list[tuple[int, int]] = field(default_factory=list)
    lost_race_at: float = 0.0


class Consumer:
    """Stateful per client: caches the reader position so moves can be throttled."""

    def __init__(self, conn: Connection, counters):
        self.conn = conn
        self.counters = counters
        self._readers: dict = {}
        self._skip_cache: dict = {}
        # queue_id -> {slot: ids found acked or dead}: final states, never worth re-reading
        # while their slot stays in the invisibility pointer's settle window.
        self._finished: dict = {}
        self._marked: set = set()

    # -- delivery ---------------------------------------------------------------------------

    def get(self, queue: QueueInfo, visibility_timeout: float, put_dead_letter) -> Message | None:
        now = clock.now()
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
        self._schedule(queue, due, row.id)
        # The body is read alongside the claim (one round trip less); wasted only on a lost race.
        body_future = self.conn.execute_async(
            "SELECT payload, headers, enqueued_at FROM {ks}.messages "
            "WHERE queue_id = ? AND bucket = ? AND id = ?",
            (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id),
        )
        key = (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id)
        res = self.conn.cas(
            _CLAIM,
            (version, deliveries, from_epoch(due), *key, row.version),
            read="SELECT version, invisible_until FROM {ks}.messages "
            "WHERE queue_id = ? AND bucket = ? AND id = ?",
            read_params=key,
            applied=lambda cur: _holds(cur, version, due),
        )
        body = body_future.result().one()
        if not res.was_applied:
            return None
        return Message(
            id=row.id,
            payload=(body.payload if body else None) or b"",
            headers=dict((body.headers if body else None) or {}),
            pop_receipt=PopReceipt(queue.queue_id, row.id, version).encode(),
            delivery_count=deliveries,
            enqueued_at=body.enqueued_at if body else None,
        )

    def _schedule(self, queue: QueueInfo, due: float, message_id: int) -> None:
        """Write the timer; the slot's "not empty" marker only once per slot and client (the
        marker is the same row every time, and deliveries fill a slot with many timers)."""
        timer, marker = timers.statements(self.conn, queue, due, message_id)
        key = (queue.queue_id, timer_slot(due))
        futures = [self.conn.execute_async(timer)]
        if key not in self._marked:
            futures.append(self.conn.execute_async(marker))
        for f in futures:
            f.result()
        if len(self._marked) > 4096:
            self._marked.clear()
        self._marked.add(key)

    def _from_timers(self, queue, ptrs, now, vt, put_dead_letter) -> Message | None:
        now_slot = timer_slot(now)
        resolved_to = ptrs.timer_slot
        contiguous = True
        finished = self._finished.setdefault(queue.queue_id, {})
        for old in [s for s in finished if s < ptrs.timer_slot]:
            del finished[old]
        for slot in timers.due_slots(self.conn, queue, ptrs.timer_slot, now_slot):
            slot_resolved = True
            done = finished.setdefault(slot, set())
            ids = [mid for mid in timers.ids_in_slot(self.conn, queue, slot) if mid not in done]
            for row in _read_many(self.conn, queue, ids):
                if row.acked or row.dead:
                    done.add(row.id)
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
            body = read_one(self.conn, queue, row.id, "payload, headers")
            headers = dict((body.headers if body else None) or {})
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
                (body.payload if body else None) or b"",
                headers,
                f"dlq:{queue.queue_id}:{row.id}",
            )
        key = (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id)
        res = self.conn.cas(
            "UPDATE {ks}.messages SET dead = true WHERE queue_id = ? AND bucket = ? AND id = ? "
            "IF version = ? AND acked = null AND dead = null",
            (*key, row.version),
            read="SELECT dead FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
            read_params=key,
            applied=lambda cur: cur is not None and bool(cur.dead),
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
            if (lo, hi) not in known and record_skipped(self.conn, queue, lo, hi):
                known.add((lo, hi))
        return sorted(known)

    def _from_reader(self, queue: QueueInfo, ptrs, now: float, vt: float) -> Message | None:
        cache = self._readers.setdefault(queue.queue_id, _ReaderCache())
        cached = (
            cache.horizon is not None and max(cache.position, ptrs.reader) < cache.horizon.safe_end
        )
        result = self._scan(queue, cache, ptrs, now, vt, refresh=False)
        if result is None and cached:
            # The cached horizon ran out: messages may have arrived beyond it.
            result = self._scan(queue, cache, ptrs, now, vt, refresh=True)
        return result

    def _scan(
        self, queue: QueueInfo, cache: _ReaderCache, ptrs, now: float, vt: float, refresh: bool
    ) -> Message | None:
        start = max(cache.position, ptrs.reader)
        if not refresh and cache.horizon is not None and start < cache.horizon.safe_end:
            horizon, skipped = cache.horizon, cache.skipped
        else:
            horizon = monoton.horizon(self.conn, queue, start, now, window=HORIZON_WINDOW)
            skipped = (
                self._skipped_ranges(queue, start, horizon)
                if horizon.abandoned or start < horizon.safe_end
                else []
            )
            cache.horizon, cache.skipped = horizon, skipped
        pos = start
        passable_to = start  # every id below this needs nothing more from the reader
        result = None
        chunk = SCAN_FIRST_CHUNK
        while pos < horizon.safe_end:
            end = min(horizon.safe_end, pos + chunk)
            chunk = min(chunk * 2, SCAN_CHUNK)
            candidates = [
                row
                for row in read_range(self.conn, queue, pos, end, SCAN_COLUMNS)
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
            # A client that lost a race lately spreads even its first try.
            order = candidates[:CANDIDATE_SPREAD]
            if now - cache.lost_race_at < CONTENDED_SECONDS:
                random.shuffle(order)
            else:
                rest = order[1:]
                random.shuffle(rest)
                order = [order[0], *rest]
            for row in [*order, *candidates[CANDIDATE_SPREAD:]]:
                result = self._claim(queue, row, now, vt)
                if result is not None:
                    if row is candidates[0]:
                        passable_to = candidates[1].id if len(candidates) > 1 else end
                    break
                cache.lost_race_at = now
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
        write = self.conn.execute_async(
            "UPDATE {ks}.messages SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?",
            (queue.queue_id, bucket_of(r.message_id, queue.bucket_size), r.message_id),
        )
        self.counters.add(queue, "acked", 1)
        write.result()
        return True

    def change_visibility(self, queue: QueueInfo, receipt: str, timeout: float) -> str:
        r = PopReceipt.decode(receipt)
        stale = StaleReceiptError(
            f"pop receipt for message {r.message_id} of queue {queue.name!r} is stale: the message "
            "was acked or redelivered since; get it again"
        )
        if r.queue_id != queue.queue_id:
            raise stale
        now = clock.now()
        due = now + timeout
        timers.schedule(self.conn, queue, due, r.message_id)
        key = (queue.queue_id, bucket_of(r.message_id, queue.bucket_size), r.message_id)
        res = self.conn.cas(
            "UPDATE {ks}.messages SET version = ?, invisible_until = ? WHERE queue_id = ? AND bucket = ? "
            "AND id = ? IF version = ? AND acked = null AND dead = null",
            (r.version + 1, from_epoch(due), *key, r.version),
            read="SELECT version, invisible_until FROM {ks}.messages "
            "WHERE queue_id = ? AND bucket = ? AND id = ?",
            read_params=key,
            applied=lambda cur: _holds(cur, r.version + 1, due),
        )
        if not res.was_applied:
            raise stale
        return PopReceipt(queue.queue_id, r.message_id, r.version + 1).encode()


def _holds(row, version: int, due: float) -> bool:
    """After a lost reply: is this delivery (``version``, due at ``due``) the one stored?"""
    return (
        row is not None
        and row.version == version
        and abs(to_epoch(row.invisible_until) - due) < 0.002  # stored with ms precision
    )


def _read_many(conn: Connection, queue: QueueInfo, ids: list[int]) -> list:
    """The scan columns of ``ids`` (missing rows left out), read concurrently, in id order."""
    stmt = conn.prepare(
        f"SELECT {SCAN_COLUMNS} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    futures = [
        conn.execute_async(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
        for mid in sorted(ids)
    ]
    return [row for f in futures for row in f.result()]


def record_skipped(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> bool:
    """Hand an abandoned reservation to repair before readers pass it.

    Returns False when its writer closed it first: then the block is complete and must be
    read as usual. Idempotent: recording a range again keeps its first ``skipped_at``.
    """
    if not monoton.skip(conn, queue, lo, hi):
        return False
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
