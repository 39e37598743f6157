"""Id allocation from the ``monoton`` row, by blocks, with in-flight reservations.

One lightweight transaction reserves a whole block ``[lo, hi)`` and, in the same conditional
batch on the same partition, records the reservation as an open row. Writers close the row
once every id of the block is written. Readers compute a *horizon*: the highest id below which
nothing may still be in flight, i.e. the lowest ``lo`` over open reservations younger than the
queue's repair timeout. Older open reservations are *abandoned* (their writer presumably died);
readers may pass them, and hand them to repair, which republishes whatever lands there late.

Handing a reservation to repair (``skip``) and a late writer closing it must not both win, or
one reader would deliver the late messages while repair republishes them too. Both are
compare-and-sets on the reservation row (``IF hi = ?`` / ``IF hi = ? AND skipped = null``),
so exactly one wins. A writer that finishes well within the repair timeout (half of it,
measured on its own clock) closes with a plain write: no reader can see its block as abandoned
yet.

What a reservation row says, and what its absence says:

* a row with ``hi`` and neither ``skipped`` nor ``closed``: open, its writer is on it;
* ``skipped``: handed to repair, which delivers what lands there until it finishes the range;
* ``skipped`` and ``closed``: *forgotten* (:func:`forget`): repair finished the range, its
  bucket is reclaimed and its bookkeeping dropped; nothing written there now is delivered.
  Kept, for as long as a key can name it, for every *keyed* block, so that a replay of the key
  or a late close of its writer cannot take the block for written;
* no row: closed by its writer (or given back), so every row it wrote is delivered. For an
  unkeyed block, also what a forget leaves (no key can ask for it again); its only writer
  tells the two apart by the repair pointer, see :func:`close`.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
import uuid
from dataclasses import dataclass
from enum import Enum

from ...errors import ContentionError
from ..store import faults, suspend
from ..store.schema import SENTINEL_LO
from ..store.session import Connection
from . import clock, pointers
from .queues import QueueInfo

log = logging.getLogger(__name__)

# A reservation never spans more ids than this, so a reader looking for reservations that
# overlap id x only has to look at rows with lo >= x - MAX_BLOCK.
MAX_BLOCK = 10_000
# One read of the reservations covers at most this many ids (so rows, and closed reservations'
# tombstones): readers of the whole backlog read it step by step. Two blocks: a windowed
# reader's look-back and window fit in one read.
HORIZON_STEP = 2 * MAX_BLOCK
OPEN_TTL = 14 * 24 * 3600  # an open reservation outlives any repair timeout
# A forgotten keyed block's row is kept this long from the forget on: longer than the key that
# names it, which was written (with the reservation_keys table's TTL, as long) before.
FORGOTTEN_TTL = 14 * 24 * 3600
# A plain close is stamped this far ahead of the writer's clock: the tolerated skew between a
# writer and the coordinator that stamped its reservation.
CLOSE_STAMP_AHEAD = 300.0
MAX_ATTEMPTS = 200
KEY_CLAIM_ATTEMPTS = 5

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
    skipped: bool = False  # found again, but readers handed it to repair meanwhile
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
    """The counter, read through the sentinel row: a read of the partition's first row
    would walk every tombstone that closed reservations left."""
    cql = "SELECT next, lo FROM {ks}.monoton WHERE queue_id = ? AND lo = ?"
    if serial:
        # At the serial level the read finishes any Paxos round in progress on the partition:
        # a replica held up by a restart times it out, and it is retried within the budget
        # (a sink task once failed on the first WriteTimeout here during a rolling restart).
        row = conn.read_serial(cql, (queue.queue_id, SENTINEL_LO))
    else:
        row = conn.execute(cql, (queue.queue_id, SENTINEL_LO)).one()
    if row is not None:
        return row.next or 0
    # A queue made before the sentinel existed: read the old way once, then add it.
    row = conn.execute(
        "SELECT next FROM {ks}.monoton WHERE queue_id = ? LIMIT 1", (queue.queue_id,)
    ).one()
    add_sentinel(conn, queue.queue_id)
    return (row.next or 0) if row else 0


def counter(conn: Connection, queue: QueueInfo) -> int:
    """The allocation counter: every id below it is reserved (written, being written, or
    abandoned), and every id a writer was ever given is below it (a receipt that names a larger
    id was not issued by a get). One row read, whatever the backlog."""
    return _read_next(conn, queue, serial=False)


def forget_counter_seen(queue_id) -> None:
    """Forget the counter this process saw after its last reservation on the queue, so that its
    next reservation reads the counter first, as a writer in a fresh process does."""
    _last_next.pop(queue_id, None)


def add_sentinel(conn: Connection, queue_id, future: bool = False):
    """The always-present row at ``SENTINEL_LO``. Stamped 1, so it never shadows anything."""
    f = conn.execute_async(
        "INSERT INTO {ks}.monoton (queue_id, lo) VALUES (?, ?) USING TIMESTAMP 1",
        (queue_id, SENTINEL_LO),
    )
    return f if future else f.result()


def reserve(conn: Connection, queue: QueueInfo, count: int, *, owner_hint: str = "") -> Reservation:
    """Reserve ``count`` consecutive ids with one lightweight transaction (more under contention)."""
    if not 1 <= count <= MAX_BLOCK:
        raise ValueError(f"a reservation holds 1..{MAX_BLOCK} ids, asked for {count}")
    # A ':' in the owner marks a keyed block (is_keyed_owner): its row outlives a forget.
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
        res = conn.cas(
            _RESERVE,
            (hi, queue.queue_id, lo, queue.queue_id, lo, hi, owner, OPEN_TTL),
            read="SELECT next, owner FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
            read_params=(queue.queue_id, lo),
            applied=lambda row: row is not None and row.owner == owner,
        )
        if res.was_applied:
            if attempt == 0 and not res.resolved:
                _last_next[queue.queue_id] = hi
            else:
                _last_next.pop(queue.queue_id, None)
            return Reservation(lo, hi, owner, reserved_at=started)
        row = res.one()
        seen = getattr(row, "next", None)
        if seen == hi and _owned(conn, queue, lo, owner):
            # The counter already is where our batch would put it: a re-sent request whose
            # first copy applied. Taking a new block would leave this one open forever.
            return Reservation(lo, hi, owner, reserved_at=started)
        current = seen if seen is not None else _read_next(conn, queue, serial=True)
        suspend.pause(random.uniform(0, delay))
        delay = min(delay * 2, 0.2)
    raise ContentionError(
        f"could not reserve ids on queue {queue.name!r} after {MAX_ATTEMPTS} attempts; too many "
        "writers race for single ids: batch with put_many or retry later"
    )


def _owned(conn: Connection, queue: QueueInfo, lo: int, owner: str) -> bool:
    row = conn.read_serial(
        "SELECT owner FROM {ks}.monoton WHERE queue_id = ? AND lo = ?", (queue.queue_id, lo)
    )
    return row is not None and row.owner == owner


class Closing:
    """A close in progress; ``result()`` waits and says whether the writer's close won.

    False means a reader handed the block to repair first: what was written there is
    repair's to deliver (and what lands after repair finished would be lost).
    """

    def __init__(self, future=None, closed: bool = True):
        self._future = future
        self._closed = closed

    def result(self) -> bool:
        if self._future is not None:
            self._future.result()
            self._future = None
        return self._closed


def closes_plainly(queue: QueueInfo, res: Reservation) -> bool:
    """Would :func:`close` close ``res`` now with a plain delete (its writer is well within
    the repair timeout, so no reader can have handed the block to repair yet)?"""
    elapsed = time.monotonic() - res.reserved_at if res.reserved_at else float("inf")
    return elapsed < queue.repair_timeout / 2


def close(
    conn: Connection,
    queue: QueueInfo,
    res: Reservation,
    plain: bool | None = None,
    *,
    after_plain: bool = False,
) -> Closing:
    """The block is written (or given back): delete its reservation row.

    A closed reservation is the absence of its row, so nothing about it can reopen later (a
    TTL'd ``closed`` cell could expire before the row) and the partition only holds what is
    in flight. A writer that finishes within half the repair timeout (its own monotonic
    clock) deletes with a plain write stamped a few minutes ahead, which no compare-and-set
    on that row can shadow, whatever the clocks (a reservation's ``lo`` is never reused).
    Later, the close is a compare-and-set that loses to a reader that already handed the
    block to repair; then repair republishes what was written, and nothing is delivered twice.

    It also loses to a forget (the block was skipped, repaired and forgotten while its writer
    stalled): ``IF hi = ?`` fails on the marker of a keyed block and on the missing row of an
    unkeyed one. When the reply is lost and the row is gone, either this close applied or a
    forget came first; a forget happens only once the repair pointer has passed the block, so
    a pointer still below its end means the close applied. (A pointer past it is read as a
    forget: wrong only if readers consumed the block and repair reclaimed it between the close
    and the read-back, and then the rows are written again, never lost.)

    ``plain``: the caller's :func:`closes_plainly` taken a moment before (it sent something
    that depends on the close being plain); None: decided here.

    ``after_plain``: an earlier plain close of this block was sent and its outcome is unknown
    (its reply was lost). A missing row then means closed, whatever the repair pointer says:
    either that delete applied, or readers skipped the block and repair delivered it and
    forgot it; a plain close is sent within half the repair timeout, after every row was
    written, so any repair of the block read the range after all of them landed. Whether that
    delete landed after a reader's skip is the caller's to ask (``settle``).
    """
    if closes_plainly(queue, res) if plain is None else plain:
        faults.point("monoton.before_plain_close", queue=queue, res=res)
        stamp = int((clock.now() + CLOSE_STAMP_AHEAD) * 1_000_000)
        return Closing(
            conn.execute_async(
                "DELETE FROM {ks}.monoton USING TIMESTAMP ? WHERE queue_id = ? AND lo = ?",
                (stamp, queue.queue_id, res.lo),
            )
        )
    faults.point("monoton.before_late_close", queue=queue, res=res)
    for _attempt in range(3):
        out = conn.cas(
            "DELETE FROM {ks}.monoton WHERE queue_id = ? AND lo = ? IF hi = ? AND skipped = null",
            (queue.queue_id, res.lo, res.hi),
            read="SELECT hi, skipped FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
            read_params=(queue.queue_id, res.lo),
            applied=lambda row: row is None or row.hi is None,
        )
        row = out.one()
        if out.was_applied or getattr(row, "hi", None) is None or getattr(row, "skipped", None):
            break
        # Still open and not skipped: the statement never ran (a timeout before it ran).
    else:
        raise ContentionError(
            f"could not close ids {res.lo}..{res.hi} of queue {queue.name!r}; retry the write"
        )
    if after_plain and (out.was_applied or getattr(row, "hi", None) is None):
        return Closing(closed=True)
    if out.was_applied and out.resolved and repaired_past(conn, queue, res.hi):
        return Closing(closed=False)
    return Closing(closed=out.was_applied)


def repaired_past(conn: Connection, queue: QueueInfo, end: int) -> bool:
    """Has the repair pointer passed ``end``? Ranges below it may be forgotten."""
    return pointers.read(conn, queue).repair * queue.bucket_size >= end


class Handed(Enum):
    """What :func:`skip` found the reservation to be."""

    TO_REPAIR = "handed to repair (by this call or an earlier one)"
    CLOSED = "closed by its writer: readers deliver it as usual"
    FORGOTTEN = "repaired and forgotten: nothing there is delivered any more"


def skip(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> Handed:
    """Hand the abandoned reservation ``[lo, hi)`` to repair, unless its writer closed it
    first (the block is complete and readers deliver it as usual) or repair forgot it already
    (a reader whose view of the reservations is older than the forget).

    ``IF hi = ?`` fails on a row that is gone (closed), so a skip can never bring a closed
    reservation back as a row of its own; ``closed = null`` keeps a forgotten one forgotten.
    """
    res = conn.cas(
        "UPDATE {ks}.monoton SET skipped = true WHERE queue_id = ? AND lo = ? "
        "IF hi = ? AND closed = null",
        (queue.queue_id, lo, hi),
        read="SELECT hi, skipped, closed FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        read_params=(queue.queue_id, lo),
        applied=lambda row: row is not None and bool(row.skipped) and not row.closed,
    )
    if res.was_applied:
        return Handed.TO_REPAIR
    row = res.one()
    if getattr(row, "closed", None) and getattr(row, "skipped", None):
        return Handed.FORGOTTEN
    return Handed.TO_REPAIR if getattr(row, "skipped", None) else Handed.CLOSED


def is_keyed_owner(owner: str | None) -> bool:
    """Was the block with this ``owner`` reserved under a key (:func:`reserve_keyed`)?"""
    return owner is not None and ":" in owner


def forget(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> bool:
    """Repair finished the skipped range ``[lo, hi)`` and reclaimed its bucket: drop its
    reservation row, or for a keyed block rewrite it as the *forgotten* marker (``skipped``
    and ``closed``, kept :data:`FORGOTTEN_TTL`). True when a marker is kept: then the keys of
    the range's republished copies must stay as well, since a replay of the block's key asks
    them which rows repair delivered.

    Both are compare-and-sets conditioned on ``skipped``: a row that is not (or no longer)
    skipped is not repair's to forget.
    """
    row = conn.execute(
        "SELECT hi, owner, skipped FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        (queue.queue_id, lo),
    ).one()
    if row is None or not row.skipped:
        return False
    if not is_keyed_owner(row.owner):
        conn.cas(
            "DELETE FROM {ks}.monoton WHERE queue_id = ? AND lo = ? IF skipped = true",
            (queue.queue_id, lo),
            read="SELECT hi FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
            read_params=(queue.queue_id, lo),
            applied=lambda row: row is None,
        )
        return False
    out = conn.cas(
        "UPDATE {ks}.monoton USING TTL ? SET hi = ?, skipped = true, closed = true "
        "WHERE queue_id = ? AND lo = ? IF skipped = true",
        (FORGOTTEN_TTL, hi, queue.queue_id, lo),
        read="SELECT hi, skipped, closed FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        read_params=(queue.queue_id, lo),
        applied=lambda row: row is not None and bool(row.skipped) and bool(row.closed),
    )
    return bool(out.was_applied)


def is_forgotten(conn: Connection, queue: QueueInfo, lo: int) -> bool:
    """For a block readers handed to repair: has repair forgotten it since? Its row is then
    the forgotten marker, or gone (only a forget removes a skipped block's row)."""
    row = conn.read_serial(
        "SELECT hi, skipped, closed FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        (queue.queue_id, lo),
    )
    return row is None or row.hi is None or bool(row.skipped and row.closed)


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
    backlog. Without, the reservations are read :data:`HORIZON_STEP` ids at a time up to the
    first open one younger than the repair timeout (``open_count`` counts those read).
    """
    now = clock.now() if now is None else now
    lo_from = max(0, from_id - MAX_BLOCK)
    limit = None if window is None else from_id + window
    # The first read, up to one step, returns the counter (static) with its rows: every
    # reservation below that counter was made before the read, so later steps, bounded by
    # it, see every one of them, and none made since can lie below the end given out.
    first_end = lo_from + HORIZON_STEP if limit is None else min(limit, lo_from + HORIZON_STEP)
    rows = _reservations(conn, queue, lo_from, first_end)
    if not any(r.next is not None for r in rows):
        # No row in range, so Cassandra returned no static `next` with it. Reading `next` now
        # and using it as the end would pass a reservation made in between, still open; so
        # look again below the `next` just read: whatever was reserved before that read shows.
        faults.point("monoton.horizon_no_rows", queue=queue)
        next_id = _read_next(conn, queue, serial=False)
        rows = [*_reservations(conn, queue, lo_from, min(first_end, next_id)), _Next(next_id)]
    next_id = max(r.next for r in rows if r.next is not None)
    upper = next_id if limit is None else min(next_id, limit)
    cutoff = now - queue.repair_timeout
    lo = first_end
    step = rows
    while lo < upper and not _young_open(step, from_id, cutoff):
        # Step by step: one read never walks more than a step of closed reservations (row
        # tombstones until compaction), far below what makes Cassandra abort a read. Past an
        # open reservation younger than the repair timeout nothing matters: the end is below.
        step = _reservations(conn, queue, lo, min(upper, lo + HORIZON_STEP))
        rows.extend(step)
        lo += HORIZON_STEP
    safe_end = None
    abandoned: list[tuple[int, int]] = []
    open_count = 0
    for r in rows:
        if r.lo is None or r.hi is None or r.hi <= from_id:
            continue  # a row without `hi` is what is left of a closed one
        if r.closed:
            # Forgotten by repair (with `skipped`; see forget), or closed by an older version
            # of this code: nothing left to wait for or to hand to repair.
            continue
        if r.skipped:
            abandoned.append((r.lo, r.hi))  # repair owns it, whatever its writer did since
            continue
        open_count += 1
        if _created(r) < cutoff:
            abandoned.append((r.lo, r.hi))
        else:
            safe_end = r.lo if safe_end is None else min(safe_end, r.lo)
    end = next_id if safe_end is None else min(safe_end, next_id)
    if window is not None:
        end = min(end, from_id + window)
    end = max(end, from_id)
    return Horizon(next_id, end, tuple(sorted(a for a in abandoned if a[0] < end)), open_count)


@dataclass(frozen=True)
class _Next:
    """Stands for the counter read on its own, shaped like a reservation row."""

    next: int
    lo: None = None
    hi: None = None


def _young_open(rows: list, from_id: int, cutoff: float) -> bool:
    """Does an open reservation younger than ``cutoff`` end above ``from_id`` among ``rows``?
    Then the safe end lies at or below its ``lo``: reservations above it do not matter."""
    return any(
        r.lo is not None
        and r.hi is not None
        and r.hi > from_id
        and not r.closed
        and not r.skipped
        and _created(r) >= cutoff
        for r in rows
    )


def _created(r) -> float:
    return r.created_at.replace(tzinfo=dt.timezone.utc).timestamp() if r.created_at else 0.0


def _reservations(conn: Connection, queue: QueueInfo, lo_from: int, lo_below: int) -> list:
    cols = "SELECT next, lo, hi, created_at, closed, skipped FROM {ks}.monoton WHERE queue_id = ?"
    if lo_below <= lo_from:
        return []
    return list(conn.execute(cols + " AND lo >= ? AND lo < ?", (queue.queue_id, lo_from, lo_below)))


# -- keyed reservations: the exactly-once sink and repair find their block again on replay ----


def find_keyed(conn: Connection, queue: QueueInfo, key: str) -> Reservation | None:
    row = conn.execute(
        "SELECT lo, hi FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
        (queue.queue_id, key),
    ).one()
    if row is None:
        return None
    return _keyed(conn, queue, key, row.lo, row.hi)


def _keyed(conn: Connection, queue: QueueInfo, key: str, lo: int, hi: int) -> Reservation:
    m = conn.execute(
        "SELECT hi, owner, skipped, closed FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        (queue.queue_id, lo),
    ).one()
    # No row (or no `hi` left): the block was closed, its first writer finished. A keyed
    # block repair forgot keeps its row as a marker (skipped and closed): skipped, see forget.
    skipped = bool(m is not None and m.skipped)
    closed = m is None or m.hi is None or bool(m.closed)
    owner = m.owner if m is not None and m.owner else f"key:{key}"
    return Reservation(lo, hi, owner, key=key, closed=closed and not skipped, skipped=skipped)


def reserve_keyed(
    conn: Connection, queue: QueueInfo, key: str, count: int, ttl: int | None = None
) -> Reservation:
    """The block reserved under ``key``: the same one every time the key is asked for again.

    ``ttl``: the key is forgotten after that many seconds (instead of the table's 14 days), so
    the same key asked for later reserves a new block: a producer's deduplication window.

    A replayed Spark task (same query, batch and partition) gets the ids its first attempt
    used; ``closed`` tells it the first attempt finished, so it must write nothing;
    ``skipped`` that readers handed the block to repair (its first writer took too long).

    The key is claimed with a compare-and-set after the block is reserved. If its reply is
    lost, or the driver sends it twice, the key may already name *our* block: the ``lo``
    decides, never "not applied" alone (that was a whole chunk lost).
    """
    found = find_keyed(conn, queue, key)
    if found is not None:
        return found
    res = reserve(conn, queue, count, owner_hint=key[:40])
    for _ in range(KEY_CLAIM_ATTEMPTS):
        claim = conn.cas(
            "INSERT INTO {ks}.reservation_keys (queue_id, key, lo, hi) VALUES (?, ?, ?, ?) "
            "IF NOT EXISTS" + ("" if ttl is None else " USING TTL ?"),
            (queue.queue_id, key, res.lo, res.hi, *(() if ttl is None else (ttl,))),
            read="SELECT lo, hi FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
            read_params=(queue.queue_id, key),
            applied=lambda row: row is not None and row.lo == res.lo,
        )
        row = claim.one()
        if claim.was_applied or (row is not None and getattr(row, "lo", None) == res.lo):
            return Reservation(res.lo, res.hi, res.owner, key=key, reserved_at=res.reserved_at)
        if row is not None:
            break
        # Not applied and no key row: the claim timed out and the SERIAL read that settled it
        # found the key free (a frozen replica in a 3-node run showed it). Nobody holds the
        # key, so claim it again; a late completion of the first claim is ours (same lo).
        log.info("reservation key %s: the claim did not apply and the key is free; again", key)
    # Another attempt of the same task got there first: use its block, give ours back.
    close(conn, queue, res).result()
    if row is not None and getattr(row, "lo", None) is not None:
        return _keyed(conn, queue, key, row.lo, row.hi)
    found = find_keyed(conn, queue, key)
    if found is None:
        raise RuntimeError(f"reservation key {key!r} vanished while it was being claimed")
    return found
