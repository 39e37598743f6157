"""get / ack / change_visibility for clients outside Spark.

A get looks, in order, at:

1. due timers (expired deliveries, delayed messages), from the invisibility pointer up to now
   (``timer_path.py``);
2. fresh messages from the reader pointer up to the horizon (``reader.py``: the scan, the
   claim and the pointer move, one message at a time).

Delivery is a compare-and-set on the message row (one lightweight transaction per *delivered*
message: the only way two consumers can never hold the same message at once without a lock
service). Acks are plain writes checked against the receipt's version, so they cost no Paxos
round. A get's cost is bounded whatever the backlog (see both modules).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from cassandra.query import UNSET_VALUE

from ...errors import StaleReceiptError
from ..core import clock, pointers, timers
from ..core.buckets import bucket_of
from ..core.clock import from_epoch
from ..core.messages import Message, is_expired, read_one, remaining_ttl
from ..core.queues import QueueInfo
from ..core.receipts import PopReceipt
from ..store import faults
from ..store.session import Connection
from ..stream.lease import stream_busy
from ..upkeep.deadletter import HEADER_DELIVERY_COUNT, HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE
from .reader import OneAtATime, Reader, outlived
from .timer_path import ROW, TimerPath

# The ack of a grouped message: only while the receipt's delivery holds it.
# ``claimed_by`` takes the ack's token: after a lost reply it tells this ack from another one.
ACK_IF_HELD = (
    "UPDATE {ks}.messages USING TTL ? SET acked = true, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? IF version = ? AND acked = null AND dead = null"
)

__all__ = [
    "HEADER_DELIVERY_COUNT",
    "HEADER_ORIGIN_ID",
    "HEADER_ORIGIN_QUEUE",
    "Consumer",
    "Withheld",
    "outlived",
    "still_held",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Withheld:
    """A claimed message as :meth:`Reader.give_back` needs it: its id, its delivery count
    before the claim, and ``enqueued_at`` (for what is left of its TTL)."""

    id: int
    deliveries: int
    enqueued_at: object


def still_held(
    c: Consumer, queue: QueueInfo, messages: list[Message], started: float, vt: float
) -> list[Message]:
    """``messages`` claimed by a call that started at ``started`` (clock.now()), or none of them
    if the call took so long that their visibility timeout (``started + vt``: every claim of a
    call hides its message from the call's start) has passed by now.

    Such a delivery is over before its caller sees it: another consumer may hold the message
    already (its redelivery, or for a group its next message), so handing it out would let
    two consumers work on it, or on one group, at once. It is given back uncounted, as the
    fence gives back (:meth:`Reader.give_back`: due now, its timer stored in time, its delivery
    count as before the claim): a slow spell never brings a message nearer to its dead-letter
    queue or its drop. A message that cannot be given back (another consumer claimed its
    redelivery already, or the give-back failed) stays with its claim's timer."""
    if not messages or not outlived(started, vt):
        return messages
    log.warning(
        "queue %s: %d message(s) claimed %.1f s ago with a %.1f s visibility timeout reached "
        "this consumer after the timeout (a slow call); not handed out, given back uncounted",
        queue.name,
        len(messages),
        clock.now() - started,
        vt,
    )
    parts: dict[tuple[int, int], list[Withheld]] = {}
    for m in messages:
        assert m.pop_receipt is not None
        version = PopReceipt.decode(m.pop_receipt).version
        part = parts.setdefault((bucket_of(m.id, queue.bucket_size), version), [])
        part.append(Withheld(m.id, max(0, m.delivery_count - 1), m.enqueued_at))
    for (_bucket, version), rows in parts.items():
        try:
            c.reader.give_back(queue, rows, version, clock.now())
        except Exception as exc:  # the claim's own timer still brings them back
            log.warning(
                "queue %s: %d withheld message(s) not given back (%s); they come back when "
                "their visibility timeout ends",
                queue.name,
                len(rows),
                exc,
            )
            continue
        for row in rows:
            c.timers.given_back(queue, row.id)
    return []


class Consumer:
    """One client's consuming side, stateful per client: what it knows of each queue's due
    timers (``timers``) and of its reader pointer (``reader``)."""

    def __init__(self, conn: Connection, counters):
        self.conn = conn
        self.counters = counters
        self.timers = TimerPath(conn, counters)
        self.reader = Reader(conn, self.timers)

    # -- delivery ---------------------------------------------------------------------------

    def get(self, queue: QueueInfo, visibility_timeout: float) -> Message | None:
        """The first due redelivery, else the first fresh message, claimed for
        ``visibility_timeout``. The due slots, the first stretch of the scan and the timer of
        the row this client expects to claim are sent with the read of the pointers (what
        this client saw of them last bounds them from below); the claim then costs the
        compare-and-set (with the body read alongside) and the lease check after it: three
        round trips when nothing is due (docs/internals/protocol.md)."""
        now = clock.now()
        try:
            self.timers.read_ahead(queue, now)
            self.reader.read_ahead(queue, now, visibility_timeout)
            faults.point("consumer.read_ahead", queue=queue, now=now)
            ptrs = pointers.read(self.conn, queue)
            busy = stream_busy(queue, ptrs, now)
            if busy is not None:
                raise busy
            msg = self.timers.next(queue, ptrs, now, visibility_timeout, self.reader.claim)
            if msg is None and not outlived(now, visibility_timeout):
                got = self.reader.take(
                    queue, ptrs, now, visibility_timeout, 1, OneAtATime(self.reader)
                )
                msg = got[0] if got else None
        finally:
            self.timers.drop_ahead(queue)
            self.reader.drop_ahead(queue)
        held = still_held(self, queue, [msg] if msg is not None else [], now, visibility_timeout)
        return held[0] if held else None

    # -- acknowledgement ------------------------------------------------------------------------

    def ack(self, queue: QueueInfo, receipt: str) -> bool:
        """A plain write after a read of the version, not a compare-and-set (a Paxos round per
        message): a receipt that goes stale between the two (its message redelivered to
        another consumer in that instant) still acks. Nothing is lost by that, the old holder
        has processed the message; the new holder's ack then returns False. Two acks of one
        receipt at once may both count.

        A grouped message is acked by a compare-and-set on its receipt's version (one Paxos
        round): a stale receipt's ack would release the group's next message while the new
        holder still processes this one (groups.py)."""
        r = PopReceipt.decode(receipt)
        r.check(queue, receipt)
        row = read_one(self.conn, queue, r.message_id, "version, acked, dead, enqueued_at, grp")
        if row is None or row.acked or row.dead or row.version != r.version:
            return False
        key = (queue.queue_id, bucket_of(r.message_id, queue.bucket_size), r.message_id)
        ttl = remaining_ttl(row, queue, clock.now())
        if row.grp is not None:
            token = uuid.uuid4().hex[:16]
            res = self.conn.cas(
                ACK_IF_HELD,
                (ttl, token, *key, r.version),
                read=ROW.format(cols="acked, claimed_by"),
                read_params=key,
                applied=lambda cur: cur is not None and bool(cur.acked) and cur.claimed_by == token,
            )
            if not res.was_applied:
                return False
            # The count is a write of its own (Cassandra batches no counter update with other
            # writes): a client that dies here has acked the message and not counted it.
            faults.point("consumer.grouped_ack_applied", queue=queue, message_id=r.message_id)
            self.counters.add(queue, "acked", 1)
            self.reader.heads.write_done(queue, [(row.grp, r.message_id)])
            self.timers.acked(queue, r.message_id, r.version)
            return True
        write = self.conn.execute_async(
            "UPDATE {ks}.messages USING TTL ? SET acked = true "
            "WHERE queue_id = ? AND bucket = ? AND id = ?",
            (ttl, *key),
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
        so the new body and the new receipt come together or not at all.

        The timer goes first and is stored where every timer path reads it (``timers.store``:
        a late write is made again, due ``timers.LATE_DELAY`` after it at least). A
        compare-and-set whose reply comes after the deadline of its due time may have landed
        after every timer path passed its slot: the change is then made again (a new due
        time, timer and version), at most ``timers.LATE_REDOS`` times."""
        for _ in range(timers.LATE_REDOS):
            receipt, due = self._change_once(queue, receipt, timeout, deliveries, payload)
            if timers.in_time(due):
                break
            log.warning(
                "queue %s: a visibility change reached Cassandra too late to be read by every "
                "timer path; made again",
                queue.name,
            )
            deliveries = payload = None  # already written
            timeout = max(timeout, timers.LATE_DELAY)
        return receipt

    def _change_once(
        self,
        queue: QueueInfo,
        receipt: str,
        timeout: float,
        deliveries: int | None,
        payload: bytes | None,
    ) -> tuple[str, float]:
        r = PopReceipt.decode(receipt)
        r.check(queue, receipt)
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
        _, [due] = timers.store(self.conn, queue, [(timeout, r.message_id)], now)
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
        return PopReceipt.issue(queue, r.message_id, r.version + 1), due

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
