"""What a stream batch delivers, and reading it (the executors' side of ``consumer.py``).

A batch ``(start, end]`` is read by processes that never saw it planned, so everything here is
a pure function of what the planner handed them: an id range or a list of timer candidates, the
batch's time ``end_ts`` (epoch ms, Cassandra's clock) and the ranges repair owns. The same
rules decide what the driver acks (``ack.py``), so a row is acked only if a reader
would have delivered it.

* The *id path* delivers ids in ``[lo, hi)`` that hold a message (its payload has not
  expired), are not acked or dead, not in a range handed to repair, and due at ``end_ts``
  (plain messages always are).
* The *timer path* delivers the listed ids under the same rule, except plain rows: a plain
  row with a timer is one a client lost the race for, and the reader pointer owns it.

The executors read with the same rules evaluated over whole pages at once
(``columns.py``); the functions here are the reference those are tested against.

A *replay* (a run that did not plan the batch: Spark re-runs the last logged batch after a
restart) reads each row as it stood at ``end_ts`` as far as the row still tells it (see
:func:`as_planned`): clients may have received and acked the batch's messages while no run
held the lease, and a replay must bring the first attempt's rows for writes keyed on the
batch (the cassieq sink's replay check) to hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..core import monoton
from ..core.buckets import bucket_of
from ..core.clock import TIMER_SETTLE_SLOTS, timer_slot, to_epoch
from ..core.messages import COLUMNS, has_bodies, read_range, rows_per_read
from ..core.queues import QueueInfo
from ..store.session import Connection

READ_WINDOW = 64  # concurrent single-row reads
# When the delivery state and the ack were written (microseconds, Cassandra's clock for the
# compare-and-sets that write ``invisible_until``).
_WRITTEN = "writetime(invisible_until) AS changed_at, writetime(acked) AS acked_at"
STATE_COLUMNS = "id, enqueued_at, visible_at, version, invisible_until, acked, dead, " + _WRITTEN
READ_COLUMNS = COLUMNS + ", " + _WRITTEN

# A message row and the delivery count a batch gives it.
Delivery = tuple[Any, int]

__all__ = [
    "READ_COLUMNS",
    "STATE_COLUMNS",
    "as_planned",
    "is_message",
    "read_id_path",
    "read_rows_by_id",
    "read_timer_path",
    "skipped_overlapping",
]


# -- the rules ---------------------------------------------------------------------------------


def _ms(value) -> int:
    return 0 if value is None else round(to_epoch(value) * 1000)


def due_ms(row) -> int:
    """When a message is due (epoch ms): 0 for a plain message that was never delayed or
    delivered to a client; else its ``visible_at``/``invisible_until``, whichever is later."""
    return max(_ms(row.visible_at), _ms(row.invisible_until))


def is_message(row) -> bool:
    """The row holds a message: ``enqueued_at`` is written with the payload, under its TTL. A
    row without it holds only cells written later (a claim or an ack that outlived an expired
    payload by the rounding of its TTL, or a mark of an id that was never written): nothing to
    deliver, nor to ack."""
    return row.enqueued_at is not None


def is_plain(row) -> bool:
    """Never delayed, never delivered to a client: below the reader pointer it is consumed."""
    return row.version is None and row.visible_at is None


def inside(mid: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= mid < hi for lo, hi in ranges)


def slot_of(ms: int) -> int:
    return timer_slot(ms / 1000.0)


def timer_scan_start(start_ts: int) -> int:
    """The first timer slot the timer path of a batch starting at ``start_ts`` looks at."""
    return slot_of(start_ts) - TIMER_SETTLE_SLOTS


def id_path_delivers(row, end_ts: int, excluded: Sequence[tuple[int, int]]) -> bool:
    if row.acked or row.dead or not is_message(row) or inside(row.id, excluded):
        return False
    return due_ms(row) <= end_ts


def timer_path_delivers(row, end_ts: int, excluded: Sequence[tuple[int, int]]) -> bool:
    # A plain row with a timer is one a client lost the race for: the reader pointer owns it.
    return not is_plain(row) and id_path_delivers(row, end_ts, excluded)


def unchanged_since(row, ts_ms: int) -> bool:
    """The row's delivery state was written before ``ts_ms`` (Cassandra's clock). Needs
    ``changed_at`` (the write time of ``invisible_until``, microseconds)."""
    return row.invisible_until is None or (
        row.changed_at is not None and row.changed_at < ts_ms * 1000
    )


def _after(written_us: int | None, ts_ms: int) -> bool:
    return written_us is not None and written_us >= ts_ms * 1000


def as_planned(row, end_ts: int):
    """The row as a batch planned at ``end_ts`` found it, for a replay of that batch: an ack
    written since did not exist then, and a first delivery written since (version 1: every
    claim and visibility change adds one) found the message as it was put, never delivered.
    Both are what clients do once a crashed run's lease lapsed, before the restart replays.

    A row changed more than once since (delivered again, its visibility changed) keeps its
    state now: the row no longer tells whether the first change came before the batch (the
    message was then not due) or after. ``dead`` always stands: a message moved to the
    dead-letter queue or taken over by repair has a copy elsewhere, never delivered twice.
    Needs ``changed_at`` and ``acked_at`` (``READ_COLUMNS``/``STATE_COLUMNS``)."""
    changes: dict[str, Any] = {}
    if row.acked and _after(row.acked_at, end_ts):
        changes["acked"] = None
    if row.version == 1 and _after(row.changed_at, end_ts):
        changes.update(version=None, invisible_until=None)
        if "deliveries" in row._fields:
            changes["deliveries"] = None
    return row._replace(**changes) if changes else row


# -- reading -----------------------------------------------------------------------------------


def read_rows_by_id(
    conn: Connection, queue: QueueInfo, ids: Iterable[int], columns: str, tuples: bool = False
) -> Iterator:
    """Rows of the given ids (missing ones left out), in the order asked, pipelined;
    ``tuples``: as plain tuples (``Connection.tuple_profile``), not named ones."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    # Reads of bodies: no more in flight than one read's byte budget holds.
    window = min(READ_WINDOW, rows_per_read(queue)) if has_bodies(columns) else READ_WINDOW
    profile = {"execution_profile": conn.tuple_profile} if tuples else {}
    pending: list = []
    for mid in ids:
        pending.append(
            conn.execute_async(
                stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid), **profile
            )
        )
        if len(pending) >= window:
            row = pending.pop(0).result().one()
            if row is not None:
                yield row
    for f in pending:
        row = f.result().one()
        if row is not None:
            yield row


def skipped_overlapping(conn: Connection, queue: QueueInfo, lo: int, hi: int) -> list:
    """Ranges handed to repair that overlap ``[lo, hi)`` (done or not: repair owns them)."""
    if hi <= lo:
        return []
    rows = conn.execute(
        "SELECT lo, hi FROM {ks}.skipped WHERE queue_id = ? AND lo >= ? AND lo < ?",
        (queue.queue_id, max(0, lo - monoton.MAX_BLOCK), hi),
    )
    return sorted((r.lo, r.hi) for r in rows if r.hi is not None and r.hi > lo)


def read_id_path(
    conn: Connection,
    queue: QueueInfo,
    lo: int,
    hi: int,
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
    replay: bool = False,
) -> Iterator[Delivery]:
    """(row, delivery count) of what the id path of a batch delivers from ``[lo, hi)``;
    ``replay``: read the rows as the batch's planning found them (:func:`as_planned`)."""
    for row in read_range(conn, queue, lo, hi, READ_COLUMNS):
        if replay:
            row = as_planned(row, end_ts)
        if id_path_delivers(row, end_ts, excluded):
            yield row, (row.deliveries or 0) + 1


def read_timer_path(
    conn: Connection,
    queue: QueueInfo,
    ids: Sequence[int],
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
    replay: bool = False,
) -> Iterator[Delivery]:
    """(row, delivery count) of what the timer path of a batch delivers of ``ids``."""
    for row in read_rows_by_id(conn, queue, ids, READ_COLUMNS):
        if replay:
            row = as_planned(row, end_ts)
        if timer_path_delivers(row, end_ts, excluded):
            yield row, (row.deliveries or 0) + 1
