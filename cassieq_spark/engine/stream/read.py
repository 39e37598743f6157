"""What a stream batch delivers, and reading it (the executors' side of ``consumer.py``).

A batch ``(start, end]`` is read by processes that never saw it planned, so everything here is
a pure function of what the planner handed them: an id range or a list of timer candidates, the
batch's time ``end_ts`` (epoch ms, Cassandra's clock) and the ranges repair owns. The same
rules decide what the driver acks (``ack.py``), so a row is acked only if a reader
would have delivered it.

* The *id path* delivers ids in ``[lo, hi)`` that are not acked or dead, not in a range handed
  to repair, and due at ``end_ts`` (plain messages always are).
* The *timer path* delivers the listed ids under the same rule, except plain rows: a plain
  row with a timer is one a client lost the race for, and the reader pointer owns it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from ..core import monoton
from ..core.buckets import bucket_of
from ..core.clock import TIMER_SETTLE_SLOTS, timer_slot, to_epoch
from ..core.messages import COLUMNS as READ_COLUMNS
from ..core.messages import has_bodies, read_range, rows_per_read
from ..core.queues import QueueInfo
from ..store.session import Connection

READ_WINDOW = 64  # concurrent single-row reads
STATE_COLUMNS = (
    "id, visible_at, version, invisible_until, acked, dead, "
    "writetime(invisible_until) AS changed_at"
)

# A message row and the delivery count a batch gives it.
Delivery = tuple[Any, int]

__all__ = [
    "READ_COLUMNS",
    "STATE_COLUMNS",
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
    if row.acked or row.dead or inside(row.id, excluded):
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


# -- reading -----------------------------------------------------------------------------------


def read_rows_by_id(
    conn: Connection, queue: QueueInfo, ids: Iterable[int], columns: str
) -> Iterator:
    """Rows of the given ids (missing ones left out), in the order asked, pipelined."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    # Reads of bodies: no more in flight than one read's byte budget holds.
    window = min(READ_WINDOW, rows_per_read(queue)) if has_bodies(columns) else READ_WINDOW
    pending: list = []
    for mid in ids:
        pending.append(
            conn.execute_async(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
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
) -> Iterator[Delivery]:
    """(row, delivery count) of what the id path of a batch delivers from ``[lo, hi)``."""
    for row in read_range(conn, queue, lo, hi, READ_COLUMNS):
        if id_path_delivers(row, end_ts, excluded):
            yield row, (row.deliveries or 0) + 1


def read_timer_path(
    conn: Connection,
    queue: QueueInfo,
    ids: Sequence[int],
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
) -> Iterator[Delivery]:
    """(row, delivery count) of what the timer path of a batch delivers of ``ids``."""
    for row in read_rows_by_id(conn, queue, ids, READ_COLUMNS):
        if timer_path_delivers(row, end_ts, excluded):
            yield row, (row.deliveries or 0) + 1
