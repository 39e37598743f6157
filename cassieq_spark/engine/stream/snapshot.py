"""A snapshot of a queue's unacked messages, for batch readers (``spark.read``) that consume
nothing: no lease, no pointer moves, no delivery.

It covers every id from the first bucket repair has not reclaimed up to the allocation counter,
and a message counts as unacked by the same rule as ``stats()`` (``messages.is_done`` against
the reader pointer when the snapshot was taken). Reading a range is independent of any other,
so a caller may cut ``[lo, hi)`` into as many parts as it likes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..core import monoton, pointers
from ..core.messages import COLUMNS, is_done, read_range
from ..core.queues import QueueInfo
from ..store.session import Connection
from .read import Delivery


@dataclass(frozen=True)
class Snapshot:
    """Ids ``[lo, hi)`` hold the queue's unacked messages; ``reader`` is the reader pointer
    they are judged against."""

    lo: int
    hi: int
    reader: int


def take(conn: Connection, queue: QueueInfo) -> Snapshot:
    p = pointers.read(conn, queue)
    lo = p.repair * queue.bucket_size
    return Snapshot(lo, max(lo, monoton.counter(conn, queue)), p.reader)


def read_unacked(
    conn: Connection, queue: QueueInfo, lo: int, hi: int, reader: int
) -> Iterator[Delivery]:
    """(row, delivery count) of the unacked messages in ``[lo, hi)``."""
    for row in read_range(conn, queue, lo, hi, COLUMNS):
        if not is_done(row, reader):  # the same rule as stats() for what is unacked
            yield row, row.deliveries or 0
