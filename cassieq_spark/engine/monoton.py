"""Id allocation from the ``monoton`` row, by blocks, with in-flight reservations.

One lightweight transaction reserves a whole block ``[lo, hi)`` and, in the same conditional
batch on the same partition, records the reservation as an open row. Writers close the row
once every id of the block is written. Readers compute a *horizon*: the highest id below which
nothing may still be in flight, i.e. the lowest ``lo`` over open reservations younger than the
queue's repair timeout. Older open reservations are *abandoned* (their writer presumably died);
readers may pass them, and hand them to repair, which republishes whatever lands there late.

Handing a reservation to repair (``skip``) and a late writer closing it must not both win, or
one reader would deliver the late messages while repair republishes them too. Both are
compare-and-sets on the reservation row (``IF closed = null`` / ``IF skipped = null``), so
exactly one wins. A writer that finishes well within the repair timeout (half of it, measured
on its own clock) closes with a plain write: no reader can see its block as abandoned yet.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
import uuid
from dataclasses import dataclass

from cassandra import Unavailable, WriteTimeout
from cassandra.query import SimpleStatement

from ..errors import ContentionError
from .queues import QueueInfo
from .session import Connection

log = logging.getLogger(__name__)

# A reservation never spans more ids than this, so a reader looking for reservations that
# overlap id x only has to look at rows with lo >= x - MAX_BLOCK.
MAX_BLOCK = 10_000
OPEN_TTL = 14 * 24 * 3600  # an open reservation outlives any repair timeout
CLOSED_TTL = 24 * 3600  # closed rows are only needed until repair has passed them
MAX_ATTEMPTS = 200

_last_next: dict = {}  # queue_id -> the counter after this process's last reservation

_RESERVE = (
    "BEGIN BATCH "
    "UPDATE {ks}.monoton SET next = ? WHERE queue_id = ? IF next = ?; "
    "INSERT INTO {ks}.monoton (queue_id, lo, hi, created_at, owner) "
    "VALUES (?, ?, ?, toTimestamp(now()), ?) USING TTL ?; "
    "APPLY BATCH"
)


@dataclass(frozen=True)
class Reservation:
    lo: int
    hi: int
    owner: str
    key: str | None = None
    closed: bool = False  # for a keyed reservation found again: its first writer finished
    reserved_at: float = 0.0  # time.monotonic() when reserved here; 0 = unknown (found again)

    @property
    def count(self) -> int:
        return self.hi - self.lo


@dataclass(frozen=True)
class Horizon:
    """What a reader may read: ``[from_id, safe_end)``; ``next_id`` is the allocation counter."""

    next_id: int
    safe_end: int
    abandoned: tuple[tuple[int, int], ...]  # open reservations older than the repair timeout
    open_count: int


def _read_next(conn: Connection, queue: QueueInfo, serial: bool) -> int:
    stmt = conn.prepare("SELECT next FROM {ks}.monoton WHERE queue_id = ? LIMIT 1").bind(
        (queue.queue_id,)
    )
    if serial:
        stmt.consistency_level = conn.config.serial_consistency_level
    row = conn.session.execute(stmt).one()
    return (row.next or 0) if row else 0


def _owned(conn: Connection, queue: QueueInfo, lo: int, owner: str) -> bool:
    """After an ambiguous CAS timeout: did our reservation land? (A SERIAL read settles it.)"""
    stmt = SimpleStatement(
        f"SELECT owner FROM {conn.keyspace}.monoton WHERE queue_id = %s AND lo = %s",
        consistency_level=conn.config.serial_consistency_level,
    )
    row = conn.session.execute(stmt, (queue.queue_id, lo)).one()
    return bool(row and row.owner == owner)


def reserve(conn: Connection, queue: QueueInfo, count: int, *, owner_hint: str = "") -> Reservation:
    """Reserve ``count`` consecutive ids with one lightweight transaction (more under contention)."""
    if not 1 <= count <= MAX_BLOCK:
        raise ValueError(f"a reservation holds 1..{MAX_BLOCK} ids, asked for {count}")
    owner = f"{owner_hint}:{uuid.uuid4().hex[:12]}" if owner_hint else uuid.uuid4().hex[:12]
    started = time.monotonic()
    # The counter as this process last left it is a good first guess for a lone writer (then
    # no read at all). A wrong guess costs a failed CAS, dearer than a read, so after a race
    # the next reservation reads first.
    current = _last_next.get(queue.queue_id)
    if current is None:
        current = _read_next(conn, queue, serial=False)
    delay = 0.002
    for attempt in range(MAX_ATTEMPTS):
        lo, hi = current, current + count
        try:
            res = conn.execute(
                _RESERVE, (hi, queue.queue_id, lo, queue.queue_id, lo, hi, owner, OPEN_TTL)
            )
        except (WriteTimeout, Unavailable) as exc:
            log.warning(
                "reservation of ids %d..%d timed out (%s); checking whether it landed", lo, hi, exc
            )
            if _owned(conn, queue, lo, owner):
                return Reservation(lo, hi, owner, reserved_at=started)
            current = _read_next(conn, queue, serial=True)
            continue
        if res.was_applied:
            if attempt == 0:
                _last_next[queue.queue_id] = hi
            else:
                _last_next.pop(queue.queue_id, None)
            return Reservation(lo, hi, owner, reserved_at=started)
        row = res.one()
        seen = getattr(row, "next", None)
        current = seen if seen is not None else _read_next(conn, queue, serial=True)
        time.sleep(random.uniform(0, delay))
        delay = min(delay * 2, 0.2)
    raise ContentionError(
        f"could not reserve ids on queue {queue.name!r} after {MAX_ATTEMPTS} attempts; too many "
        "writers race for single ids: batch with put_many or retry later"
    )


def close(conn: Connection, queue: QueueInfo, res: Reservation, *, released: bool = False):
    """Mark a reservation written (or given back unused). Returns the driver future.

    A late close is a compare-and-set that loses to a reader that already handed the block
    to repair; then repair republishes what was written, and nothing is delivered twice.
    """
    elapsed = time.monotonic() - res.reserved_at if res.reserved_at else float("inf")
    if elapsed < queue.repair_timeout / 2:
        return conn.execute_async(
            "INSERT INTO {ks}.monoton (queue_id, lo, hi, created_at, owner, closed, released) "
            "VALUES (?, ?, ?, toTimestamp(now()), ?, true, ?) USING TTL ?",
            (queue.queue_id, res.lo, res.hi, res.owner, released, CLOSED_TTL),
        )
    return conn.execute_async(
        "UPDATE {ks}.monoton USING TTL ? SET closed = true, released = ? "
        "WHERE queue_id = ? AND lo = ? IF skipped = null",
        (CLOSED_TTL, released, queue.queue_id, res.lo),
    )


def skip(conn: Connection, queue: QueueInfo, lo: int) -> bool:
    """Hand the abandoned reservation at ``lo`` to repair. False: its writer closed it first
    (the block is complete and readers deliver it as usual)."""
    res = conn.execute(
        "UPDATE {ks}.monoton SET skipped = true WHERE queue_id = ? AND lo = ? IF closed = null",
        (queue.queue_id, lo),
    )
    if res.was_applied:
        return True
    row = res.one()
    return bool(getattr(row, "skipped", None)) and not bool(getattr(row, "closed", None))


def horizon(
    conn: Connection,
    queue: QueueInfo,
    from_id: int,
    now: float | None = None,
    window: int | None = None,
) -> Horizon:
    """How far a reader starting at ``from_id`` may safely read right now.

    With ``window``, only reservations up to ``from_id + window`` are looked at and the safe
    end is capped there: the cost of a call then follows what the caller will read, not the
    backlog.
    """
    now = time.time() if now is None else now
    lo_from = max(0, from_id - MAX_BLOCK)
    if window is None:
        rows = list(
            conn.execute(
                "SELECT next, lo, hi, created_at, closed, skipped FROM {ks}.monoton "
                "WHERE queue_id = ? AND lo >= ?",
                (queue.queue_id, lo_from),
            )
        )
    else:
        rows = list(
            conn.execute(
                "SELECT next, lo, hi, created_at, closed, skipped FROM {ks}.monoton "
                "WHERE queue_id = ? AND lo >= ? AND lo < ?",
                (queue.queue_id, lo_from, from_id + window),
            )
        )
    next_id = None
    safe_end = None
    abandoned: list[tuple[int, int]] = []
    open_count = 0
    cutoff = now - queue.repair_timeout
    for r in rows:
        if r.next is not None:
            next_id = r.next if next_id is None else max(next_id, r.next)
        if r.lo is None or r.hi is None or r.hi <= from_id:
            continue
        if r.skipped:
            abandoned.append((r.lo, r.hi))  # repair owns it, whatever its writer did since
            continue
        if r.closed:
            continue
        open_count += 1
        created = r.created_at.replace(tzinfo=dt.timezone.utc).timestamp() if r.created_at else 0.0
        if created < cutoff:
            abandoned.append((r.lo, r.hi))
        else:
            safe_end = r.lo if safe_end is None else min(safe_end, r.lo)
    if next_id is None:
        row = conn.execute(
            "SELECT next FROM {ks}.monoton WHERE queue_id = ? LIMIT 1", (queue.queue_id,)
        ).one()
        next_id = (row.next or 0) if row else 0
    end = next_id if safe_end is None else min(safe_end, next_id)
    if window is not None:
        end = min(end, from_id + window)
    end = max(end, from_id)
    return Horizon(next_id, end, tuple(sorted(a for a in abandoned if a[0] < end)), open_count)


# -- keyed reservations: the exactly-once sink and repair find their block again on replay ----


def find_keyed(conn: Connection, queue: QueueInfo, key: str) -> Reservation | None:
    row = conn.execute(
        "SELECT lo, hi FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
        (queue.queue_id, key),
    ).one()
    if row is None:
        return None
    m = conn.execute(
        "SELECT owner, closed FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        (queue.queue_id, row.lo),
    ).one()
    # A missing monoton row means it was closed long ago and expired: treat as finished.
    closed = m is None or bool(m.closed)
    owner = m.owner if m is not None and m.owner else f"key:{key}"
    return Reservation(row.lo, row.hi, owner, key=key, closed=closed)


def reserve_keyed(conn: Connection, queue: QueueInfo, key: str, count: int) -> Reservation:
    """The block reserved under ``key``: the same one every time the key is asked for again.

    A replayed Spark task (same query, batch and partition) gets the ids its first attempt
    used; ``closed`` tells it the first attempt finished, so it must write nothing.
    """
    found = find_keyed(conn, queue, key)
    if found is not None:
        return found
    res = reserve(conn, queue, count, owner_hint=key[:40])
    applied = conn.execute(
        "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?) IF NOT EXISTS",
        (queue.queue_id, key, res.lo, res.hi),
    )
    if applied.was_applied:
        return Reservation(res.lo, res.hi, res.owner, key=key)
    # Another attempt of the same task got there first: use its block, give ours back.
    close(conn, queue, res, released=True).result()
    found = find_keyed(conn, queue, key)
    assert found is not None
    return found
