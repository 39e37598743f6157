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

A get's cost is bounded whatever the backlog: see ``timer_path.py`` for the timers;
on the reader path a get tries a few candidates, then reads the stretch afresh rather than
try each candidate it read (each lost claim costs a Paxos round and leaves a timer behind).
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass

from cassandra.query import UNSET_VALUE, BatchStatement, BatchType

from ...errors import StaleReceiptError
from ..core import clock, monoton, pointers, timers
from ..core.buckets import bucket_of
from ..core.clock import from_epoch, timer_slot, to_epoch
from ..core.messages import Message, is_expired, read_one, read_range, remaining_ttl
from ..core.queues import QueueInfo
from ..core.receipts import PopReceipt
from ..store import faults
from ..store.session import Connection
from ..stream.lease import stream_busy
from ..upkeep.deadletter import HEADER_DELIVERY_COUNT, HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE
from ..upkeep.ranges import record_skipped
from .timer_path import CONTENDED_SECONDS, MAX_LOST_CLAIMS, ROW, SCAN_COLUMNS, TimerPath

__all__ = [
    "HEADER_DELIVERY_COUNT",
    "HEADER_ORIGIN_ID",
    "HEADER_ORIGIN_QUEUE",
    "Consumer",
]

log = logging.getLogger(__name__)

SCAN_FIRST_CHUNK = 32  # enough for a few racing consumers; grows over stretches handed off
# A get looks at most this far ahead of the reader for reservations, so its cost does not
# grow with the backlog.
HORIZON_WINDOW = 4096
SCAN_CHUNK = 1024
CANDIDATE_SPREAD = 8  # consumers pick among the first few candidates to race less
POINTER_MOVE_INTERVAL = 0.5  # seconds between reader-pointer moves by one client
SCAN_ROUNDS = 4  # reader path: fresh reads of a contended stretch per get

# Cells written after the insert carry what is left of the message's TTL.
# ``claimed_by`` names this claim, so that a read after a lost reply tells it from another
# consumer's claim of the same version (their due times may fall in the same millisecond).
_CLAIM = (
    "UPDATE {ks}.messages USING TTL ? "
    "SET version = ?, deliveries = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null"
)
# The fence's give-back (see ``Consumer.give_back``): as a change of visibility to "now" of
# the claim just made, with the delivery count put back.
GIVE_BACK = (
    "UPDATE {ks}.messages USING TTL ? "
    "SET version = ?, deliveries = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ?"
)
_GIVE_BACK_TEXT = f"BEGIN BATCH {GIVE_BACK}; ... APPLY BATCH"


@dataclass
class ReaderCache:
    """What one client knows of a queue's reader pointer between its (throttled) moves."""

    position: int = 0
    moved_at: float = 0.0
    # The last horizon and the skipped ranges read with it, one tuple so that a thread never
    # pairs one horizon with another read's ranges. Ids below ``horizon.safe_end`` stay safe
    # for good (new reservations only start at or above ``next_id``, closed ones never
    # reopen), so the horizon is re-read only when a scan reaches its end.
    view: tuple[monoton.Horizon, list[tuple[int, int]]] | None = None
    lost_race_at: float = 0.0


class Consumer:
    """Stateful per client: caches the reader position so moves can be throttled."""

    def __init__(self, conn: Connection, counters):
        self.conn = conn
        self.counters = counters
        self.readers: dict = {}
        self.timers = TimerPath(conn, counters)
        self._marked: set = set()

    # -- delivery ---------------------------------------------------------------------------

    def get(self, queue: QueueInfo, visibility_timeout: float) -> Message | None:
        now = clock.now()
        ptrs = pointers.read(self.conn, queue)
        busy = stream_busy(queue, ptrs, now)
        if busy is not None:
            raise busy
        msg = self.timers.next(queue, ptrs, now, visibility_timeout, self.claim)
        if msg is None:
            msg = self._from_reader(queue, ptrs, now, visibility_timeout)
        return msg

    def claim(self, queue: QueueInfo, row, now: float, vt: float) -> Message | None:
        version = (row.version or 0) + 1
        deliveries = (row.deliveries or 0) + 1
        due = now + vt
        # The timer goes first: if we die right after the claim, the message still comes back.
        self._schedule(queue, due, row.id, now)
        key = (queue.queue_id, bucket_of(row.id, queue.bucket_size), row.id)
        # The body is read alongside the claim (one round trip less); wasted only on a lost race.
        body_future = self.conn.execute_async(ROW.format(cols="payload, headers, enqueued_at"), key)
        faults.point("consumer.before_claim", queue=queue, row=row, now=now)
        token = uuid.uuid4().hex[:16]
        res = self.conn.cas(
            _CLAIM,
            (
                remaining_ttl(row, queue, now),
                version,
                deliveries,
                from_epoch(due),
                token,
                *key,
                row.version,
            ),
            read=ROW.format(cols="version, claimed_by"),
            read_params=key,
            applied=lambda cur: (
                cur is not None and cur.version == version and cur.claimed_by == token
            ),
        )
        body = body_future.result().one()
        if not res.was_applied:
            return None
        self._fence(queue, row, version)
        self.timers.delivered(queue, row.id, version, due)
        if body is None or body.enqueued_at is None:
            return None  # its TTL ran out meanwhile: the claim's cells expire with it
        return Message(
            id=row.id,
            payload=body.payload or b"",
            headers=dict(body.headers or {}),
            pop_receipt=PopReceipt(queue.queue_id, row.id, version).encode(),
            delivery_count=deliveries,
            enqueued_at=body.enqueued_at,
        )

    def _fence(self, queue: QueueInfo, row, version: int) -> None:
        """The lease check in :meth:`get` and the claim are two steps: a
        streaming query that took the lease in between may have planned this message. Look
        again after the claim; if a stream holds the lease, give the message back to it
        (:meth:`give_back`) and refuse, so that it is never in flight with the client and
        the stream at once.

        A stream that takes the lease after this read sees the message claimed: a delivery
        due after the visibility timeout, which its timer path delivers then."""
        now = clock.now()
        busy = stream_busy(queue, pointers.read(self.conn, queue), now)
        if busy is None:
            return
        self.give_back(queue, [row], version, now)
        log.warning(
            "queue %s: a streaming query took the lease during this get; message %d given back",
            queue.name,
            row.id,
        )
        raise busy

    def give_back(self, queue: QueueInfo, rows: list, version: int, now: float) -> None:
        """Hand ``rows`` (scanned rows of one bucket, each just claimed at ``version`` by this
        client, whose receipts nobody has seen) to the stream that took the lease: each
        becomes a redelivery due ``now``, with a timer in ``slot(now)`` and its delivery count
        as before the claim (nobody got the message).

        Never back to its state before the claim: the stream may have read the row while it
        was claimed (not due, so not delivered), and its ack then counts a fresh row below
        its reader pointer as consumed, or, for a redelivery, finds its old due time before
        its timer window: the message would be acked unread or stranded. A due redelivery
        written now is found by the stream's timer path in a later batch, and no ack passes
        it unread: the ack takes only rows whose state was written before the batch's time.
        If the stream read the row before the claim, it delivers it again (at least once).

        The timers go first (a crash right after the change still brings the messages back).
        The rows of one bucket are changed by one conditional batch (one Paxos round); if it
        does not apply (a row changed meanwhile, e.g. its TTL ran out), one compare-and-set
        each. A row that cannot be given back stays claimed and comes back when its
        visibility timeout ends."""
        if not rows:
            return
        bucket = bucket_of(rows[0].id, queue.bucket_size)
        stmts = timers.many_statements(self.conn, queue, [(now, r.id) for r in rows], now)
        for f in [self.conn.execute_async(s) for s in stmts]:
            f.result()
        token = uuid.uuid4().hex[:16]
        keys = [(queue.queue_id, bucket, r.id) for r in rows]
        params = [
            (remaining_ttl(r, queue, now), version + 1, r.deliveries, from_epoch(now), token)
            + key
            + (version,)
            for r, key in zip(rows, keys, strict=True)
        ]

        def given_back(cur) -> bool:
            return cur is not None and cur.version == version + 1 and cur.claimed_by == token

        read = ROW.format(cols="version, claimed_by")
        if len(rows) > 1:
            batch = BatchStatement(batch_type=BatchType.LOGGED)
            stmt = self.conn.prepare(GIVE_BACK)
            for p in params:
                batch.add(stmt, p)
            batch.query_string = _GIVE_BACK_TEXT
            res = self.conn.cas(batch, (), read=read, read_params=keys[0], applied=given_back)
            if res.was_applied:
                return
        for p, key in zip(params, keys, strict=True):
            self.conn.cas(GIVE_BACK, p, read=read, read_params=key, applied=given_back)

    def _schedule(self, queue: QueueInfo, due: float, message_id: int, now: float) -> None:
        """Write the timer; the slot's "not empty" marker only once per slot and client (the
        marker is the same row every time, and deliveries fill a slot with many timers)."""
        timer, marker = timers.statements(self.conn, queue, due, message_id, now)
        key = (queue.queue_id, timer_slot(due))
        futures = [self.conn.execute_async(timer)]
        if key not in self._marked:
            futures.append(self.conn.execute_async(marker))
        for f in futures:
            f.result()
        if len(self._marked) > 4096:
            self._marked.clear()
        self._marked.add(key)

    def skipped_ranges(
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
        cache = self.readers.setdefault(queue.queue_id, ReaderCache())
        view = cache.view
        cached = view is not None and max(cache.position, ptrs.reader) < view[0].safe_end
        result = self._scan(queue, cache, ptrs, now, vt, refresh=False)
        if result is None and cached:
            # The cached horizon ran out: messages may have arrived beyond it.
            result = self._scan(queue, cache, ptrs, now, vt, refresh=True)
        return result

    def _scan(
        self, queue: QueueInfo, cache: ReaderCache, ptrs, now: float, vt: float, refresh: bool
    ) -> Message | None:
        start = max(cache.position, ptrs.reader)
        view = cache.view
        if not refresh and view is not None and start < view[0].safe_end:
            horizon, skipped = view
        else:
            horizon = monoton.horizon(self.conn, queue, start, now, window=HORIZON_WINDOW)
            skipped = (
                self.skipped_ranges(queue, start, horizon)
                if horizon.abandoned or start < horizon.safe_end
                else []
            )
            cache.view = (horizon, skipped)
        pos = start
        passable_to = start  # every id below this needs nothing more from the reader
        result = None
        chunk = SCAN_FIRST_CHUNK
        rounds = 0
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
                    or is_expired(row, queue, now)
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
            for row in order[:MAX_LOST_CLAIMS]:
                result = self.claim(queue, row, now, vt)
                if result is not None:
                    if row is candidates[0]:
                        passable_to = candidates[1].id if len(candidates) > 1 else end
                    break
                cache.lost_race_at = now
            rounds += 1
            if result is None and rounds < SCAN_ROUNDS:
                # The candidates read are stale (others claim them): read the stretch afresh
                # rather than try each with a Paxos round and an orphan timer.
                chunk = SCAN_FIRST_CHUNK
                continue
            break  # the pointer cannot move past an undelivered message anyway
        # Under load the move is throttled; an idle reader persists where it got to at once.
        self.move_reader(queue, cache, ptrs.reader, passable_to, now, force=result is None)
        return result

    def move_reader(
        self, queue: QueueInfo, cache: ReaderCache, stored: int, to: int, now: float, force: bool
    ) -> None:
        cache.position = max(cache.position, to)
        if to > stored and (force or now - cache.moved_at >= POINTER_MOVE_INTERVAL):
            cache.moved_at = now
            pointers.advance(self.conn, queue, "reader", to)

    # -- acknowledgement ------------------------------------------------------------------------

    def ack(self, queue: QueueInfo, receipt: str) -> bool:
        """A plain write after a read of the version, not a compare-and-set (a Paxos round per
        message): a receipt that goes stale between the two (its message redelivered to
        another consumer in that instant) still acks. Nothing is lost by that, the old holder
        has processed the message; the new holder's ack then returns False. Two acks of one
        receipt at once may both count."""
        r = PopReceipt.decode(receipt)
        r.check_queue(queue.queue_id, queue.name, receipt)
        row = read_one(self.conn, queue, r.message_id, "version, acked, dead, enqueued_at")
        if row is None or row.acked or row.dead or row.version != r.version:
            return False
        write = self.conn.execute_async(
            "UPDATE {ks}.messages USING TTL ? SET acked = true "
            "WHERE queue_id = ? AND bucket = ? AND id = ?",
            (
                remaining_ttl(row, queue, clock.now()),
                queue.queue_id,
                bucket_of(r.message_id, queue.bucket_size),
                r.message_id,
            ),
        )
        self.counters.add(queue, "acked", 1)
        write.result()
        self.timers.acked(queue, r.message_id, r.version)
        return True

    def change_visibility(
        self,
        queue: QueueInfo,
        receipt: str,
        timeout: float,
        deliveries: int | None = None,
        payload: bytes | None = None,
    ) -> str:
        """The receipt's message hidden for ``timeout`` more seconds (0: visible at once); a new
        receipt. ``deliveries`` also sets its delivery count (see :meth:`return_unused`); with
        ``payload``, its body is replaced in the same compare-and-set (the HTTP API's update),
        so the new body and the new receipt come together or not at all."""
        r = PopReceipt.decode(receipt)
        r.check_queue(queue.queue_id, queue.name, receipt)
        stale = StaleReceiptError(
            f"pop receipt for message {r.message_id} of queue {queue.name!r} is stale: the message "
            "was acked or redelivered since; get it again"
        )
        now = clock.now()
        key = (queue.queue_id, bucket_of(r.message_id, queue.bucket_size), r.message_id)
        ttl = 0
        if queue.ttl:
            row = read_one(self.conn, queue, r.message_id, "enqueued_at")
            if row is None or is_expired(row, queue, now):
                raise stale
            ttl = remaining_ttl(row, queue, now)
        due = now + timeout
        timers.schedule(self.conn, queue, due, r.message_id, now)
        token = uuid.uuid4().hex[:16]
        body = "" if payload is None else ", payload = ?"
        res = self.conn.cas(
            "UPDATE {ks}.messages USING TTL ? SET version = ?, invisible_until = ?, claimed_by = ?, "
            "deliveries = ?" + body + " WHERE queue_id = ? AND bucket = ? AND id = ? "
            "IF version = ? AND acked = null AND dead = null",
            (
                ttl,
                r.version + 1,
                from_epoch(due),
                token,
                UNSET_VALUE if deliveries is None else deliveries,
                *(() if payload is None else (payload,)),
                *key,
                r.version,
            ),
            read=ROW.format(cols="version, claimed_by"),
            read_params=key,
            applied=lambda cur: (
                cur is not None and cur.version == r.version + 1 and cur.claimed_by == token
            ),
        )
        if not res.was_applied:
            raise stale
        return PopReceipt(queue.queue_id, r.message_id, r.version + 1).encode()

    def return_unused(self, queue: QueueInfo, message: Message) -> bool:
        """A delivery this client took but did not use (a move the destination refused): the
        message is visible again at once and the delivery is not counted, so giving back never
        brings a message nearer to its dead-letter queue or its drop. False when the receipt
        went stale meanwhile (another consumer has the message now)."""
        assert message.pop_receipt is not None
        try:
            self.change_visibility(
                queue, message.pop_receipt, 0.0, deliveries=max(0, message.delivery_count - 1)
            )
        except StaleReceiptError:
            return False
        self.timers.given_back(queue, message.id)
        return True
