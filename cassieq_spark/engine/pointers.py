"""The per-queue pointers and the consumer lease.

* ``reader``: every id below it has been handed out (delivered, acked, or handed to a timer or
  to repair). Readers start scanning here; it only moves forward.
* ``repair``: every bucket below it is repaired and reclaimed.
* ``timer_slot``: the invisibility pointer, a time slot; timers below it are all resolved.
* ``lease_owner``/``lease_until``: which streaming query consumes the queue, until when.

Every move is a compare-and-set that only goes forward, so two movers can never move a pointer
backwards; moves are throttled by their callers, so the cost is per batch, not per message.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from .clock import from_epoch, to_epoch
from .queues import QueueInfo
from .session import Connection

log = logging.getLogger(__name__)

POINTERS = ("reader", "repair", "timer_slot")


@dataclass(frozen=True)
class Pointers:
    reader: int
    repair: int
    timer_slot: int
    lease_owner: str | None
    lease_until: float

    def lease_held(self, now: float, by: str | None = None) -> bool:
        held = self.lease_owner is not None and self.lease_until > now
        return held and (by is None or self.lease_owner == by)


def read(conn: Connection, queue: QueueInfo) -> Pointers:
    row = conn.execute(
        "SELECT reader, repair, timer_slot, lease_owner, lease_until FROM {ks}.pointers WHERE queue_id = ?",
        (queue.queue_id,),
    ).one()
    if row is None:
        return Pointers(0, 0, 0, None, 0.0)
    return Pointers(
        row.reader or 0,
        row.repair or 0,
        row.timer_slot or 0,
        row.lease_owner,
        to_epoch(row.lease_until) if row.lease_until else 0.0,
    )


def advance(conn: Connection, queue: QueueInfo, pointer: str, to: int) -> bool:
    """Move ``pointer`` forward to ``to``; a no-op (False) when it is already there or beyond."""
    if pointer not in POINTERS:
        raise ValueError(pointer)
    res = conn.cas(
        f"UPDATE {{ks}}.pointers SET {pointer} = ? WHERE queue_id = ? IF {pointer} < ?",
        (to, queue.queue_id, to),
        read=f"SELECT {pointer} FROM {{ks}}.pointers WHERE queue_id = ?",
        read_params=(queue.queue_id,),
        # Where we wanted it or beyond: for a forward-only pointer that is all that matters.
        applied=lambda row: row is not None and (getattr(row, pointer) or 0) >= to,
    )
    if res.was_applied:
        log.debug("queue %s: %s pointer -> %d", queue.name, pointer, to)
    return bool(res.was_applied)


def acquire_lease(
    conn: Connection, queue: QueueInfo, owner: str, seconds: float, now: float
) -> Pointers:
    """Take or renew the consumer lease. Returns the pointers as seen; check ``lease_held``."""
    until = from_epoch(now + seconds)

    def mine(row) -> bool:
        return (
            row is not None
            and row.lease_owner == owner
            and abs(to_epoch(row.lease_until) - to_epoch(until)) < 0.002
        )

    read_lease = "SELECT lease_owner, lease_until FROM {ks}.pointers WHERE queue_id = ?"
    for _ in range(5):
        current = read(conn, queue)
        if current.lease_owner == owner:
            res = conn.cas(
                "UPDATE {ks}.pointers SET lease_until = ? WHERE queue_id = ? IF lease_owner = ?",
                (until, queue.queue_id, owner),
                read=read_lease,
                read_params=(queue.queue_id,),
                applied=mine,
            )
        elif current.lease_held(now):
            return current
        else:
            seen_until = from_epoch(current.lease_until) if current.lease_owner else None
            res = conn.cas(
                "UPDATE {ks}.pointers SET lease_owner = ?, lease_until = ? WHERE queue_id = ? "
                "IF lease_owner = ? AND lease_until = ?",
                (owner, until, queue.queue_id, current.lease_owner, seen_until),
                read=read_lease,
                read_params=(queue.queue_id,),
                applied=mine,
            )
        if res.was_applied:
            return Pointers(
                current.reader, current.repair, current.timer_slot, owner, now + seconds
            )
    return read(conn, queue)


def release_lease(conn: Connection, queue: QueueInfo, owner: str) -> None:
    conn.cas(
        "UPDATE {ks}.pointers SET lease_owner = null, lease_until = null WHERE queue_id = ? IF lease_owner = ?",
        (queue.queue_id, owner),
        read="SELECT lease_owner FROM {ks}.pointers WHERE queue_id = ?",
        read_params=(queue.queue_id,),
        applied=lambda row: row is None or row.lease_owner != owner,
    )


def lease_expiry(p: Pointers) -> dt.datetime | None:
    return from_epoch(p.lease_until) if p.lease_owner else None
