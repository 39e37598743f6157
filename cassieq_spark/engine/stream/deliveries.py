"""Delivery counts of a streaming query's messages across the query's runs, and the dead-letter
move of a poison batch.

Spark re-runs the batch it logged last but did not commit when a query restarts, with the same
positions, and expects the same rows: a sink keyed on the batch (the cassieq sink, ``df.write``
with ``writeId``, Delta's ``txnVersion``) skips what the first attempt wrote and fails closed
on rows that differ. A message that makes every run fail (a poison message) would stop the
query on every restart, as a message a client never acks would come back forever without a
count. So the stream counts the *runs* of the query that read each partition of a batch
without a commit; once ``maxBatchAttempts`` runs did, the next one moves the whole partition
to the dead-letter queue instead of delivering it, and the batch goes on without it. Client
deliveries (the message's own count) move a message only when they alone reached the queue's
``max_delivery_count``, which no replay can change while the stream holds the lease: until the
batch's attempts run out, a replay is the first attempt's rows.

Counted per (partition, run), not per message: one write and one read per partition a run
reads, whatever its size. Retries of a task and several actions over one batch in the same run
count once, since a run commits a batch once. The count cannot tell which message of a failing
batch is the poison one, nor a failure from a crash after the sink wrote: as SQS's receive
count, it moves every message of a partition whose batch failed that often. A query that wants
finer grain catches failures row by row and rejects those rows with
``cassieq_spark.dead_letter``. A queue without a dead-letter queue does not lose a poison batch
unseen: the run fails with PoisonBatchError unless ``failOnDataLoss=false`` accepts the drop.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from ...errors import PoisonBatchError, QueueNotFoundError
from ..core import clock, queues
from ..core.counters import Counters
from ..core.queues import QueueInfo
from ..store.session import Connection
from ..upkeep import deadletter
from .read import Delivery

log = logging.getLogger(__name__)

__all__ = [
    "CountedPage",
    "EarlierRuns",
    "part_key",
    "with_counts",
    "with_counts_pages",
]

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


class EarlierRuns:
    """Records that ``run`` reads partition ``part`` and asks how many other runs read it
    before (each delivered its messages once without a commit), both sent at once; the
    caller reads the partition's first page meanwhile. :meth:`count` waits for both: the
    record is written before any row of the partition is handed on, so a later run counts
    this one whenever this one delivered anything."""

    def __init__(self, conn: Connection, queue_id: uuid.UUID, part: str, run: str):
        self.run = run
        self._recorded = conn.execute_async(_RECORD, (queue_id, part, run))
        self._runs = conn.execute_async(_RUNS, (queue_id, part))

    def count(self) -> int:
        runs = {r.run for r in self._runs.result()}
        self._recorded.result()
        return len(runs - {self.run})


def with_counts(
    conn: Connection,
    queue: QueueInfo,
    deliveries: Iterator[Delivery],
    earlier: int,
    max_delivery_count: int,
    max_attempts: int | None = None,
    drop_allowed: bool = False,
    what: str = "",
) -> Iterator[Delivery]:
    """The partition's deliveries, less the messages that leave the queue instead (to the
    dead-letter queue, ``deadletter.take``):

    * a message clients already received ``max_delivery_count`` times, as the next client
      ``get`` would move it (unless the queue is a dead-letter queue without one of its own,
      which keeps such messages: ``queues.keeps_past_delivery_limit``). Clients are locked
      out while the stream holds the lease, so that count is the same in every run that
      reads the batch: the first run moves it, and no replay has it either;
    * every message of the partition once ``earlier`` runs read it without a commit and that
      reached ``max_attempts`` (default ``max_delivery_count``): a poison batch. The whole
      partition moves at once, in the same run.

    So a replay brings the first attempt's rows until the batch failed ``max_attempts`` runs:
    client deliveries never take a row out of a replay, and writes keyed on the batch (the
    sink's replay check, ``writeId``) see the same rows. The count a row carries stays the
    one of the batch's first run (its client deliveries plus one); the moved copy carries the
    full count (client deliveries plus the runs).

    A poison batch of a queue without a dead-letter queue is dropped only if ``drop_allowed``
    (option ``failOnDataLoss=false``); else PoisonBatchError, before anything of it is
    dropped (``what`` names the partition's messages in it)."""
    limit = _Limit(conn, queue, earlier, max_delivery_count, max_attempts, drop_allowed, what)
    for row, count in deliveries:
        if limit.passes(count) or limit.keeps(row, count):
            yield row, count
    limit.report()


class CountedPage(Protocol):
    """A page of deliveries as columns (``columns.Deliveries``), as far as counting needs it."""

    def __len__(self) -> int: ...
    def over_limit(self, max_delivery_count: int) -> list[int]: ...
    def row(self, i: int) -> Any: ...
    def count(self, i: int) -> int: ...
    def without(self, positions: Iterable[int]) -> Any: ...


P = TypeVar("P", bound=CountedPage)


def with_counts_pages(
    conn: Connection,
    queue: QueueInfo,
    pages: Iterator[P],
    earlier: int,
    max_delivery_count: int,
    max_attempts: int | None = None,
    drop_allowed: bool = False,
    what: str = "",
) -> Iterator[P]:
    """:func:`with_counts` over pages of columns: a page none of whose rows reached the
    delivery limit (the common case) passes whole, checked over its count column at once; the
    rows past the limit, and every row of a poison batch, are decided one by one exactly as
    :func:`with_counts` decides them, and taken out of their page unless they stay."""
    limit = _Limit(conn, queue, earlier, max_delivery_count, max_attempts, drop_allowed, what)
    for page in pages:
        over = range(len(page)) if limit.poison else page.over_limit(max_delivery_count)
        gone = [i for i in over if not limit.keeps(page.row(i), page.count(i))]
        if gone:
            page = page.without(gone)
        if len(page):
            yield page
    limit.report()


class _Limit:
    """What :func:`with_counts` decides for a message past the delivery limit or of a poison
    batch, and the moves it made (``report`` logs them)."""

    def __init__(
        self,
        conn: Connection,
        queue: QueueInfo,
        earlier: int,
        max_delivery_count: int,
        max_attempts: int | None,
        drop_allowed: bool,
        what: str,
    ):
        self.conn, self.queue, self.earlier = conn, queue, earlier
        self.max_delivery_count = max_delivery_count
        self.attempts = max_delivery_count if max_attempts is None else max_attempts
        self.poison = earlier >= self.attempts
        self.drop_allowed, self.what = drop_allowed, what
        self.moved = self.taken = 0
        self.full: QueueInfo | None = None
        self.counters = Counters(conn)
        self.keeps_past: bool | None = None  # a dead-letter queue: its messages outlive the limit

    def passes(self, count: int) -> bool:
        """Delivered as it is: not a poison batch, and clients received it fewer times than
        the limit (``count`` is their deliveries plus one)."""
        return not self.poison and count - 1 < self.max_delivery_count

    def keeps(self, row, count: int) -> bool:
        """For a row that does not pass: True when it is delivered all the same (a dead-letter
        queue keeps its messages past the limit); else it is moved on, or was taken by a
        client since it was read, or its queue is gone, and False."""
        client = count - 1  # client deliveries before the stream's first run
        self.full = self.full or _current(self.conn, self.queue)
        full = self.full
        if full is None:  # the queue was deleted or created again: nothing to move it to
            return False
        if not self.poison:
            if self.keeps_past is None:
                self.keeps_past = queues.keeps_past_delivery_limit(self.conn, full)
            if self.keeps_past:
                return True
        if self.poison and full.dead_letter_queue is None and not self.drop_allowed:
            raise PoisonBatchError(
                f"queue {self.queue.name!r}: {self.earlier} runs of this query read "
                f"{self.what or 'a batch'} (from id {row.id}) without a commit "
                f"(maxBatchAttempts {self.attempts}), and the queue has no dead-letter queue to "
                "move them to; nothing was dropped. Fix what makes the batch fail, or run the "
                "query once with failOnDataLoss=false to drop these messages (counted in the "
                "queue's `dropped`), or set countDeliveries=false to retry the batch as it is"
            )
        if deadletter.take(
            self.conn, self.counters, full, row, clock.now(), deliveries=client + self.earlier
        ):
            self.moved += 1
        else:
            self.taken += 1  # acked or claimed by a client since it was read: not ours to deliver
        return False

    def report(self) -> None:
        if self.moved:
            log.warning(
                "queue %s: %d messages moved to %s instead of delivered again (%s)",
                self.queue.name,
                self.moved,
                (self.full and self.full.dead_letter_queue)
                or "nowhere (no dead-letter queue: dropped)",
                f"{self.earlier} runs of this query read their batch without a commit, "
                f"maxBatchAttempts {self.attempts}"
                if self.poison
                else "clients had delivered them max_delivery_count "
                f"{self.max_delivery_count} times",
            )
        if self.taken:
            log.info(
                "queue %s: %d messages taken by a client before the move",
                self.queue.name,
                self.taken,
            )


def _current(conn: Connection, queue: QueueInfo) -> QueueInfo | None:
    """The queue's full settings (a partition carries only its name, id and bucket size), or
    None when its incarnation is not the partition's any more."""
    try:
        info = queues.get_queue(conn, queue.name)
    except QueueNotFoundError:
        return None
    return info if info.queue_id == queue.queue_id else None
