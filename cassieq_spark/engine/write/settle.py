"""Settling a written block: closing it, or rolling it back, against readers that hand it to
repair and other attempts that share it (see ``writes.py`` for the whole story).

* A close that loses to a reader's skip (or a write into a block already skipped) pushes back
  the repair of the block's range (:func:`restart_repair_clock`), so repair republishes what
  was written; a range already repaired leaves the rows :func:`undelivered` by anyone, to be
  written again.
* Only the attempt that reserved a block rolls it back (:func:`roll_back`), and that rollback
  and another attempt's close are compare-and-sets on the reservation row's ``released``:
  exactly one wins.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import ContentionError
from ..core import clock, monoton
from ..core.buckets import bucket_of
from ..core.messages import Pipeline, read_range
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection

log = logging.getLogger(__name__)


def republish_key(message_id: int) -> str:
    """The key under which repair republishes ``message_id`` (see ``repair.republish``):
    its presence means repair delivered that id."""
    return f"repair:{message_id}#0"


@dataclass(frozen=True)
class Block:
    """A block this writer wrote rows into. ``own``: this writer reserved it, so only this
    writer may roll it back."""

    res: monoton.Reservation
    own: bool


def _skipped_at(stamp: dt.datetime) -> Callable[[Any], bool]:
    """The settle predicate of a skipped-row write: the row now carries our stamp."""
    return lambda row: row is not None and row.skipped_at == stamp


def key_names(conn: Connection, queue: QueueInfo, key: str | None, lo: int) -> bool:
    row = conn.execute(
        "SELECT lo FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
        (queue.queue_id, key),
    ).one()
    return row is not None and row.lo == lo


def undelivered(conn: Connection, queue: QueueInfo, lo: int, count: int) -> list[int]:
    """Offsets in ``[lo, lo + count)`` of a repaired range whose rows no one will deliver.

    Repair republished the plain rows it found (each under :func:`republish_key`); rows with
    a delay or a delivery belong to the timers; acked and dead ones are finished. Anything
    else (never written, or written after repair read the range) is undelivered.
    """
    rows = {
        r.id: r
        for r in read_range(conn, queue, lo, lo + count, "id, visible_at, version, acked, dead")
    }
    candidates = []
    for i in range(count):
        r = rows.get(lo + i)
        if r is not None and (r.acked or r.dead or r.version is not None or r.visible_at):
            continue
        candidates.append(i)
    stmt = "SELECT lo FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?"
    futures = [
        (i, conn.execute_async(stmt, (queue.queue_id, republish_key(lo + i)))) for i in candidates
    ]
    return [i for i, f in futures if f.result().one() is None]


# -- closing --------------------------------------------------------------------------------


class Settled(enum.Enum):
    CLOSED = "closed: readers deliver the rows"
    TO_REPAIR = "handed to repair, which delivers the rows"
    REPAIRED = "handed to repair and repaired before all rows landed: some are never delivered"
    FORGOTTEN = (
        "handed to repair, which read every row, delivered them as copies and forgot the range: "
        "the copies' ids are no longer known"
    )
    ROLLED_BACK = "rolled back by another attempt of this write, which had reserved them"


def restart_repair_clock(conn: Connection, queue: QueueInfo, res: monoton.Reservation) -> bool:
    """Make repair of the skipped block ``res`` wait for what we write now.

    Records the range as skipped if the reader that skipped the block died before doing so,
    or gives a range not repaired yet a new ``skipped_at``: a repair that read the old stamp
    can no longer mark it done (its compare-and-set names the stamp), and one that reads the
    new stamp reads the block after this call, so after every write that preceded it. This
    holds whatever the stamp's value (ours, so that a lost reply can be read back exactly);
    its value only decides how long repair waits. False: the range is repaired already, and
    what lands there now is never delivered.

    Also False when repair forgot the range (``ranges.forget_ranges``): the range row is gone
    then, so an insert would bring back a range whose bucket is reclaimed (repair would count
    its ids lost a second time and report success to this writer). A forget changes the
    reservation row before it deletes the range row, so the reservation is read before the
    insert, and again after an insert that applied: then the insert is taken back.
    """
    if monoton.is_forgotten(conn, queue, res.lo):
        return False
    faults.point("settle.before_restart_clock", queue=queue, res=res)
    read = "SELECT hi, done, skipped_at FROM {ks}.skipped WHERE queue_id = ? AND lo = ?"
    for _attempt in range(3):
        stamp = _stamp(clock.now())
        ins = conn.cas(
            "INSERT INTO {ks}.skipped (queue_id, lo, hi, skipped_at) VALUES (?, ?, ?, ?) "
            "IF NOT EXISTS",
            (queue.queue_id, res.lo, res.hi, stamp),
            read=read,
            read_params=(queue.queue_id, res.lo),
            applied=_skipped_at(stamp),
        )
        if ins.was_applied:
            if monoton.is_forgotten(conn, queue, res.lo):
                _withdraw(conn, queue, res, stamp)
                return False
            return True
        if getattr(ins.one(), "done", None):
            return False
        upd = conn.cas(
            "UPDATE {ks}.skipped SET skipped_at = ? WHERE queue_id = ? AND lo = ? IF done = null",
            (stamp, queue.queue_id, res.lo),
            read=read,
            read_params=(queue.queue_id, res.lo),
            applied=_skipped_at(stamp),
        )
        if upd.was_applied:
            return True
        if getattr(upd.one(), "done", None):
            return False
        # Neither applied nor repaired: a statement that timed out before it ran. Again.
    raise ContentionError(
        f"could not hold back the repair of ids {res.lo}..{res.hi} of queue {queue.name!r}; "
        "retry the write"
    )


def _withdraw(conn: Connection, queue: QueueInfo, res: monoton.Reservation, stamp) -> None:
    """Take back a range row this writer inserted for a block repair had forgotten."""
    log.info(
        "queue %s: repair forgot ids %d..%d while this writer pushed its repair back; "
        "taking the range back out",
        queue.name,
        res.lo,
        res.hi,
    )
    conn.cas(
        "DELETE FROM {ks}.skipped WHERE queue_id = ? AND lo = ? IF skipped_at = ? AND done = null",
        (queue.queue_id, res.lo, stamp),
        read="SELECT skipped_at, done FROM {ks}.skipped WHERE queue_id = ? AND lo = ?",
        read_params=(queue.queue_id, res.lo),
        applied=lambda row: row is None or row.skipped_at != stamp,
    )


def _stamp(ts: float) -> dt.datetime:
    # Millisecond precision, as Cassandra stores it, so a read-back compares equal.
    return dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=int(ts * 1000))


def _close_found(conn: Connection, queue: QueueInfo, res: monoton.Reservation) -> Settled | None:
    """Close a block another attempt reserved; None: readers skipped it (not closed)."""
    for _attempt in range(3):
        out = conn.cas(
            "DELETE FROM {ks}.monoton WHERE queue_id = ? AND lo = ? "
            "IF hi = ? AND skipped = null AND released = null AND closed = null",
            (queue.queue_id, res.lo, res.hi),
            read="SELECT hi, skipped, released, closed FROM {ks}.monoton "
            "WHERE queue_id = ? AND lo = ?",
            read_params=(queue.queue_id, res.lo),
            # After a lost reply only "the row is gone" says it applied; settled below.
            applied=lambda row: row is None or row.hi is None,
        )
        if out.was_applied and not out.resolved:
            return Settled.CLOSED
        row = out.one()
        if row is None or getattr(row, "hi", None) is None:
            # Gone: closed by a successful attempt (ours after a lost reply, or the owner's),
            # or by a rollback, which forgets the key before it closes the block.
            if key_names(conn, queue, res.key, res.lo):
                return Settled.CLOSED
            return Settled.ROLLED_BACK
        if row.released:
            return Settled.ROLLED_BACK
        if row.skipped:
            if getattr(row, "closed", None):
                return None  # forgotten by repair: nothing to claim, see settle
            break
        # Still open: the statement never ran (a timeout before it reached Cassandra).
    else:
        raise ContentionError(
            f"could not close ids {res.lo}..{res.hi} of queue {queue.name!r}; retry the write"
        )
    # Skipped: our rows are repair's now, unless the owner's rollback wins this race.
    for _attempt in range(3):
        released = getattr(row, "released", None)
        if released is False:
            return None  # claimed as written: by us, or by another attempt with our rows
        if released:
            return Settled.ROLLED_BACK
        if row is None or getattr(row, "hi", None) is None:
            return (
                Settled.CLOSED if key_names(conn, queue, res.key, res.lo) else Settled.ROLLED_BACK
            )
        mine = conn.cas(
            "UPDATE {ks}.monoton SET released = false WHERE queue_id = ? AND lo = ? "
            "IF hi = ? AND released = null",
            (queue.queue_id, res.lo, res.hi),
            read="SELECT hi, released FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
            read_params=(queue.queue_id, res.lo),
            applied=lambda row: row is not None and row.released is False,
        )
        if mine.was_applied:
            return None
        row = mine.one()
    raise ContentionError(
        f"could not settle ids {res.lo}..{res.hi} of queue {queue.name!r}; retry the write"
    )


def _close_own(
    conn: Connection, queue: QueueInfo, res: monoton.Reservation, plain: bool | None = None
) -> Settled | None:
    """Close a block this writer reserved: CLOSED, TO_REPAIR, or None when readers handed it
    to repair first (the caller makes repair wait for what was written).

    ``plain`` decides the first attempt (see settle); a retry decides again: plain while the
    writer is still within half the repair timeout (a plain close carries its own timestamp,
    so sending it twice is harmless), a compare-and-set after that. Two things follow from a
    plain close having been sent:

    * after its reply was lost, the compare-and-set of a retry finds the row gone because
      that close applied, not because repair forgot the block (``monoton.close``,
      ``after_plain``): the rows are delivered and are not written again;
    * a plain delete removes the row whatever it holds, a reader's skip included. Until half
      the repair timeout (the writer's clock, from before its reservation) no reader can have
      skipped the block; a plain close that completes later, or whose outcome was unknown,
      asks whether the block's range was recorded as skipped (:func:`_skipped_before_close`).
      If so readers exclude the rows and repair delivers them: TO_REPAIR, so that the caller
      copies grouped messages in place instead of returning ids that are never delivered.
    """
    sent_plain = False
    for attempt in range(3):
        now_plain = (
            plain if attempt == 0 and plain is not None else monoton.closes_plainly(queue, res)
        )
        try:
            closed = monoton.close(
                conn, queue, res, now_plain, after_plain=sent_plain and not now_plain
            ).result()
        except Exception:
            sent_plain = sent_plain or now_plain
            if attempt == 2:
                raise
            log.warning("closing ids %d..%d timed out; retrying", res.lo, res.hi, exc_info=True)
            continue
        if not closed:
            return None
        if (sent_plain or now_plain) and _skipped_before_close(conn, queue, res):
            log.info(
                "queue %s: the close of ids %d..%d landed after readers handed the block to "
                "repair; repair delivers them",
                queue.name,
                res.lo,
                res.hi,
            )
            return Settled.TO_REPAIR
        return Settled.CLOSED
    raise AssertionError("unreachable")


def _skipped_before_close(conn: Connection, queue: QueueInfo, res: monoton.Reservation) -> bool:
    """Did readers skip the block before this writer's plain close removed its row?

    Not if the close completed within half the repair timeout of the reservation: a reader
    skips a block only once it is a repair timeout old on the reader's clock, and the clocks
    agree within half of it (the protocol page's conditions). Otherwise the range row tells:
    a reader records it after its skip applied, and a skip cannot apply once the row is gone,
    so a range row means the skip came first. (A reader that stalls between its skip and its
    record of the range, past this read, is missed: the put then returns ids that repair
    delivers under new ones, as before.)
    """
    if time.monotonic() - res.reserved_at < queue.repair_timeout / 2:
        return False
    row = conn.execute(
        "SELECT hi FROM {ks}.skipped WHERE queue_id = ? AND lo = ?", (queue.queue_id, res.lo)
    ).one()
    return row is not None


def settle(
    conn: Connection,
    queue: QueueInfo,
    block: Block,
    plain: bool | None = None,
    *,
    written_in_time: bool = False,
) -> Settled:
    """Close ``block`` once all its rows are written, and say whether they will be delivered:
    CLOSED, TO_REPAIR and FORGOTTEN mean yes; REPAIRED and ROLLED_BACK mean they must be
    written again (the caller still has them, or fails so that its retry does). ``plain``: for
    a block of our own, the caller's :func:`monoton.closes_plainly`, so that the close is the
    one the caller counted on.

    ``written_in_time``: every row of our own block was written (its reply back) within half
    the repair timeout of the reservation, measured on this writer's monotonic clock from
    before it. No reader can have skipped the block by then (the clock condition), so any
    repair of its range read every row: when that repair has also forgotten the range (its
    bucket reclaimed, the keys of its copies dropped), the rows were delivered as copies and
    are not written again, however long the writer stalled before this close (FORGOTTEN).
    Without it such a writer cannot tell repaired rows from rows that landed after repair's
    read, and writes them all again (REPAIRED)."""
    res = block.res
    if block.own:
        own = _close_own(conn, queue, res, plain)
        if own is not None:
            return own
    else:
        found = _close_found(conn, queue, res)
        if found is not None:
            return found
    # Readers skipped the block: make repair wait for what we wrote (every write is in).
    if restart_repair_clock(conn, queue, res) or not undelivered(conn, queue, res.lo, res.count):
        log.info(
            "queue %s: ids %d..%d were handed to repair while being written; repair delivers them",
            queue.name,
            res.lo,
            res.hi,
        )
        return Settled.TO_REPAIR
    if written_in_time and block.own:
        log.warning(
            "queue %s: ids %d..%d were repaired and forgotten before their writer closed them; "
            "repair delivered them as copies, so nothing is written again",
            queue.name,
            res.lo,
            res.hi,
        )
        return Settled.FORGOTTEN
    return Settled.REPAIRED


# -- rolling back --------------------------------------------------------------------------------


def roll_back(
    conn: Connection, queue: QueueInfo, res: monoton.Reservation, written: int | None = None
) -> bool:
    """Undo a failed write into a block this writer reserved: rows marked dead (no reader
    delivers half a block), key forgotten (a retry starts afresh), block given back.

    False, and nothing changed, when the block is already closed or another attempt that
    shares it claimed it as written: its rows are that attempt's success now.
    """
    if res.key is not None:
        for _attempt in range(3):
            claim = conn.cas(
                "UPDATE {ks}.monoton SET released = true WHERE queue_id = ? AND lo = ? "
                "IF hi = ? AND released = null",
                (queue.queue_id, res.lo, res.hi),
                read="SELECT hi, released FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
                read_params=(queue.queue_id, res.lo),
                applied=lambda row: row is not None and row.released is True,
            )
            row = claim.one()
            # Not applied and still open and unclaimed: the statement never ran. Again.
            if (
                claim.was_applied
                or getattr(row, "hi", None) is None
                or getattr(row, "released", None) is not None
            ):
                break
        if not claim.was_applied:
            log.info(
                "queue %s: ids %d..%d were closed or claimed by another attempt of key %s; "
                "leaving them",
                queue.name,
                res.lo,
                res.hi,
                res.key,
            )
            return False
    finish_rollback(conn, queue, res, written)
    return True


def finish_rollback(
    conn: Connection, queue: QueueInfo, res: monoton.Reservation, written: int | None = None
) -> None:
    # The key goes first: if the rollback fails midway, a retry takes a new block instead of
    # rewriting rows that may already be marked dead. Only if it still names this block: a
    # retry may have taken the key for a new block meanwhile.
    if res.key is not None:
        for _attempt in range(3):
            forgot = conn.cas(
                "DELETE FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ? IF lo = ?",
                (queue.queue_id, res.key, res.lo),
                read="SELECT lo FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
                read_params=(queue.queue_id, res.key),
                applied=lambda row: row is None or row.lo != res.lo,
            )
            row = forgot.one()
            if forgot.was_applied or getattr(row, "lo", None) != res.lo:
                break
        else:
            # Marking rows dead under a key that still names them would make a retry skip
            # them as written; leave the rollback to whoever finds the block released.
            raise ContentionError(
                f"could not forget key {res.key!r} of queue {queue.name!r}; retry later"
            )
    # The marks expire with the rows (written with the queue's message TTL just before; an
    # id never written gets a mark that expires as its message would have), never after.
    upto = res.hi if written is None else res.lo + written
    pipe = Pipeline(conn)
    stmt = conn.prepare(
        "UPDATE {ks}.messages USING TTL ? SET dead = true "
        "WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    for mid in range(res.lo, upto):
        pipe.submit(stmt, (queue.ttl, queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
    pipe.drain()
    monoton.close(conn, queue, res).result()
