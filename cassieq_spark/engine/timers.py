"""Invisibility timers: "look at message X again at time T".

A delayed put and every delivery write a timer into the slot of its due time, plus a marker
that the slot is not empty. Consumers read the non-empty slots between the invisibility pointer
(``pointers.timer_slot``) and now. Because expired and delayed messages come back through their
timers, the reader pointer can move past them at once: it never stalls behind a message that is
in flight, delayed or republished.
"""

from __future__ import annotations

from .clock import timer_slot
from .queues import QueueInfo
from .session import Connection

_INSERT_TIMER = "INSERT INTO {ks}.timers (queue_id, slot, id) VALUES (?, ?, ?)"
_INSERT_SLOT = "INSERT INTO {ks}.timer_slots (queue_id, slot) VALUES (?, ?)"


def statements(conn: Connection, queue: QueueInfo, due: float, message_id: int) -> list:
    """The two bound statements that schedule ``message_id`` for ``due`` (epoch seconds)."""
    slot = timer_slot(due)
    return [
        conn.prepare(_INSERT_TIMER).bind((queue.queue_id, slot, message_id)),
        conn.prepare(_INSERT_SLOT).bind((queue.queue_id, slot)),
    ]


def schedule(conn: Connection, queue: QueueInfo, due: float, message_id: int) -> None:
    futures = [conn.execute_async(s) for s in statements(conn, queue, due, message_id)]
    for f in futures:
        f.result()


def due_slots(conn: Connection, queue: QueueInfo, from_slot: int, to_slot: int) -> list[int]:
    rows = conn.execute(
        "SELECT slot FROM {ks}.timer_slots WHERE queue_id = ? AND slot >= ? AND slot <= ?",
        (queue.queue_id, from_slot, to_slot),
    )
    return [r.slot for r in rows]


def ids_in_slot(conn: Connection, queue: QueueInfo, slot: int) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM {ks}.timers WHERE queue_id = ? AND slot = ?", (queue.queue_id, slot)
    )
    return [r.id for r in rows]
