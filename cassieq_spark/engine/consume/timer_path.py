"""The client's timer path: messages that come back through their timers (expired deliveries,
delayed messages), from the invisibility pointer up to now.

Its cost is bounded whatever the backlog: the due rows are read a growing window
at a time, never more than ``TIMER_READ_WINDOW`` at once; ids this client knows to be held are
not read again before they are due, nor the ones it acked itself; and it gives up after
``MAX_LOST_CLAIMS`` lost claims (each lost claim costs a Paxos round and leaves a timer behind).

Invariant: what a client remembers of a due slot never keeps a message from it longer than a
fresh client would wait, and the invisibility pointer passes a slot only when every timer in
it is resolved. A claim writes its timer first and may apply late (a request queued at a
loaded coordinator lands after its client read the row back as "not applied"), due already,
with that timer its only one. So a row found *fresh* in a due slot is no verdict to remember:
it is read again at every look, and its slot stays unresolved while it is fresh.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ..core import pointers, queues, timers
from ..core.buckets import bucket_of
from ..core.clock import TIMER_SETTLE_SLOTS, timer_slot, to_epoch
from ..core.messages import MOVED_DLQ, Message, is_expired
from ..core.queues import QueueInfo
from ..store import suspend
from ..store.session import Connection
from ..upkeep import deadletter

TIMER_READ_WINDOW = 64  # due timer rows read at once, at most
MAX_LOST_CLAIMS = 3  # claims lost in a row before a get re-reads (reader path) or moves on
CONTENDED_SECONDS = 1.0  # a message someone else just claimed is not looked at for this long
# What scans need to decide; payloads are fetched only for the one message claimed, so a scan
# costs the same for 1 MiB payloads as for 10-byte ones.
SCAN_COLUMNS = (
    "id, enqueued_at, visible_at, version, deliveries, invisible_until, acked, dead, moved, grp"
)
KEEPS_SECONDS = 60.0  # how long a client trusts "is a dead-letter queue" before reading again
ROW = "SELECT {cols} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"


class TimerPath:
    """What one client knows of a queue's due timers between two gets."""

    def __init__(self, conn: Connection, counters):
        self.conn = conn
        self.counters = counters
        # queue_id -> {slot: {id: until}}: ids of due slots not worth reading again before
        # ``until`` (inf: acked or dead, final; else due later, or held by another consumer).
        self._known: dict = {}
        # (queue_id, id) -> (version, timer slot) of deliveries this client made: its own
        # acks make their timers final without a read.
        self._holding: dict = {}
        # queue_id -> (answer, until): does the queue keep messages past their delivery
        # limit (a dead-letter queue, ``queues.keeps_past_delivery_limit``)? Read again
        # after ``KEEPS_CACHE_SECONDS``.
        self._keeps_cache: dict = {}
        # queue_id -> the invisibility pointer as this client last saw it: a lower bound of
        # the stored one (it only moves forward), where a get's read of the due slots may
        # start before the pointers are read (:meth:`read_ahead`).
        self._pointer_seen: dict = {}
        self._ahead = suspend.CallLocal()  # the current call: queue_id -> (from, to, future)
        # queue_id -> ids whose claim this client lost and has not read since: their slot
        # stays unresolved until it does (the winner may be due in that slot).
        self._lost: dict = {}

    def _keeps(self, queue: QueueInfo, now: float) -> bool:
        cached = self._keeps_cache.get(queue.queue_id)
        if cached is None or cached[1] <= now:
            cached = (queues.keeps_past_delivery_limit(self.conn, queue), now + KEEPS_SECONDS)
            self._keeps_cache[queue.queue_id] = cached
        return cached[0]

    def read_ahead(self, queue: QueueInfo, now: float) -> None:
        """Send this call's read of the due slots now, from the invisibility pointer this client
        saw last, so that it travels with the read of the pointers (one round trip less). The
        stored pointer is at or above the one seen (it only moves forward): :meth:`take` keeps
        the slots at or above the pointer it read, which are exactly those a read from there
        returns. A client that has not seen the pointer yet reads after it as before."""
        seen = self._pointer_seen.get(queue.queue_id)
        if seen is None:
            return
        to = timer_slot(now)
        future = self.conn.execute_async(timers.DUE_SLOTS, (queue.queue_id, seen, to))
        self._calls()[queue.queue_id] = (seen, to, future)

    def drop_ahead(self, queue: QueueInfo) -> None:
        """End of the call: a read sent ahead and not used is not used by a later call."""
        self._calls().pop(queue.queue_id, None)

    def _calls(self) -> dict:
        return self._ahead.get()

    def _due_slots(self, queue: QueueInfo, from_slot: int, to_slot: int) -> list[int]:
        ahead = self._calls().pop(queue.queue_id, None)
        if ahead is not None and ahead[0] <= from_slot and ahead[1] == to_slot:
            try:
                return [r.slot for r in ahead[2].result() if r.slot >= from_slot]
            except Exception:
                pass  # read again below: the same read, after the pointers
        return timers.due_slots(self.conn, queue, from_slot, to_slot)

    def delivered(self, queue: QueueInfo, message_id: int, version: int, due: float) -> None:
        if len(self._holding) > 100_000:
            self._holding.clear()
        self._holding[(queue.queue_id, message_id)] = (version, timer_slot(due))

    def acked(self, queue: QueueInfo, message_id: int, version: int) -> None:
        held = self._holding.pop((queue.queue_id, message_id), None)
        if held is not None and held[0] == version:
            slot = self._known.setdefault(queue.queue_id, {}).setdefault(held[1], {})
            slot[message_id] = math.inf  # its timer needs no read any more

    def given_back(self, queue: QueueInfo, message_id: int) -> None:
        """A delivery this client gave back (visible again now): its timer is worth reading
        at once, not when the delivery would have expired."""
        self._holding.pop((queue.queue_id, message_id), None)
        for seen in self._known.get(queue.queue_id, {}).values():
            seen.pop(message_id, None)

    def next(
        self,
        queue: QueueInfo,
        ptrs: pointers.Pointers,
        now: float,
        vt: float,
        claim: Callable[[QueueInfo, Any, float, float], Message | None],
    ) -> Message | None:
        """The first due message ``claim`` wins; moves the invisibility pointer over the slots
        found resolved. None: nothing due (or only lost races: the reader path may have some).
        """
        taken = self.take(queue, ptrs, now, vt, claim, 1)
        return taken[0] if taken else None

    def take(
        self,
        queue: QueueInfo,
        ptrs: pointers.Pointers,
        now: float,
        vt: float,
        claim: Callable[[QueueInfo, Any, float, float], Message | None],
        want: int,
    ) -> list[Message]:
        """Up to ``want`` due messages, each claimed by ``claim`` (one compare-and-set each), in
        one pass over the due slots; fewer when fewer are due."""
        out: list[Message] = []
        now_slot = timer_slot(now)
        resolved_to = ptrs.timer_slot
        contiguous = True
        known = self._known.setdefault(queue.queue_id, {})
        for old in [s for s in known if s < ptrs.timer_slot]:
            del known[old]
        lost = 0
        seen = self._pointer_seen.get(queue.queue_id, 0)
        self._pointer_seen[queue.queue_id] = max(seen, ptrs.timer_slot)
        slots = self._due_slots(queue, ptrs.timer_slot, now_slot)
        lost_to = self._lost.setdefault(queue.queue_id, set())
        if len(lost_to) > 10_000:
            lost_to.clear()
        for slot, ids in timers.ids_in_slots(self.conn, queue, slots):
            seen = known.setdefault(slot, {})
            slot_resolved = True
            todo = []
            for mid in ids:
                until = seen.get(mid, 0.0)
                if until <= now:
                    todo.append(mid)
                elif until != math.inf and (timer_slot(until) <= slot or mid in lost_to):
                    slot_resolved = False  # due later within this slot, or a race not read since
            for row in _read_rows(self.conn, queue, todo):
                lost_to.discard(row.id)
                if row.acked or is_expired(row, queue, now):
                    seen[row.id] = math.inf
                    continue
                if row.dead:
                    if row.moved == MOVED_DLQ:  # a dead-letter move a crash left half done
                        deadletter.complete(self.conn, self.counters, queue, row.id)
                    seen[row.id] = math.inf
                    continue
                due = max(to_epoch(row.visible_at), to_epoch(row.invisible_until))
                if due > now:
                    seen[row.id] = due
                    if timer_slot(due) <= slot:
                        slot_resolved = False
                    continue  # otherwise a later timer owns it
                if row.version is None and to_epoch(row.visible_at) == 0:
                    # Never delivered and never delayed: the timer of a claim that has not
                    # landed (yet). The reader path owns the row while it stays fresh, but
                    # that claim may still apply (a request queued at a loaded coordinator
                    # after its client read it back as not applied), due in this slot, and
                    # then this timer is the only one that brings it back (the reader path
                    # passes claimed rows). So no memo: read it again at the next look, and
                    # keep the slot (a memo would count as "due later" and resolve it).
                    slot_resolved = False
                    continue
                if (row.deliveries or 0) >= queue.max_delivery_count and not self._keeps(
                    queue, now
                ):
                    if deadletter.take(self.conn, self.counters, queue, row, now):
                        seen[row.id] = math.inf
                    else:
                        slot_resolved = False  # acked or claimed meanwhile: look again
                    continue
                msg = claim(queue, row, now, vt)
                if msg is not None:
                    seen[row.id] = now + vt
                    out.append(msg)
                    if len(out) >= want:
                        return out
                    continue
                # Someone else holds it now or acked it, or this call outlived its visibility
                # timeout. The winner's change may be due in this very slot (a visibility
                # change or give-back whose compare-and-set landed after its timer, which is
                # here): the slot stays unresolved until the next look reads the row again.
                seen[row.id] = now + CONTENDED_SECONDS
                lost_to.add(row.id)
                slot_resolved = False
                lost += 1
                if lost >= MAX_LOST_CLAIMS:
                    break
            if lost >= MAX_LOST_CLAIMS:
                contiguous = False
                break  # others are on these timers; the reader path may have something
            if contiguous and slot_resolved:
                resolved_to = slot + 1
            else:
                contiguous = False
        if contiguous:
            resolved_to = max(resolved_to, now_slot + 1)
        target = min(resolved_to, now_slot - TIMER_SETTLE_SLOTS)
        if target > ptrs.timer_slot and pointers.advance(self.conn, queue, "timer_slot", target):
            seen = self._pointer_seen.get(queue.queue_id, 0)
            self._pointer_seen[queue.queue_id] = max(seen, target)
        return out


def _read_rows(conn: Connection, queue: QueueInfo, ids: list[int]) -> Iterator:
    """The scan columns of ``ids`` (missing rows left out), in id order. The reads in flight
    grow from a few to ``TIMER_READ_WINDOW`` as rows are consumed, so a caller that stops at
    the first row it can claim has read little more than that row."""
    stmt = conn.prepare(ROW.format(cols=SCAN_COLUMNS))
    todo = iter(sorted(ids))
    pending: deque = deque()
    consumed = 0
    while True:
        limit = min(TIMER_READ_WINDOW, 4 + 2 * consumed)
        for mid in todo:
            pending.append(
                conn.execute_async(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
            )
            if len(pending) >= limit:
                break
        if not pending:
            return
        yield from pending.popleft().result()
        consumed += 1
