"""The cassieq source: ``spark.readStream.format("cassieq")`` and ``spark.read.format("cassieq")``.

This module maps Spark's stream reader onto ``engine/stream.py``, which plans, reads and acks
batches; it holds no queue logic of its own. What maps onto what:

* ``initialOffset``/``latestOffset`` are the engine's stream positions as offsets
  (``offset.py``: the queue and its incarnation added, so a checkpoint used with another queue,
  or after the queue was deleted and created again, fails with CheckpointMismatchError before
  anything is acked, finding F24). A read limit (``maxMessagesPerTrigger``) caps the engine's
  plan; ``Trigger.AvailableNow`` gives it a target (``prepareForTriggerAvailableNow``).
* **Ack on commit**: Spark calls ``latestOffset(start)`` for batch N+1 only after batch N's sink
  commit and commit log, so everything below ``start`` is committed; the engine's planning acks
  it there (and ``commit`` again, idempotently). After the last batch of an ``AvailableNow`` run
  Spark calls ``latestOffset`` once more, so that batch is acked before the query stops.
  Nothing is acked in ``read()`` or at planning time of the batch itself.
* ``partitions`` cuts the engine's batch into Spark tasks (``partition.py``); ``read`` runs on
  executors, on a pickled copy of the reader that never saw the planning
  (``partition_reader.py``).
* **One consumer at a time**: the query holds the queue's consumer lease (``stream:<id>``),
  renewed by a daemon thread in the driver-side reader process; every ack is fenced by it, and
  a run that lost it fails with QueueBusyError (``engine/lease.py``). Client ``get()`` fails
  with QueueBusyError while it is held; a second query waits for the lease to lapse and fails
  with QueueBusyError if its holder renews it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..engine import lost, snapshot
from ..engine.queues import QueueInfo
from ..engine.session import shared_connection
from ..engine.stream import Plan, Position, StreamConsumer
from ..errors import ConfigError, DataLossError, QueueNotFoundError
from .offset import SourceOffset
from .options import SourceSettings, parse_source_settings, resolve_queue
from .partition import (
    KIND_IDS,
    KIND_SNAPSHOT,
    KIND_TIMERS,
    CassieQPartition,
    chunks,
    plan_ranges,
    subtract,
)
from .partition_reader import read_partition

log = logging.getLogger(__name__)

# A read limit that caps nothing (a ReadMaxRows that is not ReadAllAvailable: see
# getDefaultReadLimit).
NO_ROW_CAP = 2**62


class CassieQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("cassieq")``: one instance per query run on the driver, plus
    pickled copies whose only job is ``read()``."""

    _LIVE = ("_queue", "_stream")

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None):
        # PySpark's streaming source runner turns an exception raised here into its own
        # UnboundLocalError (it stops a reader it never got): keep ours for the first call.
        self._init_error: ConfigError | None = None
        try:
            self.settings = parse_source_settings(options)
        except ConfigError as exc:
            self._init_error = exc
            self.settings = None  # type: ignore[assignment]
        self.owner = (
            f"stream:{(self.settings and self.settings.consumer_id) or uuid.uuid4().hex[:12]}"
        )
        self._latest: dict | None = None
        self._initial: dict | None = None  # what initialOffset returned in this run
        self._first_plan = True
        self._last_batch_at = time.monotonic()  # pacing: the run's start, then the last batch
        self._reset_live()

    def _reset_live(self) -> None:
        self._queue: QueueInfo | None = None
        self._stream: StreamConsumer | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._LIVE}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_live()

    def _connect(self) -> tuple[QueueInfo, StreamConsumer]:
        if self._stream is None or self._queue is None:
            conn = shared_connection(self.settings.common.connection)
            self._queue = resolve_queue(conn, self.settings.common)
            self._stream = StreamConsumer(
                conn, self._queue, self.owner, self.settings.lease_timeout
            )
        return self._queue, self._stream

    def _offset(self, d: dict) -> SourceOffset:
        """An offset of the checkpoint, checked against the queue this query reads (F24)."""
        queue, _ = self._connect()
        off = SourceOffset.from_dict(d)
        off.check_queue(queue.name, queue.queue_id)
        return off

    def _check_alive(self, s: SourceOffset) -> None:
        """The queue may have been deleted (and created again) while the query runs: fail
        instead of consuming a dead incarnation forever (F23)."""
        queue, st = self._connect()
        live = st.current_incarnation()
        if live is None:
            raise QueueNotFoundError(
                f"queue {queue.name!r} was deleted while this streaming query consumed it; "
                "create it again and start the query with a new checkpointLocation"
            )
        s.check_queue(queue.name, live)

    def _make(self, p: Position) -> SourceOffset:
        queue, _ = self._connect()
        return SourceOffset(queue.name, str(queue.queue_id), p.from_id, p.id, p.ts)

    @staticmethod
    def _position(o: SourceOffset) -> Position:
        return Position(o.from_id, o.id, o.ts)

    # -- offsets -----------------------------------------------------------------------------------

    def _raise_init_error(self) -> None:
        if self._init_error is not None:
            raise self._init_error

    def initialOffset(self) -> dict:
        self._raise_init_error()
        _, st = self._connect()
        first = st.initial(self.settings.starting_position)
        st.pass_losses_before(first.id)
        self._initial = self._make(first).to_dict()
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        self._raise_init_error()
        n = self.settings.max_messages_per_trigger
        if n:
            return ReadMaxRows(n)
        # With only a minimum, a limit that is not ReadAllAvailable tells the triggers that
        # pace (processingTime, the default) from Trigger.Once, which Spark passes
        # ReadAllAvailable to (as Kafka, Once ignores the minimum).
        return (
            ReadMaxRows(NO_ROW_CAP)
            if self.settings.min_messages_per_trigger
            else ReadAllAvailable()
        )

    def prepareForTriggerAvailableNow(self) -> None:
        self._raise_init_error()
        queue, st = self._connect()
        target = self._make(st.fix_target())
        log.info("queue %s: AvailableNow target %s", queue.name, target.to_json())

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._raise_init_error()
        s = self._offset(start)
        queue, st = self._connect()
        self._check_alive(s)
        self._report_losses()
        if self._first_plan:
            self._first_plan = False
            if self.settings.starting_position is not None and start != self._initial:
                log.info(
                    "queue %s: option startingPosition (%s) is ignored: the checkpoint already "
                    "has offsets, the query resumes at id %d",
                    queue.name,
                    self.settings.starting_position.describe(),
                    s.id,
                )
        # Spark calls this for batch N+1 only after batch N's commit log: everything below
        # `start` is committed, so the ack the engine's planning does first can never
        # precede Spark's commit.
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if max_rows is not None and max_rows >= NO_ROW_CAP:
            max_rows = None
        plan = st.plan(self._position(s), max_rows)
        end = s if plan.end is None or self._hold_back(limit, plan) else self._make(plan.end)
        self._latest = self._with_lag(plan, end)
        if end is s:
            return s.to_dict()  # nothing new (or not enough yet): Spark runs no batch
        self._last_batch_at = time.monotonic()
        return end.to_dict()

    def _report_losses(self) -> None:
        """``failOnDataLoss``: ids repair counted as lost since the last trigger fail the query
        (DataLossError) or are logged as a warning. Each range once: the engine claims it for
        this run, so neither the next trigger nor a restart reports it again."""
        queue, st = self._connect()
        ranges = st.new_losses()
        if not ranges:
            return
        what = lost.describe(queue.name, ranges)
        if self.settings.fail_on_data_loss:
            raise DataLossError(
                f"{what}. These messages can never be delivered. To go on, restart the query "
                "(each lost range is reported once, so the restart continues past it), or set "
                "option failOnDataLoss=false to log lost ids as a warning instead",
                queue.name,
                tuple((r.lo, r.hi, r.lost) for r in ranges),
                "; ".join(sorted({r.cause for r in ranges})),
            )
        log.warning("%s. failOnDataLoss=false: the query goes on", what)

    def _with_lag(self, plan: Plan, end: SourceOffset) -> dict:
        """The latest offset as reported in the query's progress (``sources[].latestOffset``),
        with the lag after the batch ending at ``end``: ``behind`` (ids of the id path not in
        a batch yet) and ``oldestAgeMs`` (how long the first of them has waited; null when
        none does). Spark only shows it: it is never a batch's offset."""
        _, st = self._connect()
        first = max(end.id, plan.latest.from_id)
        behind = max(0, plan.latest.id - first)
        age = st.oldest_waiting_age_ms(first, plan.latest.id) if behind else None
        return {**self._make(plan.latest).to_dict(), "behind": behind, "oldestAgeMs": age}

    def _hold_back(self, limit: ReadLimit, plan: Plan) -> bool:
        """``minMessagesPerTrigger``: no batch until that many messages are there, unless
        ``maxTriggerDelay`` has passed since the last batch (or the run's start). Not for
        Trigger.Once (ReadAllAvailable) nor AvailableNow (a run with a target), as Kafka's."""
        wanted = self.settings.min_messages_per_trigger
        _, st = self._connect()
        if wanted is None or isinstance(limit, ReadAllAvailable) or st.target is not None:
            return False
        assert plan.end is not None
        available = plan.latest.id - plan.end.from_id + plan.due
        waited = time.monotonic() - self._last_batch_at
        if available >= wanted or waited >= self.settings.max_trigger_delay:
            return False
        log.debug(
            "queue %s: %d messages available, minMessagesPerTrigger %d: no batch yet "
            "(%.1f s of maxTriggerDelay %.1f s waited)",
            st.queue.name,
            available,
            wanted,
            waited,
            self.settings.max_trigger_delay,
        )
        return True

    # -- planning ------------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s, e = self._offset(start), self._offset(end)
        queue, st = self._connect()
        batch = st.batch(self._position(s), self._position(e))
        if batch is None:
            return []
        base: dict[str, Any] = {  # fields every partition of this batch shares
            "connection": self.settings.connection,
            "queue": queue.name,
            "queue_id": str(queue.queue_id),
            "bucket_size": queue.bucket_size,
            "end_ts": e.ts,
        }
        out: list[InputPartition] = []
        if batch.hi > batch.lo:
            for plo, phi in plan_ranges(
                batch.lo,
                batch.hi,
                queue.bucket_size,
                self.settings.max_ids_per_partition,
                self.settings.min_ids_per_partition,
            ):
                mine = tuple(r for r in batch.excluded if r[0] < phi and r[1] > plo)
                if subtract(plo, phi, mine) > 0:
                    out.append(CassieQPartition(KIND_IDS, lo=plo, hi=phi, excluded=mine, **base))
        for chunk in chunks(batch.timer_ids):
            mine = tuple(r for r in batch.timer_excluded if r[0] <= chunk[-1] and r[1] > chunk[0])
            out.append(CassieQPartition(KIND_TIMERS, ids=chunk, excluded=mine, **base))
        log.debug("queue %s: batch %s..%s in %d partitions", queue.name, start, end, len(out))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    # -- acking ----------------------------------------------------------------------------------------

    def commit(self, end: dict) -> None:
        self.ack_through(self._offset(end))

    def ack_through(self, e: SourceOffset) -> None:
        """Ack what the committed batch ending at ``e`` delivered (``engine/stream_ack.py``).
        Idempotent; fenced by the lease: QueueBusyError once another run took it over."""
        _, st = self._connect()
        st.ack_through(self._position(e))

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.lease.release()


# -- the batch reader ------------------------------------------------------------------------------------


class CassieQBatchReader(DataSourceReader):
    """``spark.read.format("cassieq")``: a snapshot of the queue's unacked messages. Acks nothing."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None):
        self.settings = parse_source_settings(options)

    def partitions(self) -> Sequence[InputPartition]:
        conn = shared_connection(self.settings.common.connection)
        queue = resolve_queue(conn, self.settings.common)
        snap = snapshot.take(conn, queue)
        base: dict[str, Any] = {
            "connection": self.settings.connection,
            "queue": queue.name,
            "queue_id": str(queue.queue_id),
            "bucket_size": queue.bucket_size,
            "reader": snap.reader,
        }
        ranges = plan_ranges(
            snap.lo,
            snap.hi,
            queue.bucket_size,
            self.settings.max_ids_per_partition,
            self.settings.min_ids_per_partition,
        )
        if not ranges:
            ranges = [(snap.lo, snap.lo)]  # Spark wants at least one partition
        return [CassieQPartition(KIND_SNAPSHOT, lo=a, hi=b, **base) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


__all__ = [
    "CassieQBatchReader",
    "CassieQStreamReader",
    "SourceSettings",
    "parse_source_settings",
]
