"""Enqueueing: reserve a block of ids, write the rows, close the reservation."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from . import monoton
from .buckets import bucket_of
from .counters import Counters
from .messages import Pipeline, write_messages
from .queues import QueueInfo
from .session import Connection

log = logging.getLogger(__name__)


def abort(
    conn: Connection, queue: QueueInfo, res: monoton.Reservation, written: int | None = None
) -> None:
    """Undo a failed write: a keyed block is forgotten so a retry starts afresh, rows already
    written are marked dead (so no reader delivers half a block), the block is given back.

    The key goes first: if the rollback itself fails midway, a retry takes a new block instead
    of rewriting rows that may already be marked dead (a loss); the worst case left is the
    abandoned block's rows being republished by repair next to the retry's (a duplicate)."""
    if res.key:
        conn.execute(
            "DELETE FROM {ks}.reservation_keys WHERE queue_id = ? AND key = ?",
            (queue.queue_id, res.key),
        )
    upto = res.hi if written is None else res.lo + written
    pipe = Pipeline(conn)
    stmt = conn.prepare(
        "UPDATE {ks}.messages SET dead = true WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    for mid in range(res.lo, upto):
        pipe.submit(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
    pipe.drain()
    monoton.close(conn, queue, res).result()


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

    With ``key``, the same call repeated (a retry after a crash) writes into the same ids and
    enqueues nothing twice.
    """
    ids: list[int] = []
    for start in range(0, len(payloads), monoton.MAX_BLOCK):
        end = min(len(payloads), start + monoton.MAX_BLOCK)
        n = end - start
        if key is not None:
            res = monoton.reserve_keyed(conn, queue, f"{key}#{start}", n)
            if res.count != n:
                raise RuntimeError(
                    f"reservation {res.key} holds {res.count} ids, the retry has {n} rows"
                )
        else:
            res = monoton.reserve(conn, queue, n)
        if res.closed:
            ids.extend(range(res.lo, res.hi))
            continue
        try:
            write_messages(
                conn,
                queue,
                res.lo,
                payloads[start:end],
                headers[start:end] if headers is not None else None,
                delays[start:end] if delays is not None else None,
            )
        except Exception:
            log.exception(
                "writing ids %d..%d of queue %s failed; rolling the block back",
                res.lo,
                res.hi,
                queue.name,
            )
            try:
                abort(conn, queue, res)
            except Exception:
                log.exception("rollback failed; the block stays open and repair will handle it")
            raise
        monoton.close(conn, queue, res).result()
        counters.add(queue, "enqueued", n)
        ids.extend(range(res.lo, res.hi))
    return ids
