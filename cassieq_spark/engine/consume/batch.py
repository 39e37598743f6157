"""Batch receive for clients, in the style of SQS ReceiveMessage with long polling:
``get_many`` (the batch acks are in ``batch_ack.py``).

Where ``get_many`` looks, in order (as ``get``):

1. due timers (expired deliveries, delayed messages), in one pass over the due slots: each is
   claimed by its own compare-and-set, exactly as ``get`` claims it (one Paxos round per
   *redelivered* message);
2. fresh messages from the reader pointer up to the horizon: claimed by **one conditional
   batch per bucket partition** of up to :data:`CLAIM_MAX` rows (fewer after a lost race).
   Every row of the batch carries the very condition a single claim has (``IF version = null
   AND acked = null AND dead = null``), and Cassandra applies a conditional batch on one
   partition in one Paxos round, all or nothing. So a batch and a ``get`` (or another batch)
   racing for one row is the same race as two ``get`` calls: exactly one wins, and a message
   is never in flight with two consumers at once. A batch that loses (one of its rows was
   taken meanwhile) claims nothing; the stretch is read afresh and claimed again, at most
   :data:`SCAN_ROUNDS` times.

After a lost reply (``Connection.cas``) the first row of the batch is read back at SERIAL: its
``claimed_by`` token says whether this batch applied, and then it applied to every row.
"""

from __future__ import annotations

import logging
import random
import time
import uuid

from cassandra.query import BatchStatement, BatchType

from ...errors import QueueBusyError
from ..core import clock, monoton, pointers, timers
from ..core.buckets import bucket_of
from ..core.clock import from_epoch, to_epoch
from ..core.messages import Message, is_expired, read_range, remaining_ttl, rows_per_read
from ..core.queues import QueueInfo
from ..core.receipts import PopReceipt
from ..store import faults
from ..stream.lease import stream_busy
from .consumer import (
    CONTENDED_SECONDS,
    HORIZON_WINDOW,
    SCAN_FIRST_CHUNK,
    Consumer,
    ReaderCache,
)
from .timer_path import ROW, SCAN_COLUMNS

log = logging.getLogger(__name__)

# Rows claimed by one conditional batch (one Paxos round): a whole call's worth (of one bucket);
# after a lost race fewer (a batch that loses claims nothing), a quarter after each loss, down
# to CLAIM_MIN. A client that lost a race in the last CONTENDED_SECONDS reads a longer stretch
# and claims from a random place in it, so racing batches spread instead of colliding again.
CLAIM_MAX = 1000
CLAIM_MIN = 16
SCAN_CHUNK = 1024  # rows of the reader path read at once, at most (scan columns only)
SCAN_ROUNDS = 4  # lost batch claims per receive before giving up on the reader path
POLL_FIRST = 0.05  # long polling: the first pause between two looks (seconds) ...
POLL_MAX = 0.5  # ... doubling up to this

_CLAIM_ROW = (
    "UPDATE {ks}.messages USING TTL ? "
    "SET version = 1, deliveries = ?, invisible_until = ?, claimed_by = ? "
    "WHERE queue_id = ? AND bucket = ? AND id = ? "
    "IF version = null AND acked = null AND dead = null"
)
_BODIES = (
    "SELECT id, payload, headers, enqueued_at FROM {ks}.messages "
    "WHERE queue_id = ? AND bucket = ? AND id IN ?"
)
# What the fault seam, the logs and the tests' counters see of a claim batch.
_CLAIM_TEXT = f"BEGIN BATCH {_CLAIM_ROW}; ... APPLY BATCH"


def _claim_statement(c: Consumer, params: list[tuple]) -> BatchStatement:
    """One conditional batch of the prepared single-row claim, repeated: a single prepared
    statement whatever the batch size (a text batch per size would fill the server's cache of
    prepared statements with up to 1,000 variants)."""
    batch = BatchStatement(batch_type=BatchType.LOGGED)
    stmt = c.conn.prepare(_CLAIM_ROW)
    for p in params:
        batch.add(stmt, p)
    batch.query_string = _CLAIM_TEXT
    return batch


# -- receiving ------------------------------------------------------------------------------


def get_many(
    c: Consumer, queue: QueueInfo, vt: float, max_messages: int, wait: float
) -> list[Message]:
    """Up to ``max_messages`` messages; waits up to ``wait`` seconds for a first one (long
    polling: returns as soon as there is at least one)."""
    deadline = time.monotonic() + wait
    pause = POLL_FIRST
    while True:
        out = _receive(c, queue, vt, max_messages)
        left = deadline - time.monotonic()
        if out or left <= 0:
            return out
        time.sleep(min(pause, left))
        pause = min(pause * 2, POLL_MAX)


def _receive(c: Consumer, queue: QueueInfo, vt: float, want: int) -> list[Message]:
    now = clock.now()
    ptrs = pointers.read(c.conn, queue)
    busy = stream_busy(queue, ptrs, now)
    if busy is not None:
        raise busy
    busy_seen: list[QueueBusyError] = []

    def claim(queue: QueueInfo, row, now: float, vt: float) -> Message | None:
        if busy_seen:
            return None  # a stream holds the lease now: claim nothing more
        try:
            return c.claim(queue, row, now, vt)
        except QueueBusyError as exc:
            busy_seen.append(exc)
            return None

    out = c.timers.take(queue, ptrs, now, vt, claim, want)
    if busy_seen:
        # A streaming query took the lease during this call: what was claimed before is ours
        # (each claim passed its lease check), the rest is the stream's.
        if not out:
            raise busy_seen[0]
        return out
    if len(out) < want:
        try:
            out.extend(_from_reader(c, queue, ptrs, now, vt, want - len(out)))
        except QueueBusyError:
            if not out:
                raise
    return out


def _from_reader(
    c: Consumer, queue: QueueInfo, ptrs: pointers.Pointers, now: float, vt: float, want: int
) -> list[Message]:
    cache = c.readers.setdefault(queue.queue_id, ReaderCache())
    view = cache.view
    cached = view is not None and max(cache.position, ptrs.reader) < view[0].safe_end
    out = _scan(c, queue, cache, ptrs, now, vt, want, refresh=False)
    if len(out) < want and cached:
        # The cached horizon ran out: messages may have arrived beyond it.
        try:
            out += _scan(c, queue, cache, ptrs, now, vt, want - len(out), refresh=True)
        except QueueBusyError:
            if not out:
                raise
    return out


def _is_candidate(row, skipped: list[tuple[int, int]], queue: QueueInfo, now: float) -> bool:
    return not (
        row.acked
        or row.dead
        or row.version is not None
        or to_epoch(row.visible_at) > now
        or any(lo <= row.id < hi for lo, hi in skipped)
        or is_expired(row, queue, now)
    )


def _scan(
    c: Consumer,
    queue: QueueInfo,
    cache: ReaderCache,
    ptrs: pointers.Pointers,
    now: float,
    vt: float,
    want: int,
    refresh: bool,
) -> list[Message]:
    start = max(cache.position, ptrs.reader)
    view = cache.view
    if not refresh and view is not None and start < view[0].safe_end:
        horizon, skipped = view
    else:
        horizon = monoton.horizon(c.conn, queue, start, now, window=HORIZON_WINDOW)
        skipped = (
            c.skipped_ranges(queue, start, horizon)
            if horizon.abandoned or start < horizon.safe_end
            else []
        )
        cache.view = (horizon, skipped)
    out: list[Message] = []
    pos = start  # every id below this needs nothing more from the reader
    lost = 0
    contended = now - cache.lost_race_at < CONTENDED_SECONDS
    limit = CLAIM_MAX
    while len(out) < want and pos < horizon.safe_end and lost < SCAN_ROUNDS:
        spread = SCAN_CHUNK if contended else 4 * (want - len(out))
        size = min(SCAN_CHUNK, max(SCAN_FIRST_CHUNK, spread))
        end = min(horizon.safe_end, pos + size)
        candidates = [
            row
            for row in read_range(c.conn, queue, pos, end, SCAN_COLUMNS)
            if _is_candidate(row, skipped, queue, now)
        ]
        lost_now = False
        while candidates and len(out) < want:
            n = min(want - len(out), limit)
            # The oldest first (FIFO for a lone consumer); a consumer that lost a race lately
            # starts at a random place, so that racing batches spread over the stretch.
            at = 0
            if contended and len(candidates) > n:
                at = random.randrange(len(candidates) - n + 1)
            bucket = bucket_of(candidates[at].id, queue.bucket_size)
            take = [
                r for r in candidates[at : at + n] if bucket_of(r.id, queue.bucket_size) == bucket
            ]
            try:
                won = _claim_batch(c, queue, take, now, vt)
            except QueueBusyError:
                if not out:
                    raise
                break  # a stream took the lease: keep what was claimed before, stop here
            if won is None:
                lost_now = contended = True
                cache.lost_race_at = now
                limit = max(CLAIM_MIN, min(limit, len(take)) // 4)
                lost += 1
                break  # read the stretch afresh: the candidates read are stale
            out.extend(won)
            del candidates[at : at + len(take)]
        if candidates:
            pos = candidates[0].id  # the first one not claimed here
            if not lost_now:
                break  # enough (or stopped)
        else:
            pos = end  # all delivered or handed off (or never written: released ids)
    # Under load the move is throttled; an idle reader persists where it got to at once.
    c.move_reader(queue, cache, ptrs.reader, pos, now, force=not out)
    return out


def _claim_batch(
    c: Consumer, queue: QueueInfo, rows: list, now: float, vt: float
) -> list[Message] | None:
    """Claim ``rows`` (fresh, one bucket) with one conditional batch; None if it lost."""
    conn = c.conn
    due = now + vt
    bucket = bucket_of(rows[0].id, queue.bucket_size)
    ids = [r.id for r in rows]
    # The timers go first: if we die right after the claim, the messages still come back.
    _schedule(c, queue, due, ids, now)
    # The first bodies are read alongside the claim (one round trip less; wasted only on a lost
    # race), the rest after it, one read at a time: no reply and no moment holds more than
    # messages.BODY_BUDGET_BYTES of the queue's largest messages, whatever the batch size.
    per_read = rows_per_read(queue)
    chunks = [ids[i : i + per_read] for i in range(0, len(ids), per_read)]
    first_bodies = conn.execute_async(_BODIES, (queue.queue_id, bucket, chunks[0]))
    faults.point("batch.before_claim", queue=queue, rows=rows, now=now)
    token = uuid.uuid4().hex[:16]
    params = [
        (
            remaining_ttl(r, queue, now),
            (r.deliveries or 0) + 1,
            from_epoch(due),
            token,
            queue.queue_id,
            bucket,
            r.id,
        )
        for r in rows
    ]
    first = (queue.queue_id, bucket, rows[0].id)
    res = conn.cas(
        _claim_statement(c, params),
        (),
        read=ROW.format(cols="version, claimed_by"),
        read_params=first,
        applied=lambda cur: cur is not None and cur.version == 1 and cur.claimed_by == token,
    )
    found = {b.id: b for b in first_bodies.result()}
    if not res.was_applied:
        return None
    for chunk in chunks[1:]:
        found.update((b.id, b) for b in conn.execute(_BODIES, (queue.queue_id, bucket, chunk)))
    _fence(c, queue, rows)
    out = []
    for r in rows:
        c.timers.delivered(queue, r.id, 1, due)
        body = found.get(r.id)
        if body is None or body.enqueued_at is None:
            continue  # its TTL ran out meanwhile: the claim's cells expire with it
        out.append(
            Message(
                id=r.id,
                payload=body.payload or b"",
                headers=dict(body.headers or {}),
                pop_receipt=PopReceipt(queue.queue_id, r.id, 1).encode(),
                delivery_count=(r.deliveries or 0) + 1,
                enqueued_at=body.enqueued_at,
            )
        )
    return out


def _schedule(c: Consumer, queue: QueueInfo, due: float, ids: list[int], now: float) -> None:
    """The timers of one claim: one unlogged batch on the slot's partition, and its marker."""
    conn = c.conn
    stmts = timers.many_statements(conn, queue, [(due, mid) for mid in ids], now)
    batch = BatchStatement(batch_type=BatchType.UNLOGGED)
    for s in stmts[:-1]:
        batch.add(s)
    futures = [conn.execute_async(batch), conn.execute_async(stmts[-1])]
    for f in futures:
        f.result()


def _fence(c: Consumer, queue: QueueInfo, rows: list) -> None:
    """As ``Consumer._fence`` for a batch: a streaming query that took the lease between the
    lease check and the claim gets every message back (``Consumer.give_back``: one conditional
    batch, as the claim), and the call refuses."""
    now = clock.now()
    busy = stream_busy(queue, pointers.read(c.conn, queue), now)
    if busy is None:
        return
    c.give_back(queue, rows, 1, now)
    log.warning(
        "queue %s: a streaming query took the lease during this get_many; %d messages given back",
        queue.name,
        len(rows),
    )
    raise busy
