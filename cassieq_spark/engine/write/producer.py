"""Enqueueing: reserve a block of ids, write the rows, close the reservation."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ...errors import ContentionError
from ..core import monoton
from ..core.counters import Counters
from ..core.queues import QueueInfo
from ..store.session import Connection
from . import settle, writes

log = logging.getLogger(__name__)


def enqueue(
    conn: Connection,
    counters: Counters,
    queue: QueueInfo,
    payloads: Sequence[bytes],
    headers: Sequence[dict[str, str] | None] | None = None,
    delays: Sequence[float] | None = None,
    key: str | None = None,
) -> list[int]:
    """Write already-validated payloads; one reservation per ``MAX_BLOCK`` messages.

    Returns each message's id. With ``key``, the same call repeated (a retry after a crash)
    writes into the same ids and enqueues nothing twice. Returns only once every message
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
        ids.extend(_enqueue_block(conn, counters, queue, rows, key and f"{key}#{start}"))
    return ids


def _enqueue_block(
    conn: Connection, counters: Counters, queue: QueueInfo, rows: writes.Rows, key: str | None
) -> list[int]:
    ids = [0] * len(rows)
    todo = list(range(len(rows)))  # offsets of the rows still to settle
    for _hop in range(writes.MAX_HOPS):
        placed = writes.Placed(ids=[])
        try:
            # A keyed call is repeated with the same rows: the key needs no fingerprint.
            writes.place(conn, queue, key, rows.subset(todo), placed=placed, check_content=False)
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
        outcome = settle.settle(conn, queue, block)
        if outcome in (settle.Settled.CLOSED, settle.Settled.TO_REPAIR):
            counters.count_enqueued(queue, placed.written)
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
