"""Batch receive for clients, in the style of SQS ReceiveMessage with long polling:
``get_many`` (the batch acks are in ``batch_ack.py``).

Where ``get_many`` looks, in order (as ``get``):

1. due timers (expired deliveries, delayed messages), in one pass over the due slots: each is
   claimed by its own compare-and-set, exactly as ``get`` claims it (one Paxos round per
   *redelivered* message);
2. fresh messages from the reader pointer up to the horizon (``reader.py``): claimed by **one
   conditional batch per bucket partition** of up to ``reader.CLAIM_MAX`` rows (fewer after a
   lost race). Every row of the batch carries the very condition a single claim has (``IF
   version = null AND acked = null AND dead = null``), and Cassandra applies a conditional
   batch on one partition in one Paxos round, all or nothing. So a batch and a ``get`` (or
   another batch) racing for one row is the same race as two ``get`` calls: exactly one wins,
   and a message is never in flight with two consumers at once. A batch that loses claims
   nothing; the stretch is read afresh and claimed again, at most ``reader.SCAN_ROUNDS`` times.

A streaming query that takes the queue's lease during the call stops it: what was claimed
before is the caller's (each claim passed its lease check), the rest is the stream's.
"""

from __future__ import annotations

import time

from ...errors import QueueBusyError
from ..core import clock, pointers
from ..core.messages import Message
from ..core.queues import QueueInfo
from ..store import faults, suspend
from ..stream.lease import stream_busy
from .consumer import Consumer, outlived, still_held
from .reader import Batches

POLL_FIRST = 0.05  # long polling: the first pause between two looks (seconds) ...
POLL_MAX = 0.5  # ... doubling up to this


def get_many(
    c: Consumer, queue: QueueInfo, vt: float, max_messages: int, wait: float
) -> list[Message]:
    """Up to ``max_messages`` messages; waits up to ``wait`` seconds for a first one (long
    polling: returns as soon as there is at least one)."""
    deadline = time.monotonic() + wait
    pause = POLL_FIRST
    while True:
        started = clock.now()
        out = still_held(c, queue, _receive(c, queue, vt, max_messages, started), started, vt)
        left = deadline - time.monotonic()
        if out or left <= 0:
            return out
        suspend.pause(min(pause, left))
        pause = min(pause * 2, POLL_MAX)


def _receive(c: Consumer, queue: QueueInfo, vt: float, want: int, now: float) -> list[Message]:
    ptrs = pointers.read(c.conn, queue)
    busy = stream_busy(queue, ptrs, now)
    if busy is not None:
        raise busy
    busy_seen: list[QueueBusyError] = []

    def claim(queue: QueueInfo, row, now: float, vt: float) -> Message | None:
        if busy_seen:
            return None  # a stream holds the lease now: claim nothing more
        try:
            return c.reader.claim(queue, row, now, vt)
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
    faults.point("batch.before_reader_path", queue=queue, now=now)
    if len(out) < want and not outlived(now, vt):
        try:
            out += c.reader.take(queue, ptrs, now, vt, want - len(out), Batches(c.reader))
        except QueueBusyError:
            if not out:
                raise
    return out
