"""Per-queue totals kept in Cassandra counter columns (enqueued, acked, dead-lettered, ...).

Counter updates are not idempotent: a write that times out and is retried may count twice.
Each is done once per operation (per block for puts, per batch for the Spark source), never on
a retry path, so the totals are exact unless Cassandra itself times out or the client dies
between an operation and its count: an update is a write of its own after the operation
(Cassandra batches no counter update with other tables' writes), so a consumer killed just
after its ack applied leaves ``acked`` one short.

A counter update that fails (a replica killed mid-write: Cassandra writes counters through one
leader replica at ONE, so one lost node can time them out; a coordinator shutting down refuses
it with Overloaded) is logged and dropped, never raised:
the message operation it follows has already happened, and an error would make its caller
repeat it (a second copy of a put). The totals are then off by that update; the live figures of
``stats`` (backlog, in flight) are read from the messages and stay exact.
"""

from __future__ import annotations

import logging

from cassandra import OperationTimedOut, Unavailable, WriteFailure, WriteTimeout
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException
from cassandra.protocol import OverloadedErrorMessage

from ..store.session import Connection
from .queues import QueueInfo

log = logging.getLogger(__name__)
# ConnectionException: the connection died with the update in flight (a node SIGKILLed); the
# retry policy never re-sends a counter update, so the driver hands that error up as it is.
# Overloaded: a coordinator that is shutting down (a rolling restart) refuses it the same way.
# WriteFailure: the replica leading the update failed to run it (it was being killed).
COUNTER_FAILURES = (
    OverloadedErrorMessage,
    WriteTimeout,
    WriteFailure,
    Unavailable,
    OperationTimedOut,
    NoHostAvailable,
    ConnectionException,
)

NAMES = ("enqueued", "acked", "dead_lettered", "dropped", "republished", "lost")


class Counters:
    def __init__(self, conn: Connection):
        self.conn = conn

    def add(self, queue: QueueInfo, name: str, n: int) -> None:
        if name not in NAMES:
            raise ValueError(name)
        if not n:
            return
        try:
            self.conn.execute(
                f"UPDATE {{ks}}.counters SET {name} = {name} + ? WHERE queue_id = ?",
                (n, queue.queue_id),
            )
        except COUNTER_FAILURES as exc:
            log.warning(
                "queue %s: counter %s += %d may not be recorded (%s); the total is off by it",
                queue.name,
                name,
                n,
                type(exc).__name__,
            )

    def count_enqueued_alongside(self, queue: QueueInfo, n: int) -> Counting:
        """Send ``enqueued += n`` now and return at once, so that it travels with another
        statement (a put's close); :meth:`Counting.wait` waits for it and never raises, as
        :meth:`count_enqueued`. Only once the messages it counts are written."""
        if not n:
            return Counting(None, queue, n)
        try:
            future = self.conn.execute_async(
                "UPDATE {ks}.counters SET enqueued = enqueued + ? WHERE queue_id = ?",
                (n, queue.queue_id),
            )
        except Exception as exc:  # the seam or the driver refused it before it was sent
            return Counting(exc, queue, n)
        return Counting(future, queue, n)

    def count_enqueued(self, queue: QueueInfo, n: int) -> None:
        """Add ``n`` to ``enqueued``, never raising: the messages are enqueued already, and a
        caller that saw an error would retry and enqueue them twice. A count that cannot be
        added leaves the counter short by ``n``, logged."""
        try:
            self.add(queue, "enqueued", n)
        except Exception:
            log.warning(
                "could not count %d messages enqueued to queue %s; the enqueued counter is "
                "short by that much",
                n,
                queue.name,
                exc_info=True,
            )

    def read(self, queue: QueueInfo) -> dict[str, int]:
        row = self.conn.execute(
            f"SELECT {', '.join(NAMES)} FROM {{ks}}.counters WHERE queue_id = ?", (queue.queue_id,)
        ).one()
        return {n: int(getattr(row, n) or 0) if row else 0 for n in NAMES}


class Counting:
    """An ``enqueued`` update in flight (:meth:`Counters.count_enqueued_alongside`)."""

    def __init__(self, future, queue: QueueInfo, n: int):
        self._future = future
        self._queue = queue
        self._n = n

    def wait(self) -> None:
        """Wait for the update; a failure is logged (the counter is short by it), never
        raised: the messages it counts are enqueued already."""
        future, self._future = self._future, None
        if future is None:
            return
        try:
            if isinstance(future, BaseException):
                raise future
            future.result()
        except Exception as exc:
            log.warning(
                "queue %s: counter enqueued += %d may not be recorded (%s); the total is off by it",
                self._queue.name,
                self._n,
                type(exc).__name__,
            )
