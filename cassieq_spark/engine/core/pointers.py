"""The per-queue pointers and the consumer lease.

* ``reader``: every id below it has been handed out (delivered, acked, or handed to a timer or
  to repair). Readers start scanning here; it only moves forward.
* ``repair``: every bucket below it is repaired and reclaimed.
* ``timer_slot``: the invisibility pointer, a time slot; timers below it are all resolved.
* ``lease_owner``/``lease_until``: which streaming query consumes the queue, until when; the
  pair is also the run's fencing token (``stream/lease.py``): the stream's pointer moves are
  conditioned on it.

Every move is a compare-and-set that only goes forward, so two movers can never move a pointer
backwards; moves are throttled by their callers, so the cost is per batch, not per message.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from ..store.session import Connection
from .clock import from_epoch, to_epoch
from .queues import QueueInfo

log = logging.getLogger(__name__)

POINTERS = ("reader", "repair", "timer_slot")


@dataclass(frozen=True)
class Pointers:
    reader: int
    repair: int
    timer_slot: int
    lease_owner: str | None
    lease_until: float
    # ``lease_until`` exactly as stored: a run of a consumer holds the lease while the row has
    # its owner *and* the expiry it wrote last, so two runs of one consumer can tell each other
    # apart (the later one takes over, the earlier one finds out).
    lease_token: dt.datetime | None = None

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
        row.lease_until,
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


def advance_fenced(
    conn: Connection, queue: QueueInfo, pointer: str, to: int, owner: str, token: dt.datetime
) -> tuple[bool, Pointers | None]:
    """Move ``pointer`` forward to ``to`` only while ``owner`` holds the lease with ``token``.

    Returns (moved, seen): ``seen`` is None when it moved; otherwise the pointer and lease as
    they stand, from which the caller tells "already there" from "the lease is not mine".
    """
    if pointer not in POINTERS:
        raise ValueError(pointer)
    res = conn.cas(
        f"UPDATE {{ks}}.pointers SET {pointer} = ? WHERE queue_id = ? "
        f"IF {pointer} < ? AND lease_owner = ? AND lease_until = ?",
        (to, queue.queue_id, to, owner, token),
        read=f"SELECT {pointer}, lease_owner, lease_until FROM {{ks}}.pointers WHERE queue_id = ?",
        read_params=(queue.queue_id,),
        applied=lambda row: (
            row is not None
            and (getattr(row, pointer) or 0) >= to
            and row.lease_owner == owner
            and row.lease_until == token
        ),
    )
    if res.was_applied:
        log.debug("queue %s: %s pointer -> %d (lease %s)", queue.name, pointer, to, owner)
        return True, None
    row = res.one()
    if row is None:
        return False, Pointers(0, 0, 0, None, 0.0)
    return False, Pointers(
        getattr(row, "reader", None) or 0,
        0,
        getattr(row, "timer_slot", None) or 0,
        row.lease_owner,
        to_epoch(row.lease_until) if row.lease_until else 0.0,
        row.lease_until,
    )


def lease_time(epoch_seconds: float) -> dt.datetime:
    """A lease expiry at the millisecond Cassandra stores, so the value read back compares
    equal to the one written (it is the fencing token)."""
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(epoch_seconds * 1000))


LEASE_READ = "SELECT lease_owner, lease_until FROM {ks}.pointers WHERE queue_id = ?"


def acquire_lease(
    conn: Connection, queue: QueueInfo, owner: str, until: dt.datetime, now: float
) -> Pointers:
    """Take the consumer lease until ``until`` (see :func:`lease_time`) if it is free, lapsed
    at ``now``, or held by ``owner`` itself (an earlier run of the same consumer, which loses
    it at once). The lease is ours when the returned pointers show ``owner`` and ``until``.
    """

    def mine(row) -> bool:
        return row is not None and row.lease_owner == owner and row.lease_until == until

    for _ in range(5):
        current = read(conn, queue)
        if current.lease_held(now) and current.lease_owner != owner:
            return current
        # `reader >= 0` fails on a missing row (a deleted queue): a lease must never bring
        # the pointers row of a dead incarnation back.
        res = conn.cas(
            "UPDATE {ks}.pointers SET lease_owner = ?, lease_until = ? WHERE queue_id = ? "
            "IF lease_owner = ? AND lease_until = ? AND reader >= 0",
            (owner, until, queue.queue_id, current.lease_owner, current.lease_token),
            read=LEASE_READ,
            read_params=(queue.queue_id,),
            applied=mine,
        )
        if res.was_applied:
            return Pointers(
                current.reader,
                current.repair,
                current.timer_slot,
                owner,
                to_epoch(until),
                until,
            )
    return read(conn, queue)


def renew_lease(
    conn: Connection, queue: QueueInfo, owner: str, token: dt.datetime, until: dt.datetime
) -> bool:
    """Extend the lease this run holds (``owner`` with ``token``) to ``until``. Never takes a
    lease that is free or someone else's: a renewal after a release, or after another run
    took over, fails."""
    res = conn.cas(
        "UPDATE {ks}.pointers SET lease_until = ? WHERE queue_id = ? "
        "IF lease_owner = ? AND lease_until = ?",
        (until, queue.queue_id, owner, token),
        read=LEASE_READ,
        read_params=(queue.queue_id,),
        applied=lambda row: (
            row is not None and row.lease_owner == owner and row.lease_until == until
        ),
    )
    return bool(res.was_applied)


def release_lease(conn: Connection, queue: QueueInfo, owner: str, token: dt.datetime) -> None:
    conn.cas(
        "UPDATE {ks}.pointers SET lease_owner = null, lease_until = null WHERE queue_id = ? "
        "IF lease_owner = ? AND lease_until = ?",
        (queue.queue_id, owner, token),
        read=LEASE_READ,
        read_params=(queue.queue_id,),
        applied=lambda row: row is None or row.lease_owner != owner or row.lease_until != token,
    )


def lease_expiry(p: Pointers) -> dt.datetime | None:
    return from_epoch(p.lease_until) if p.lease_owner else None
