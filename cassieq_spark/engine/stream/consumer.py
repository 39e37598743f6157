"""Consuming a queue batch by batch for a stream processor (the Spark source's driver side).

A batch is planned on one process, read on others (``read.py``), and acked after the
processor committed it (``ack.py``). A batch ``(start, end]`` between two
:class:`Position` s delivers

* the *id path*: ids in ``[end.from_id, end.id)`` that are due at the batch's time ``end.ts``
  (plain messages always are; ``from_id`` is fixed when the batch is planned, at or above
  ``start.id``, so a replay reads the same ids whatever start Spark passes it), and
* the *timer path*: delayed or once client-delivered messages below that which are due at
  ``end.ts`` and not acked, found through their timers (``timer_path.py``).

**Planning** never moves past an id that may still be in flight: the end is the horizon of
``monoton`` (lowest open, young reservation). Reservations older than the queue's repair
timeout are handed to repair *before* a batch passes them, and every batch excludes those
ranges, so repair's republish never duplicates a delivered message. A batch starts at the
queue's reader pointer if another consumer moved it past the previous end, and
its time is Cassandra's, never the caller's (a clock running ahead would deliver delayed
messages early). With a target (a run that ends once it has consumed what was
there when it started), planning waits for blocks still being written below the target.

**Ack on commit.** The caller plans batch N+1 only after batch N is committed, so planning acks
everything below its start first. Batches run one after the other and each is acked before the
next is planned, so a message delivered by one batch is acked (``acked = true``, or the reader
pointer for plain messages) before the next batch looks: nothing is delivered twice without a
failure in between.

All pointer moves are fenced by the consumer lease (see ``lease.py``).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

from ...errors import QueueNotFoundError
from ..core import monoton, pointers, queues
from ..core.buckets import split_by_bucket
from ..core.clock import to_epoch
from ..core.queues import QueueInfo
from ..store.session import Connection
from ..upkeep import lost
from ..upkeep.ranges import record_skipped
from ..write import records
from .ack import BatchAck
from .lease import ClusterClock, Lease
from .read import skipped_overlapping, timer_scan_start
from .start import StartingPosition, first_id
from .timer_path import TimerCandidates, cap_due

log = logging.getLogger(__name__)

# With a row limit, the latest position reported (the backlog) looks this many batches ahead.
LATEST_LOOKAHEAD = 10
TARGET_POLL_SECONDS = 0.25  # how often to look again at a block being written below the target
FUTURE_TS_WARN_SECONDS = 60.0
OLDEST_LOOKUP_ROWS = 16  # rows per bucket the lag's age looks at

__all__ = ["Batch", "Plan", "Position", "StreamConsumer"]

Ranges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Position:
    """A place in the stream: every message with an id below ``id`` that is due at or before
    ``ts`` (epoch ms, Cassandra's clock) was handed to a batch ending here; ``from_id`` is where
    the id path of that batch starts."""

    from_id: int
    id: int
    ts: int

    def covers(self, other: Position) -> bool:
        """Everything ``other`` stands for is also behind this position."""
        return self.id >= other.id and self.ts >= other.ts


@dataclass(frozen=True)
class Plan:
    """The next batch's end (None: nothing new, no batch) and the latest position there is
    (where the backlog ends, without a row limit or target)."""

    end: Position | None
    latest: Position
    due: int = 0  # messages of the timer path due in this batch


@dataclass(frozen=True)
class Batch:
    """What a batch's readers read: ids ``[lo, hi)`` without the ranges in ``excluded``, and
    the timer candidates ``timer_ids`` without those in ``timer_excluded`` (ranges repair
    owns). ``replay``: a run that did not plan the batch reads it (``read.as_planned``)."""

    lo: int
    hi: int
    excluded: Ranges
    timer_ids: tuple[int, ...]
    timer_excluded: Ranges
    replay: bool = False


class StreamConsumer:
    """Planning and acking for one run of a streaming consumer on one queue incarnation."""

    def __init__(
        self, conn: Connection, queue: QueueInfo, owner: str, lease_timeout: float, run: str = ""
    ):
        """``run`` names this run when its batches' tasks record tallies (``tally.py``) for
        its acks to use; "" acks by scanning."""
        self.conn = conn
        self.queue = queue
        self.clock = ClusterClock(conn)
        self.lease = Lease(conn, queue, owner, lease_timeout, self.clock)
        self.timers = TimerCandidates(conn, queue)
        self._acks = BatchAck(conn, queue, self.lease, self.timers, run)
        self.target: Position | None = None  # where this run ends, if it does
        # Abandoned reservations this run handed to repair; only those above the last start
        # can come up again, so the set is pruned as the stream moves.
        self._recorded: set[tuple[int, int]] = set()
        self._acked: Position | None = None  # the last position acked by this run
        # (start, end) of the batch planned last, with its timer path: batch() reuses it
        self._planned: tuple[Position, Position, list[int]] | None = None
        self._scan_from: dict[tuple[int, int], int] = {}  # (end id, ts) -> first timer slot
        self._warned_future = False
        self._initial: Position | None = None  # this run's start of a new stream (batch 0)

    def current_incarnation(self) -> uuid.UUID | None:
        """The queue's incarnation now; None once it was deleted."""
        try:
            return queues.get_queue(self.conn, self.queue.name).queue_id
        except QueueNotFoundError:
            return None

    def pointers(self) -> pointers.Pointers:
        return pointers.read(self.conn, self.queue)

    def horizon(self, from_id: int, window: int | None = None) -> monoton.Horizon:
        return monoton.horizon(self.conn, self.queue, from_id, self.clock.now(), window)

    def record_abandoned(self, hz: monoton.Horizon, lo: int, hi: int) -> None:
        """Hand reservations whose writer is presumed dead to repair before passing them."""
        self._recorded = {r for r in self._recorded if r[1] > lo}
        for rlo, rhi in hz.abandoned:
            if rlo < hi and rhi > lo and (rlo, rhi) not in self._recorded:
                record_skipped(self.conn, self.queue, rlo, rhi)
                self._recorded.add((rlo, rhi))

    def excluded(self, lo: int, hi: int) -> list[tuple[int, int]]:
        return skipped_overlapping(self.conn, self.queue, lo, hi)

    # -- lost data ---------------------------------------------------------------------------

    def new_losses(self) -> list[lost.LostRange]:
        """Lost ranges (see ``lost.py``) no query has reported yet, each claimed for this run
        so that it is reported once: by this run and no other, nor again after a restart."""
        return [
            rng
            for rng in lost.unreported(self.conn, self.queue)
            if lost.mark_reported(self.conn, self.queue, rng, self.lease.owner)
        ]

    def pass_losses_before(self, first_id: int) -> int:
        """A new query never needed ids below its start: mark lost ranges there as passed
        rather than report them to it. Returns how many."""
        passed = 0
        for rng in lost.unreported(self.conn, self.queue):
            if rng.hi <= first_id and lost.mark_reported(
                self.conn, self.queue, rng, lost.BEFORE_START + self.lease.owner
            ):
                passed += 1
        if passed:
            log.info(
                "queue %s: %d lost ranges below id %d lie before this stream's start: not "
                "reported to it (they stay counted in stats' `lost`)",
                self.queue.name,
                passed,
                first_id,
            )
        return passed

    # -- planning ----------------------------------------------------------------------------

    def initial(self, start: StartingPosition | None = None) -> Position:
        """Where a new stream starts: the id path at the reader pointer (or at ``start``, see
        ``start.py``), the timer path at the invisibility pointer (acking this
        position, which delivered nothing, scans no slot)."""
        self.lease.ensure()
        p = self.pointers()
        first = p.reader if start is None else first_id(self.conn, self.queue, start, p.reader)
        if first > p.reader:
            log.info(
                "queue %s: the stream starts at id %d (startingPosition %s); ids %d..%d stay "
                "in the queue, and its batches are acked message by message while the reader "
                "pointer is below them",
                self.queue.name,
                first,
                start.describe() if start else "earliest",
                p.reader,
                first - 1,
            )
        self._initial = Position(first, first, max(-1, p.timer_slot * 1000 - 1))
        return self._initial

    def _since_key(self, end: Position) -> str:
        return f"stream-since:{end.from_id}:{end.id}:{end.ts}"

    def _timer_since(self, start: Position, end: Position) -> int:
        """Where the timer path of the batch ``(start, end]`` starts: ``start.ts``, except for
        a batch 0 replayed by a later run. Spark hands that one the replaying run's initial
        position, whose time is the invisibility pointer of now, which client gets move while
        no run holds the lease; starting there would drop rows a client received meanwhile
        from the replay. The run that planned batch 0 recorded its start's time under the
        batch's end (:meth:`plan`): the replay starts there."""
        if self._initial is None or start != self._initial:
            return start.ts
        recorded = records.read(self.conn, self.queue.queue_id, self._since_key(end))
        return start.ts if recorded is None else min(start.ts, recorded[0])

    def fix_target(self) -> Position:
        """Make this run end at everything reserved by now, including blocks still being
        written: planning waits for those rather than ending the run before them."""
        self.lease.ensure()
        end = monoton.counter(self.conn, self.queue)
        self.target = Position(end, end, self.clock.now_ms())
        return self.target

    def plan(self, start: Position, max_rows: int | None = None) -> Plan:
        """The batch after ``start``: at most ``max_rows`` messages, due timer-path rows
        (see ``timer_path.cap_due``) plus a span of ids of the id path. Call it only once the
        batch ending at ``start`` is committed: it acks that batch first."""
        self.lease.ensure()
        self.ack_through(start)
        # Ids another consumer took since `start` (an older position, clients) stay taken.
        from_id = max(start.id, self.pointers().reader)
        self._warn_future(start.ts)
        waited_since = None
        while True:
            now_ms = self.clock.now_ms()
            hz = self.horizon(from_id, self._window(from_id, max_rows))
            full_end = max(from_id, hz.safe_end)
            latest = Position(from_id, full_end, max(start.ts, now_ms))
            end_id, ts_cap = full_end, now_ms
            if self.target is not None:
                end_id = min(end_id, max(from_id, self.target.id))
                ts_cap = self.target.ts
            end_ts = max(start.ts, ts_cap)
            found = self.timers.due(from_id, start.ts, end_ts) if end_ts > start.ts else []
            if max_rows is None:
                due = [i for i, _ in found]
            else:
                # The cap holds for both paths: the timer path first (what a cap left to the
                # id path alone would starve under a steady producer), the id path the rest.
                end_ts, due = cap_due(found, start.ts, end_ts, max(1, max_rows))
                end_id = min(end_id, from_id + max(0, max_rows - len(due)))
            self.record_abandoned(hz, from_id, end_id)
            if end_id > start.id or due:
                break
            if not self._target_blocked(from_id, hz, waited_since):
                return Plan(None, latest)
            waited_since = waited_since or time.monotonic()
            time.sleep(TARGET_POLL_SECONDS)
        end = Position(from_id, end_id, end_ts)
        if start == self._initial and end.ts > start.ts:
            # batch 0: its start's time is not kept by Spark (see _timer_since)
            records.put(self.conn, self.queue.queue_id, self._since_key(end), start.ts, 0)
        self._planned = (start, end, due)
        return Plan(end, latest, len(due))

    def _warn_future(self, start_ts: int) -> None:
        ahead = (start_ts - self.clock.now_ms()) / 1000
        if ahead > FUTURE_TS_WARN_SECONDS and not self._warned_future:
            self._warned_future = True
            log.warning(
                "queue %s: the checkpoint's time is %.0f s ahead of Cassandra's clock (written "
                "by a driver whose clock ran ahead); messages due before it were delivered "
                "early, and the stream's time stays there until Cassandra's clock catches up",
                self.queue.name,
                ahead,
            )

    def _window(self, from_id: int, max_rows: int | None) -> int | None:
        """How far ahead planning looks for reservations: the cost of planning then follows
        the batch, not the backlog. Unlimited batches look at everything."""
        window = None
        if self.target is not None:
            window = max(1, self.target.id - from_id)
        if max_rows is not None:
            ahead = max(1, max_rows) * LATEST_LOOKAHEAD
            window = ahead if window is None else min(window, ahead)
        return window

    def _target_blocked(
        self, from_id: int, hz: monoton.Horizon, waited_since: float | None
    ) -> bool:
        """Is the run's target held back by a block still being written? Then wait (the
        caller would take "nothing new" for the end of the run), but no longer than the
        queue's repair timeout, after which readers pass the block anyway."""
        if self.target is None or from_id >= self.target.id:
            return False
        limit = self.queue.repair_timeout + 2 * TARGET_POLL_SECONDS
        if waited_since is not None and time.monotonic() - waited_since > limit:
            log.warning(
                "queue %s: the run ends at id %d before its target %d (AvailableNow): a block "
                "stayed open longer than the repair timeout",
                self.queue.name,
                from_id,
                self.target.id,
            )
            return False
        if waited_since is None:
            log.info(
                "queue %s: waiting for ids from %d (%d open reservations) to reach the run's "
                "target %d (AvailableNow)",
                self.queue.name,
                hz.safe_end,
                hz.open_count,
                self.target.id,
            )
        return True

    def batch(self, start: Position, end: Position) -> Batch | None:
        """What the batch ``(start, end]`` delivers, for its readers; None: nothing. The same
        for the same end, whoever planned it (a replay after a restart).

        The id path starts at ``end.from_id``, never at ``start``: planning put the batch's
        real start there (at or above ``start.id``), and Spark hands batch 0 a ``start`` it
        asks the source for again when it runs or replays the batch, which a ``latest`` start
        computes anew (past the batch by then). ``end == start`` is a queue that did not move
        in this batch (several queues): nothing.

        A batch this run did not plan (a replay after a restart) reads its rows as the
        planning found them (``read.as_planned``): clients that received and acked some of
        them while no run held the lease do not take them out of the replay."""
        if end == start:
            return None
        lo = end.from_id
        replay = self._planned is None or self._planned[:2] != (start, end)
        since = self._timer_since(start, end) if replay else start.ts
        if end.id <= lo and end.ts <= since:
            return None
        self.lease.ensure()
        excluded = self.excluded(lo, end.id) if end.id > lo else []
        ids: list[int] = []
        timer_excluded: list[tuple[int, int]] = []
        if end.ts > since:
            if self._planned is not None and not replay:
                ids = self._planned[2]
            else:  # a replay on a new run, or the batch was planned elsewhere
                ids = self.timers.due_ids(lo, since, end.ts, replay=True)
            # The ack of this batch scans the timer slots its timer path looked at.
            self._scan_from = {
                **dict(list(self._scan_from.items())[-3:]),
                (end.id, end.ts): timer_scan_start(since),
            }
            if ids:
                timer_excluded = self.excluded(ids[0], ids[-1] + 1)
        return Batch(lo, end.id, tuple(excluded), tuple(ids), tuple(timer_excluded), replay)

    def oldest_waiting_age_ms(self, from_id: int, to_id: int) -> int | None:
        """How long (ms, Cassandra's clock against the writer's ``enqueued_at``) the first
        message of ``[from_id, to_id)`` has waited: the lag of a stream whose next batch starts
        at ``from_id``. Looks at one bucket's worth of ids at most; None: none found there."""
        hi = min(to_id, from_id + self.queue.bucket_size)
        stmt = self.conn.prepare(
            "SELECT id, enqueued_at, acked FROM {ks}.messages WHERE queue_id = ? AND bucket = ? "
            f"AND id >= ? AND id < ? LIMIT {OLDEST_LOOKUP_ROWS}"
        )
        for bucket, blo, bhi in split_by_bucket(from_id, hi, self.queue.bucket_size):
            for row in self.conn.execute(stmt, (self.queue.queue_id, bucket, blo, bhi)):
                if row.enqueued_at is not None and not row.acked:
                    return max(0, self.clock.now_ms() - int(to_epoch(row.enqueued_at) * 1000))
        return None

    # -- acking ------------------------------------------------------------------------------

    def ack_through(self, end: Position) -> None:
        """Ack what the committed batch ending at ``end`` delivered (see ``ack.py``).
        Idempotent; fenced by the lease: QueueBusyError once another run took it over."""
        if self._acked is not None and self._acked.covers(end):
            return
        self.lease.ensure()
        self._acks.ack(end.id, end.ts, self._scan_from.get((end.id, end.ts)), end.from_id)
        self._acked = end if self._acked is None or end.covers(self._acked) else self._acked
