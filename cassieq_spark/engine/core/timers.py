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
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator

from ..store.session import Connection
from .clock import TIMER_SETTLE_SLOTS, timer_slot
from .queues import QueueInfo

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


def schedule(conn: Connection, queue: QueueInfo, due: float, message_id: int, now: float) -> None:
    futures = [conn.execute_async(s) for s in statements(conn, queue, due, message_id, now)]
    for f in futures:
        f.result()


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
