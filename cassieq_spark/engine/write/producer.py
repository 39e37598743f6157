"""Enqueueing: reserve a block of ids, write the rows, close the reservation.

Deduplicated puts (:func:`enqueue_deduplicated`) ride the keyed write: a message with a
deduplication id is written into the block that the id's key names, so every put of that id
while the key lives (:data:`DEDUP_WINDOW_SECONDS` from the first) finds the same block and
returns its id: closed, it writes nothing; open (the first put died mid-write, or runs
alongside), it rewrites the same id, which is harmless (a row's delivery state is never
written by a put). The key expires with the window, so storage is bounded by it.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

from ...errors import ContentionError
from ..core import monoton
from ..core.counters import Counters
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from . import republish, settle, writes

log = logging.getLogger(__name__)

# How long a deduplication id names its message (SQS's MessageDeduplicationId interval): a put
# of the same id within it enqueues nothing and returns the first put's id.
DEDUP_WINDOW_SECONDS = 300


def dedup_key(dedup_id: str) -> str:
    """The reservation key of a deduplication id: a fixed-length digest, so no id (whatever
    characters it holds) can spell another id's key or the key of another kind of write."""
    digest = hashlib.blake2b(dedup_id.encode("utf-8"), digest_size=16).hexdigest()
    return f"dedup:{digest}"


def enqueue_deduplicated(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    payloads: Sequence[bytes],
    dedup_ids: Sequence[str | None],
    headers: Sequence[dict[str, str] | None] | None = None,
    delays: Sequence[float] | None = None,
) -> list[int]:
    """Write already-validated payloads, each with its deduplication id (None: none); returns
    each message's id. A message whose id was put within :data:`DEDUP_WINDOW_SECONDS` is not
    enqueued again: its id is the first put's (the first put's payload is the one stored;
    two puts racing with the same id and different payloads store one of them, whole). The
    same id twice in one call is one message. Messages without an id go in one block.

    Each deduplicated message costs its own keyed block (three compare-and-sets, about four
    round trips): deduplication is for producers that retry, not for bulk loads."""
    if len(dedup_ids) != len(payloads):
        raise ValueError(f"{len(dedup_ids)} deduplication ids for {len(payloads)} payloads")
    ids = [0] * len(payloads)
    plain = [i for i, d in enumerate(dedup_ids) if d is None]
    if plain:
        rows = writes.Rows(payloads, headers, delays).subset(plain)
        for at, mid in zip(
            plain,
            enqueue(conn, counters, queue, rows.payloads, rows.headers, rows.delays),
            strict=True,
        ):
            ids[at] = mid
    first: dict[str, int] = {}
    for i, d in enumerate(dedup_ids):
        if d is None:
            continue
        if d in first:
            ids[i] = ids[first[d]]
            continue
        first[d] = i
        row = writes.Rows(payloads, headers, delays).subset([i])
        (ids[i],) = enqueue(
            conn,
            counters,
            queue,
            row.payloads,
            row.headers,
            row.delays,
            key=dedup_key(d),
            key_ttl=DEDUP_WINDOW_SECONDS,
        )
    return ids


def enqueue(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    payloads: Sequence[bytes],
    headers: Sequence[dict[str, str] | None] | None = None,
    delays: Sequence[float] | None = None,
    key: str | None = None,
    key_ttl: int | None = None,
) -> list[int]:
    """Write already-validated payloads; one reservation per ``MAX_BLOCK`` messages.

    Returns each message's id. With ``key``, the same call repeated (a retry after a crash)
    writes into the same ids and enqueues nothing twice (for ``key_ttl`` seconds when given:
    then the key is forgotten). Returns only once every message
    will be delivered: rows whose block readers handed to repair, and repair finished before
    they landed, are written again into a new block.
    """
    ids: list[int] = []
    for start in range(0, len(payloads), monoton.MAX_BLOCK):
        end = min(len(payloads), start + monoton.MAX_BLOCK)
        rows = writes.Rows(
            payloads[start:end],
            headers[start:end] if headers is not None else None,
            delays[start:end] if delays is not None else None,
        )
        ids.extend(_enqueue_block(conn, counters, queue, rows, key and f"{key}#{start}", key_ttl))
    return ids


def _enqueue_block(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    rows: writes.Rows,
    key: str | None,
    key_ttl: int | None = None,
) -> list[int]:
    ids = [0] * len(rows)
    todo = list(range(len(rows)))  # offsets of the rows still to settle
    counted = False  # the count went out with an earlier hop's close: these rows are in it
    for _hop in range(writes.MAX_HOPS):
        placed = writes.Placed(ids=[])
        try:
            # A keyed call is repeated with the same rows: the key needs no fingerprint.
            writes.place(
                conn,
                queue,
                key,
                rows.subset(todo),
                placed=placed,
                check_content=False,
                key_ttl=key_ttl,
            )
        except Exception:
            _roll_back(conn, queue, placed)
            raise
        assert placed.ids is not None  # given above: place() fills it
        for at, mid in zip(todo, placed.ids, strict=True):
            ids[at] = mid
        if not placed.blocks:
            return ids  # an earlier call with this key wrote them
        block = placed.blocks[0]
        lo, hi = block.res.lo, block.res.hi
        # Every row landed before any reader could skip the block (see settle).
        written_in_time = block.own and monoton.closes_plainly(queue, block.res)
        faults.point("producer.written", queue=queue, res=block.res)
        # Every row is written (its reply came back): the count depends on nothing else, so
        # it travels with the close instead of after it. Only beside a plain close of our own
        # block, which settles as CLOSED or raises, and either way the rows are delivered
        # (an open block goes to repair): the count is never of rows that are written again.
        counting = None
        plain = written_in_time and monoton.closes_plainly(queue, block.res)
        if plain and not counted:
            counting = counters.count_enqueued_alongside(queue, placed.written)
            counted = True
        try:
            outcome = settle.settle(
                conn, queue, block, plain=plain or None, written_in_time=written_in_time
            )
        finally:
            if counting is not None:
                counting.wait()
        if outcome is settle.Settled.TO_REPAIR and rows.headers is not None:
            _copy_grouped(conn, queue, rows, ids, todo)
        if outcome in (settle.Settled.CLOSED, settle.Settled.TO_REPAIR, settle.Settled.FORGOTTEN):
            if counting is None and not counted:
                counters.count_enqueued(queue, placed.written)
            faults.point("producer.enqueued", queue=queue, ids=ids)
            return ids
        todo = [at for at in todo if lo <= ids[at] < hi]
        if outcome is settle.Settled.REPAIRED:
            # Repair finished the range before all our rows landed: write again only what
            # it did not deliver, under a key of its own.
            missing = set(settle.undelivered(conn, queue, lo, hi - lo))
            todo = [at for at in todo if ids[at] - lo in missing]
            key = key and f"{key}@{lo}"
            if not todo:
                return ids
        # ROLLED_BACK: the call that reserved the keyed block gave it up; its key is free.
        log.warning(
            "queue %s: ids %d..%d were %s; writing %d messages again",
            queue.name,
            lo,
            hi,
            outcome.value,
            len(todo),
        )
    raise ContentionError(
        f"could not enqueue into queue {queue.name!r}: its blocks kept being repaired or rolled "
        "back under the writer; retry later"
    )


def _copy_grouped(
    conn: Connection, queue: QueueInfo, rows: writes.Rows, ids: list[int], todo: list[int]
) -> None:
    """Readers handed the block to repair: its grouped messages are copied now, and the call
    returns the copies' ids (``republish.republish_grouped``: a group's order is the order of
    the ids puts return)."""
    assert rows.headers is not None
    written = [republish.Written(ids[at], rows.payloads[at], rows.headers[at]) for at in todo]
    copies = republish.republish_grouped(conn, queue, written)
    for at in todo:
        ids[at] = copies.get(ids[at], ids[at])


def _roll_back(conn: Connection, queue: QueueInfo, placed: writes.Placed) -> None:
    for block in placed.blocks:
        if not block.own:
            continue  # another call's block: that call (or repair) finishes it
        log.warning(
            "writing ids %d..%d of queue %s failed; rolling the block back",
            block.res.lo,
            block.res.hi,
            queue.name,
        )
        try:
            settle.roll_back(conn, queue, block.res)
        except Exception:
            log.exception("rollback failed; the block stays open and repair will handle it")
