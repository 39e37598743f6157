"""Republishing: a copy of a message under a new id, made exactly once per original id.

Rows that land in a block readers handed to repair (its writer took longer than the repair
timeout) are never delivered where they are: readers have passed them. They are delivered as
copies, each written into a block of its own reserved under the key ``repair:<original id>``,
so whoever makes the copy (repair, a second repair, a rerun after a crash, or the writer itself
before its put returns, see :func:`republish_grouped`) finds the same block, and the copy
exists once. A copy carries ``cassieq-origin-queue``/``cassieq-origin-id`` headers naming the
message it copies.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from ..core import clock, monoton
from ..core.buckets import bucket_of
from ..core.clock import to_epoch
from ..core.messages import HEADER_GROUP, HEADER_ORIGIN_ID, HEADER_ORIGIN_QUEUE, write_messages
from ..core.queues import QueueInfo
from ..store import faults, suspend
from ..store.session import Connection

log = logging.getLogger(__name__)

# How many times one message may move on to a new republish block because the block its key
# named was already repaired without it (needs a repair killed at the worst moment, repeatedly).
MAX_REPUBLISH_HOPS = 8

__all__ = [
    "MAX_REPUBLISH_HOPS",
    "Written",
    "block_age",
    "claim_stale_block",
    "copy_of",
    "delivered_copy",
    "handed_to_repair",
    "republish",
    "republish_grouped",
]


class Written(NamedTuple):
    """A message as its writer wrote it: what a copy needs."""

    id: int
    payload: bytes
    headers: dict[str, str] | None


def block_age(conn: Connection, queue: QueueInfo, lo: int, now: float) -> float | None:
    row = conn.execute(
        "SELECT created_at, closed FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
        (queue.queue_id, lo),
    ).one()
    if row is None or row.created_at is None:
        return None
    return now - to_epoch(row.created_at)


def claim_stale_block(conn: Connection, queue: QueueInfo, res: monoton.Reservation) -> bool:
    """May we still write into an open block that readers may already have passed?

    Yes if we can (re)start its repair clock: record it as skipped now, or push back the
    ``skipped_at`` of a range not repaired yet. Its repair then waits the repair timeout
    again and republishes what we write (readers never deliver rows of a skipped range).
    No if its range is already repaired: what lands there now would never be delivered; nor
    if repair forgot it meanwhile (then there is no range row to find, see forget_ranges).
    """
    if res.skipped and monoton.is_forgotten(conn, queue, res.lo):
        return False
    read = "SELECT hi, done FROM {ks}.skipped WHERE queue_id = ? AND lo = ?"
    # After a lost reply: a row that is there and not repaired is as good as our own insert
    # (the update below restarts its clock either way).
    ins = conn.cas(
        "INSERT INTO {ks}.skipped (queue_id, lo, hi, skipped_at) VALUES (?, ?, ?, toTimestamp(now())) "
        "IF NOT EXISTS",
        (queue.queue_id, res.lo, res.hi),
        read=read,
        read_params=(queue.queue_id, res.lo),
        applied=lambda row: row is not None and not row.done,
    )
    if ins.was_applied:
        return True
    upd = conn.cas(
        "UPDATE {ks}.skipped SET skipped_at = toTimestamp(now()) WHERE queue_id = ? AND lo = ? "
        "IF done = null",
        (queue.queue_id, res.lo),
        read=read,
        read_params=(queue.queue_id, res.lo),
        applied=lambda row: row is not None and not row.done,
    )
    return bool(upd.was_applied)


def republish(
    conn: Connection, queue: QueueInfo, row, repair_timeout: float, delay: float = 0.0
) -> int | None:
    """Enqueue a copy of ``row`` exactly once, visible after ``delay`` seconds; returns the id it
    got (None: already done).

    The copy's block is keyed by the original id, so a second repair, or a rerun after a
    crash, finds the same block: closed means done; open and young means a writer (maybe
    us, earlier) is on it and rewriting the same row is harmless; open and old means the
    writer died and readers may have passed the block, see :func:`claim_stale_block`.
    """
    headers = dict(row.headers or {})
    if headers.get(HEADER_ORIGIN_QUEUE) != queue.name or HEADER_ORIGIN_ID not in headers:
        # A copy of a copy (its republish block was abandoned too) keeps the first origin;
        # a dead-lettered message's origin names another queue and is replaced.
        headers[HEADER_ORIGIN_QUEUE] = queue.name
        headers[HEADER_ORIGIN_ID] = str(row.id)
    key = f"repair:{row.id}"
    for _hop in range(MAX_REPUBLISH_HOPS):
        res = monoton.reserve_keyed(conn, queue, f"{key}#0", 1)
        if res.closed:
            return None
        faults.point("ranges.republish_reserved", queue=queue, res=res)
        age = block_age(conn, queue, res.lo, clock.now())
        if age is None:
            # The block's row went after the key was read: another repair (or an earlier
            # attempt of ours) wrote the copy and closed the block in between. Taking it for
            # stale would hand the written copy to repair once more instead of to readers.
            again = monoton.find_keyed(conn, queue, f"{key}#0")
            if again is None or again.closed:
                return None
        fresh = age is not None and age < repair_timeout / 2
        if fresh or claim_stale_block(conn, queue, res):
            write_messages(
                conn, queue, res.lo, [row.payload or b""], [headers], [delay] if delay else None
            )
            monoton.close(conn, queue, res).result()
            return res.lo
        # The block was repaired already. If our copy had landed there, that repair
        # republished it; if not, it is in no block yet: move on to a block of its own.
        copy = conn.execute(
            "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
            (queue.queue_id, res.lo // queue.bucket_size, res.lo),
        ).one()
        if copy is not None:
            return None
        log.warning(
            "queue %s: republish block %d of message %d was repaired before it was written; "
            "using a new block",
            queue.name,
            res.lo,
            row.id,
        )
        key = f"repair:{row.id}@{res.lo}"
    raise RuntimeError(
        f"queue {queue.name}: could not republish message {row.id} after "
        f"{MAX_REPUBLISH_HOPS} attempts; run repair again"
    )


def copy_of(conn: Connection, queue: QueueInfo, message_id: int) -> int | None:
    """The id of the copy :func:`republish` made of ``message_id`` (None: none found): the
    block its key names, followed over the blocks it moved on to."""
    key = f"repair:{message_id}#0"
    for _hop in range(MAX_REPUBLISH_HOPS):
        res = monoton.find_keyed(conn, queue, key)
        if res is None:
            return None
        row = conn.execute(
            "SELECT id FROM {ks}.messages WHERE queue_id = ? AND bucket = ? AND id = ?",
            (queue.queue_id, bucket_of(res.lo, queue.bucket_size), res.lo),
        ).one()
        if row is not None:
            return res.lo
        key = f"repair:{message_id}@{res.lo}"
    return None


def handed_to_repair(conn: Connection, queue: QueueInfo, copy: int) -> bool:
    """Was the one-id block of ``copy`` handed to repair (then the copy is delivered as a copy
    of its own)? A block still open (another party writing the same copy) is waited for, up to
    the repair timeout and a half: by then it is closed or handed to repair."""
    deadline = clock.now() + queue.repair_timeout * 1.5
    while True:
        row = conn.execute(
            "SELECT hi, skipped FROM {ks}.monoton WHERE queue_id = ? AND lo = ?",
            (queue.queue_id, copy),
        ).one()
        if row is None or row.hi is None:
            return False  # closed: readers deliver it there
        if row.skipped:
            return True
        if clock.now() > deadline:
            return False
        suspend.pause(0.1)


def delivered_copy(conn: Connection, queue: QueueInfo, written: Written) -> int | None:
    """Copy ``written`` (exactly once, see :func:`republish`) and return the id the message is
    delivered under: the copy's, or, when the copy's own block was handed to repair too (its
    writer, us or another, was slow again), the copy of that copy, made here the same way.
    None: the copy could not be found (made elsewhere, its block gone)."""
    headers = dict(written.headers or {})
    headers.setdefault(HEADER_ORIGIN_QUEUE, queue.name)
    headers.setdefault(HEADER_ORIGIN_ID, str(written.id))
    current = Written(written.id, written.payload, headers)
    for _hop in range(MAX_REPUBLISH_HOPS):
        copy = republish(conn, queue, current, queue.repair_timeout)
        if copy is None:
            copy = copy_of(conn, queue, current.id)
        if copy is None or not handed_to_repair(conn, queue, copy):
            return copy
        current = Written(copy, written.payload, headers)
    return None


def republish_grouped(
    conn: Connection, queue: QueueInfo, written: Sequence[Written]
) -> dict[int, int]:
    """Copy the grouped messages of a block readers handed to repair, before the writer's call
    returns; returns {original id: the id its message is delivered under}.

    Why the writer does it: a group's order is the order of the ids the puts returned. Readers
    passed the block, so the rows are delivered as copies under new ids; left to repair, a copy
    would be made a repair timeout later, after the group's messages put meanwhile, and its put
    would have returned an id it is not delivered under. Made here, in id order, before the
    put returns, each copy gets an id above every message of the group whose put returned
    earlier, and the put returns the copy's id. The copies are keyed like repair's, so repair
    (which owns the range and republishes what it finds there) makes none of them twice.
    Ungrouped messages are left to repair: nothing orders them.
    """
    copies: dict[int, int] = {}
    for w in sorted(written, key=lambda w: w.id):
        if not w.headers or w.headers.get(HEADER_GROUP) is None:
            continue
        copy = delivered_copy(conn, queue, w)
        if copy is None:
            log.warning(
                "queue %s: the copy of message %d was made elsewhere and could not be found; "
                "its put returns the original id",
                queue.name,
                w.id,
            )
            continue
        copies[w.id] = copy
    return copies
