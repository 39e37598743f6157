"""One queue of a streaming query, on the driver: its offsets, its plan, its partitions, its
acks and its lease (``engine/stream/consumer.py`` does the queue work). ``source.py`` holds one per
queue it reads; a query on one queue has exactly one."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql.datasource import InputPartition

from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection
from ..engine.stream.consumer import Plan, Position, StreamConsumer
from ..engine.stream.start import StartingPosition
from ..engine.upkeep import lost
from ..errors import DataLossError, QueueNotFoundError
from .offset import SourceOffset
from .option_table import MIN_BATCH_ATTEMPTS
from .options import SourceSettings
from .partition import KIND_IDS, KIND_TIMERS, CassieQPartition, chunks, plan_ranges, subtract

log = logging.getLogger(__name__)


class QueueStream:
    """The driver side of one queue of one query run."""

    def __init__(
        self, conn: Connection, queue: QueueInfo, settings: SourceSettings, owner: str, run: str
    ):
        self.queue = queue
        self.settings = settings
        self.run = run  # names this run of the query in the delivery counts
        self.consumer = StreamConsumer(conn, queue, owner, settings.lease_timeout, run)

    @property
    def name(self) -> str:
        return self.queue.name

    @property
    def max_batch_attempts(self) -> int:
        """Runs that may read a batch without a commit before its messages move: option
        ``maxBatchAttempts``, else the queue's ``max_delivery_count``, never below
        ``MIN_BATCH_ATTEMPTS`` (the first replay is always the first attempt's rows)."""
        given = self.settings.max_batch_attempts
        return (
            given if given is not None else max(MIN_BATCH_ATTEMPTS, self.queue.max_delivery_count)
        )

    def offset(self, p: Position) -> SourceOffset:
        return SourceOffset(self.queue.name, str(self.queue.queue_id), p.from_id, p.id, p.ts)

    @staticmethod
    def position(o: SourceOffset) -> Position:
        return Position(o.from_id, o.id, o.ts)

    def owns(self, o: SourceOffset) -> bool:
        """``o`` was written for this queue in this incarnation."""
        return o.queue == self.queue.name and o.incarnation == str(self.queue.queue_id)

    def check(self, o: SourceOffset) -> None:
        """Fail unless ``o``, an offset of the checkpoint, belongs to this queue."""
        o.check_queue(self.queue.name, self.queue.queue_id)

    def lease_holder_elsewhere(self) -> str | None:
        """The other consumer holding this queue's lease now; None when it is free or ours."""
        return self.consumer.lease.held_by_other()

    def require_alive(self, s: SourceOffset) -> None:
        live = self.consumer.current_incarnation()
        if live is None:
            raise QueueNotFoundError(
                f"queue {self.queue.name!r} was deleted while this streaming query consumed it; "
                "create it again and start the query with a new checkpointLocation"
            )
        s.check_queue(self.queue.name, live)

    # -- positions -----------------------------------------------------------------------------

    def initial(self, start: StartingPosition | None, pass_losses: bool = True) -> SourceOffset:
        """Where this queue's stream starts; ``pass_losses``: mark lost ranges below it as
        before the start now (the caller does it later when the start may not be used)."""
        first = self.consumer.initial(start)
        if pass_losses:
            self.consumer.pass_losses_before(first.id)
        return self.offset(first)

    def pass_losses_before(self, first_id: int) -> None:
        """This queue's stream starts at ``first_id``: lost ranges below it are not its own."""
        self.consumer.pass_losses_before(first_id)

    def fix_target(self) -> SourceOffset:
        return self.offset(self.consumer.fix_target())

    def plan(self, s: SourceOffset, max_rows: int | None) -> Plan:
        """Acks the batch ending at ``s`` (committed), then plans the next one."""
        return self.consumer.plan(self.position(s), max_rows)

    @staticmethod
    def taken(plan: Plan) -> int:
        """Messages the planned batch takes of ``maxMessagesPerTrigger``: its span of ids (gaps
        count) and its due timer rows."""
        if plan.end is None:
            return 0
        return plan.end.id - plan.end.from_id + plan.due

    @staticmethod
    def available(plan: Plan) -> int:
        """Messages the planned batch could deliver (for ``minMessagesPerTrigger``)."""
        if plan.end is None:
            return 0
        return plan.latest.id - plan.end.from_id + plan.due

    def lag(self, plan: Plan, end: SourceOffset) -> dict[str, Any]:
        """The latest offset with the lag after the batch ending at ``end``: ``behind`` (ids of
        the id path not in a batch yet) and ``oldestAgeMs`` (how long the first of them has
        waited; null when none does)."""
        first = max(end.id, plan.latest.from_id)
        behind = max(0, plan.latest.id - first)
        age = self.consumer.oldest_waiting_age_ms(first, plan.latest.id) if behind else None
        return {**self.offset(plan.latest).to_dict(), "behind": behind, "oldestAgeMs": age}

    def report_losses(self) -> None:
        """``failOnDataLoss``: ids repair counted as lost since the last trigger fail the query
        (DataLossError) or are logged as a warning. Each range once: the engine claims it for
        this run, so neither the next trigger nor a restart reports it again."""
        ranges = self.consumer.new_losses()
        if not ranges:
            return
        what = lost.describe(self.queue.name, ranges)
        if self.settings.fail_on_data_loss:
            raise DataLossError(
                f"{what}. These messages can never be delivered. To go on, restart the query "
                "(each lost range is reported once, so the restart continues past it), or set "
                "option failOnDataLoss=false to log lost ids as a warning instead",
                self.queue.name,
                tuple((r.lo, r.hi, r.lost) for r in ranges),
                "; ".join(sorted({r.cause for r in ranges})),
            )
        log.warning("%s. failOnDataLoss=false: the query goes on", what)

    # -- the batch -------------------------------------------------------------------------------

    def partitions(self, s: SourceOffset, e: SourceOffset) -> list[InputPartition]:
        """The Spark tasks of this queue's part of the batch ``(s, e]``."""
        batch = self.consumer.batch(self.position(s), self.position(e))
        if batch is None:
            return []
        q = self.queue
        base: dict[str, Any] = {  # fields every partition of this batch shares
            "connection": self.settings.connection,
            "queue": q.name,
            "queue_id": str(q.queue_id),
            "bucket_size": q.bucket_size,
            "end_ts": e.ts,
            "replay": batch.replay,
        }
        tally_run = "" if batch.replay else self.run
        if self.settings.count_deliveries:
            base.update(
                run=self.run,
                max_delivery_count=q.max_delivery_count,
                max_batch_attempts=self.max_batch_attempts,
                drop_allowed=not self.settings.fail_on_data_loss,
            )
        out: list[InputPartition] = []
        if batch.hi > batch.lo:
            for plo, phi in plan_ranges(
                batch.lo,
                batch.hi,
                q.bucket_size,
                self.settings.max_ids_per_partition,
                self.settings.min_ids_per_partition,
            ):
                mine = tuple(r for r in batch.excluded if r[0] < phi and r[1] > plo)
                if subtract(plo, phi, mine) > 0:
                    out.append(
                        CassieQPartition(
                            KIND_IDS, lo=plo, hi=phi, excluded=mine, tally_run=tally_run, **base
                        )
                    )
        for chunk in chunks(batch.timer_ids):
            mine = tuple(r for r in batch.timer_excluded if r[0] <= chunk[-1] and r[1] > chunk[0])
            out.append(CassieQPartition(KIND_TIMERS, ids=chunk, excluded=mine, **base))
        log.debug("queue %s: batch %s..%s in %d partitions", q.name, s, e, len(out))
        return out

    def ack_through(self, e: SourceOffset) -> None:
        """Ack what the committed batch ending at ``e`` delivered (``engine/stream/ack.py``).
        Idempotent; fenced by the lease: QueueBusyError once another run took it over."""
        self.consumer.ack_through(self.position(e))

    def stop(self) -> None:
        self.consumer.lease.release()


def split_cap(
    max_rows: int | None,
    names: list[str],
    turn: int,
    plan_one: Callable[[str, int | None], int],
) -> None:
    """``maxMessagesPerTrigger`` split between queues: ``plan_one(name, share)`` plans one
    queue's batch with at most ``share`` messages (None: no cap; 0: not this trigger) and
    returns how many its batch takes. Queues go in turn order (the first one changing from
    trigger to trigger, so that no queue waits for ever when the cap is below the number of
    queues); each gets an equal share of what the queues before it left, so a share a queue
    without messages does not use goes to the queues after it: a trigger delivers nothing only
    when no queue has anything (an AvailableNow run ends on such a trigger)."""
    n = len(names)
    if n == 0:
        return
    order = names[turn % n :] + names[: turn % n]
    remaining = max_rows
    for i, name in enumerate(order):
        share = None if remaining is None else -(-remaining // (n - i))  # ceil
        used = plan_one(name, share)
        if remaining is not None:
            remaining = max(0, remaining - used)
