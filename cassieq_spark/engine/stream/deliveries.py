"""Delivery counts of a streaming query's messages across the query's runs, and the dead-letter
move once a message has had ``max_delivery_count`` of them.

Spark re-runs the batch it logged last but did not commit when a query restarts, with the same
positions. A message that makes every run fail (a poison message) would stop the query on
every restart, as a message a client never acks would come back forever without a count. So
the stream counts, like a client's ``get``: every *run* of the query that reads a partition of
a batch delivers its messages once more, and a message delivered ``max_delivery_count`` times
without an ack leaves the queue instead (to the dead-letter queue, or dropped when there is
none: ``deadletter.take``), then the batch goes on without it.

Counted per (partition, run), not per message: one write and one read per partition a run
reads, whatever its size. Retries of a task and several actions over one batch in the same run
count once, since a run commits a batch once. The count cannot tell which message of a failing
batch is the poison one: as SQS's receive count, it dead-letters every message of a batch that
failed that often. A query that wants finer grain catches failures row by row and rejects
those rows with ``cassieq_spark.dead_letter``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence

from ...errors import QueueNotFoundError
from ..core import clock, queues
from ..core.counters import Counters
from ..core.queues import QueueInfo
from ..store.session import Connection
from ..upkeep import deadletter
from .read import Delivery

log = logging.getLogger(__name__)

__all__ = ["earlier_runs", "part_key", "with_counts"]

# Reads of partitions whose batch failed are rare and short-lived: two weeks covers a query
# left failing over a long holiday; after that a replay counts from its client deliveries.
READS_TTL_SECONDS = 14 * 24 * 3600

_RECORD = (
    "INSERT INTO {ks}.stream_reads (queue_id, part, run) VALUES (?, ?, ?) "
    f"USING TTL {READS_TTL_SECONDS}"
)
_RUNS = "SELECT run FROM {ks}.stream_reads WHERE queue_id = ? AND part = ?"


def part_key(kind: str, lo: int, hi: int, ids: Sequence[int], end_ts: int) -> str:
    """Names a partition of a batch, the same on every replay of the batch (its positions come
    from Spark's offset log): the id range or timer ids it reads and the batch's time."""
    if ids:
        return f"{kind}:{ids[0]}:{ids[-1]}:{len(ids)}@{end_ts}"
    return f"{kind}:{lo}:{hi}@{end_ts}"


def earlier_runs(conn: Connection, queue_id: uuid.UUID, part: str, run: str) -> int:
    """Record that ``run`` reads partition ``part``; return how many other runs read it before
    (each delivered its messages once without a commit)."""
    recorded = conn.execute_async(_RECORD, (queue_id, part, run))
    runs = {r.run for r in conn.execute(_RUNS, (queue_id, part))}
    recorded.result()
    return len(runs - {run})


def with_counts(
    conn: Connection,
    queue: QueueInfo,
    deliveries: Iterator[Delivery],
    earlier: int,
    max_delivery_count: int,
) -> Iterator[Delivery]:
    """The partition's deliveries, less the messages that already had ``max_delivery_count``
    (client deliveries plus the ``earlier`` runs): those are moved out of the queue instead.

    The count a row carries stays the one of the batch's first run (its client deliveries plus
    one; unless a client received it between the runs): Spark expects a replayed
    batch to bring the same rows, and writes keyed on it rely on that (the sink's replay check
    fails closed on a changed row, ``dead_letter`` puts the count in a header). The moved copy
    carries the full count."""
    moved = taken = 0
    full: QueueInfo | None = None
    counters = Counters(conn)
    for row, count in deliveries:
        before = count - 1 + earlier  # deliveries this message had before this one
        if before < max_delivery_count:
            yield row, count
            continue
        full = full or _current(conn, queue)
        if full is None:  # the queue was deleted or created again: nothing to move it to
            continue
        if deadletter.take(conn, counters, full, row, clock.now(), deliveries=before):
            moved += 1
        else:
            taken += 1  # acked or claimed by a client since it was read: not ours to deliver
    if moved:
        log.warning(
            "queue %s: %d messages reached max_delivery_count %d (%d earlier runs of this query "
            "read their batch without a commit): moved to %s instead of delivered again",
            queue.name,
            moved,
            max_delivery_count,
            earlier,
            (full and full.dead_letter_queue) or "nowhere (no dead-letter queue: dropped)",
        )
    if taken:
        log.info("queue %s: %d messages taken by a client before the move", queue.name, taken)


def _current(conn: Connection, queue: QueueInfo) -> QueueInfo | None:
    """The queue's full settings (a partition carries only its name, id and bucket size), or
    None when its incarnation is not the partition's any more."""
    try:
        info = queues.get_queue(conn, queue.name)
    except QueueNotFoundError:
        return None
    return info if info.queue_id == queue.queue_id else None
