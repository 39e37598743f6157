"""Invisibility timers: "look at message X again at time T".

A delayed put and every delivery write a timer into the slot of its due time, plus a marker
that the slot is not empty. Consumers read the non-empty slots between the invisibility pointer
(``pointers.timer_slot``) and now. Because expired and delayed messages come back through their
timers, the reader pointer can move past them at once: it never stalls behind a message that is
in flight, delayed or republished.

A timer must outlive its due time by as long as consumers may be away, whatever the delay:
each one is written with a TTL of (due - now) + the *retention*, the timers table's
``default_time_to_live`` (14 days unless an operator changes it). A table TTL alone counts
from the write, so a timer for a delay longer than it, or a message due while every consumer
was down for longer than what was left of it, vanished before anyone read it.
Repair deletes the slots well behind the invisibility pointer, which nobody reads again.

Invariant: a timer on which a message's delivery depends is stored where every timer path
reads it (docs/internals/protocol.md, "Every timer is stored where a timer path reads it"). A
timer path passes slot ``s`` only after a clock read ``deadline(s)``; a writer whose clock,
read after the write's reply, is still ``CLOCK_SPREAD`` before that (:func:`in_time`) stored
its timer before any timer path read ``s`` for the last time. A write that is late is never
relied on: a claim sends no compare-and-set, a visibility change or give-back writes its timer
again for a new due time (:func:`store`).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterator

from ..store import faults
from ..store.session import Connection
from . import clock
from .clock import CLOCK_SPREAD, TIMER_SETTLE_SLOTS, TIMER_SLOT_SECONDS, timer_slot
from .queues import QueueInfo

log = logging.getLogger(__name__)

# The fault seam's point right before a claim's, visibility change's or give-back's timer
# write (context: queue, due, ids). An action there runs in the writing thread only.
BEFORE_WRITE = "timers.before_write"
# A change whose timer write was late is due this much after the clock reading that found
# it late (at least): room for the next write to be in time.
LATE_DELAY = float(TIMER_SETTLE_SLOTS)
# A change whose compare-and-set landed late is made again at most this many times.
LATE_REDOS = 3

DEFAULT_RETENTION = 14 * 24 * 3600
# Slots this far behind the invisibility pointer are deleted by repair. Readers start at the
# pointer; the margin covers a reader that read the pointer a moment before it moved.
RECLAIM_LAG_SLOTS = TIMER_SETTLE_SLOTS + 60
# Repair looks this far back for slots to delete (older ones have expired by then, or were
# deleted by an earlier pass).
RECLAIM_SCAN_SLOTS = 24 * 3600

_INSERT_TIMER = "INSERT INTO {ks}.timers (queue_id, slot, id) VALUES (?, ?, ?) USING TTL ?"
_INSERT_SLOT = "INSERT INTO {ks}.timer_slots (queue_id, slot) VALUES (?, ?) USING TTL ?"

_retention: dict[tuple[int, str], int] = {}


def retention(conn: Connection) -> int:
    """How long a timer is kept after it is due: the timers table's default TTL (seconds).

    Read once per connection from the driver's schema metadata.
    """
    key = (id(conn.cluster), conn.keyspace)
    value = _retention.get(key)
    if value is None:
        value = DEFAULT_RETENTION
        ks = conn.cluster.metadata.keyspaces.get(conn.keyspace)
        table = ks.tables.get("timers") if ks is not None else None
        if table is not None:
            value = int(table.options.get("default_time_to_live") or 0) or DEFAULT_RETENTION
        _retention[key] = value
    return value


def ttl(conn: Connection, due: float, now: float) -> int:
    return math.ceil(max(0.0, due - now)) + retention(conn)


def statements(conn: Connection, queue: QueueInfo, due: float, message_id: int, now: float) -> list:
    """The two bound statements that schedule ``message_id`` for ``due`` (epoch seconds)."""
    slot = timer_slot(due)
    keep = ttl(conn, due, now)
    return [
        conn.prepare(_INSERT_TIMER).bind((queue.queue_id, slot, message_id, keep)),
        conn.prepare(_INSERT_SLOT).bind((queue.queue_id, slot, keep)),
    ]


def many_statements(
    conn: Connection, queue: QueueInfo, timers: list[tuple[float, int]], now: float
) -> list:
    """Timers for many ``(due, id)``: one slot marker per slot, not one per message."""
    out = []
    markers: dict[int, float] = {}
    for due, mid in timers:
        timer, _ = statements(conn, queue, due, mid, now)
        out.append(timer)
        slot = timer_slot(due)
        markers[slot] = max(markers.get(slot, 0.0), due)
    for slot, due in markers.items():
        out.append(conn.prepare(_INSERT_SLOT).bind((queue.queue_id, slot, ttl(conn, due, now))))
    return out


def deadline(due: float) -> float:
    """The clock reading before which no timer path has passed the slot of ``due`` for the
    last time: it moves the invisibility pointer (or a stream its timer window) above a slot
    only once its clock reads ``TIMER_SETTLE_SLOTS`` slots past the slot's end."""
    return (timer_slot(due) + 1 + TIMER_SETTLE_SLOTS) * TIMER_SLOT_SECONDS


def in_time(due: float) -> bool:
    """Whether a timer for ``due`` whose write has just been acknowledged is read by every
    timer path: this process's clock, read now, is ``CLOCK_SPREAD`` before :func:`deadline`,
    so under the clock condition no clock of the system has reached it yet."""
    return clock.now() < deadline(due) - CLOCK_SPREAD


def before_write(queue: QueueInfo, due: float, ids: list[int]) -> None:
    """The fault seam's point before a timer write (:data:`BEFORE_WRITE`)."""
    faults.point(BEFORE_WRITE, queue=queue, due=due, ids=ids)


def store(
    conn: Connection, queue: QueueInfo, entries: list[tuple[float, int]], now: float
) -> tuple[float, list[float]]:
    """Write the timers of ``entries`` (``(seconds, id)``: due ``seconds`` after ``now``) so
    that every timer path reads them: written, then checked (:func:`in_time`); if any was
    late, all are written again, each due ``max(seconds, LATE_DELAY)`` after a new clock
    reading, until a write is in time. Returns the ``now`` the due times count from, and the
    due times (in ``entries``' order) the caller's compare-and-set must carry."""
    while True:
        due = [now + seconds for seconds, _ in entries]
        before_write(queue, min(due), [mid for _, mid in entries])
        stmts = many_statements(
            conn, queue, [(d, mid) for d, (_, mid) in zip(due, entries, strict=True)], now
        )
        for f in [conn.execute_async(s) for s in stmts]:
            f.result()
        if in_time(min(due)):
            return now, due
        log.warning(
            "queue %s: the timer of message %d (and %d more) for %.1f s after %.1f reached "
            "Cassandra too late to be read by every timer path; written again",
            queue.name,
            entries[0][1],
            len(entries) - 1,
            entries[0][0],
            now,
        )
        now = clock.now()
        entries = [(max(seconds, LATE_DELAY), mid) for seconds, mid in entries]


DUE_SLOTS = "SELECT slot FROM {ks}.timer_slots WHERE queue_id = ? AND slot >= ? AND slot <= ?"


def due_slots(conn: Connection, queue: QueueInfo, from_slot: int, to_slot: int) -> list[int]:
    rows = conn.execute(DUE_SLOTS, (queue.queue_id, from_slot, to_slot))
    return [r.slot for r in rows]


_IDS = "SELECT id FROM {ks}.timers WHERE queue_id = ? AND slot = ?"
SLOT_READ_WINDOW = 16


def ids_in_slot(conn: Connection, queue: QueueInfo, slot: int) -> list[int]:
    return [r.id for r in conn.execute(_IDS, (queue.queue_id, slot))]


def ids_in_slots(
    conn: Connection, queue: QueueInfo, slots: list[int]
) -> Iterator[tuple[int, list[int]]]:
    """``(slot, ids)`` for each of ``slots`` in order, a few slots read ahead at once (a
    get usually looks at the handful of slots of the settle window: one round trip, not one
    per slot)."""
    stmt = conn.prepare(_IDS)
    pending: deque = deque()
    todo = iter(slots)
    while True:
        for slot in todo:
            pending.append((slot, conn.execute_async(stmt, (queue.queue_id, slot))))
            if len(pending) >= SLOT_READ_WINDOW:
                break
        if not pending:
            return
        slot, future = pending.popleft()
        yield slot, [r.id for r in future.result()]


def reclaim(conn: Connection, queue: QueueInfo, pointer_slot: int) -> int:
    """Delete the timers of slots far enough behind the invisibility pointer; returns how many
    slots. Timers first, markers second: a crash in between only repeats the deletes."""
    below = pointer_slot - RECLAIM_LAG_SLOTS
    if below <= 0:
        return 0
    low = max(0, below - RECLAIM_SCAN_SLOTS)
    slots = [
        r.slot
        for r in conn.execute(
            "SELECT slot FROM {ks}.timer_slots WHERE queue_id = ? AND slot >= ? AND slot < ?",
            (queue.queue_id, low, below),
        )
    ]
    if not slots:
        return 0
    futures = []
    for slot in slots:
        futures.append(
            conn.execute_async(
                "DELETE FROM {ks}.timers WHERE queue_id = ? AND slot = ?", (queue.queue_id, slot)
            )
        )
        if len(futures) >= 64:
            futures.pop(0).result()
    for f in futures:
        f.result()
    conn.execute(
        "DELETE FROM {ks}.timer_slots WHERE queue_id = ? AND slot >= ? AND slot < ?",
        (queue.queue_id, low, slots[-1] + 1),
    )
    return len(slots)
