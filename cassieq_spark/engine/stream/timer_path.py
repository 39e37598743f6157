"""The timer path of a stream: which delayed or once client-delivered messages below the id
path are due, found through their timers.

A batch starting at ``start_ts`` looks at the timer slots ``[timer_scan_start(start_ts),
slot(end_ts)]``: ``TIMER_SETTLE_SLOTS`` back before the previous batch's time, because a client
whose clock is a little behind can write a due time there after that batch was planned, and
the message must still come. Planning and acking scan the same slots, so
candidates found acked or dead are remembered (with their slot) and not read again while their
slot stays in the scan window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..core import timers
from ..core.queues import QueueInfo
from ..store.session import Connection
from .read import (
    STATE_COLUMNS,
    as_planned,
    due_ms,
    read_rows_by_id,
    skipped_overlapping,
    slot_of,
    timer_path_delivers,
    timer_scan_start,
)


class TimerCandidates:
    """Timer candidates of one stream run on one queue incarnation."""

    def __init__(self, conn: Connection, queue: QueueInfo):
        self.conn = conn
        self.queue = queue
        # id -> timer slot, of candidates found acked or dead: final, not read again while
        # their slot stays in the scan window.
        self._finished: dict[int, int] = {}

    def rows(
        self, below: int, from_slot: int, to_slot: int, as_of: int | None = None
    ) -> Iterator[tuple[Any, int]]:
        """(state row, slot) of ids below ``below`` with a timer in ``[from_slot, to_slot]``,
        except those known to be finished; ``as_of``: each row as a batch planned then found
        it (``read.as_planned``, for a replay)."""
        if to_slot < from_slot:
            return
        self._finished = {i: s for i, s in self._finished.items() if s >= from_slot}
        found: dict[int, int] = {}
        for slot in timers.due_slots(self.conn, self.queue, from_slot, to_slot):
            for mid in timers.ids_in_slot(self.conn, self.queue, slot):
                if mid < below and mid not in self._finished:
                    found.setdefault(mid, slot)
        for row in read_rows_by_id(self.conn, self.queue, sorted(found), STATE_COLUMNS):
            if as_of is not None:
                row = as_planned(row, as_of)
            if row.acked or row.dead:
                if as_of is None:
                    self._finished[row.id] = found[row.id]
                continue
            yield row, found[row.id]

    def finished(self, done: dict[int, int]) -> None:
        """Ids (-> slot) acked since: not to be read again."""
        self._finished.update(done)

    def due_ids(self, below: int, start_ts: int, end_ts: int, replay: bool = False) -> list[int]:
        """The timer path of a batch ``(start_ts, end_ts]``: ids due at ``end_ts`` now (the
        read checks again); ``replay``: due as the batch's planning found them."""
        return [i for i, _ in self.due(below, start_ts, end_ts, replay)]

    def due(
        self, below: int, start_ts: int, end_ts: int, replay: bool = False
    ) -> list[tuple[int, int]]:
        """(id, due time in epoch ms) of the timer path of a batch ``(start_ts, end_ts]``;
        ``replay``: due as the batch's planning found them (``read.as_planned``)."""
        first = timer_scan_start(start_ts)
        as_of = end_ts if replay else None
        rows = [r for r, _ in self.rows(below, first, slot_of(end_ts), as_of)]
        if not rows:
            return []
        excluded = skipped_overlapping(self.conn, self.queue, rows[0].id, rows[-1].id + 1)
        # The same rule as the ack's: a row is a candidate through the timer of its own state.
        return [
            (r.id, due_ms(r))
            for r in rows
            if timer_path_delivers(r, end_ts, excluded) and slot_of(due_ms(r)) >= first
        ]


def cap_due(
    due: list[tuple[int, int]], start_ts: int, end_ts: int, room: int
) -> tuple[int, list[int]]:
    """A batch time at or below ``end_ts`` at which at most ``room`` of the timer path's
    ``due`` (id, due ms) rows are due, and those ids: the earliest due first, so the cap
    (``maxMessagesPerTrigger``) holds for messages that became due together (a million
    delayed messages) and the batch stays a function of its end offset, replayable. Two
    exceptions bring more than ``room``: the rows due in one millisecond come together, and
    the batch time is above ``start_ts`` (rows a late timer made due at or before it come
    along), so that every batch moves on."""
    if len(due) <= room:
        return end_ts, [i for i, _ in due]
    times = sorted(d for _, d in due)
    ts = max(times[room] - 1, times[0], start_ts + 1)
    return ts, [i for i, d in due if d <= ts]
