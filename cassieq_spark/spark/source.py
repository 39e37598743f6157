"""The cassieq source: ``spark.readStream.format("cassieq")`` and ``spark.read.format("cassieq")``.

This module maps Spark's stream reader onto ``engine/stream/consumer.py``, which plans, reads and acks
batches; it holds no queue logic of its own. It reads one queue (option ``queue``) or several
(``queues``, ``queuePattern``), each through its own ``QueueStream`` (``queue_stream.py``):
its own offset in the query's offset, its own lease, its own acks. What maps onto what:

* ``initialOffset``/``latestOffset`` are the engine's stream positions as offsets
  (``offset.py``: the queue and its incarnation added, so a checkpoint used with another queue,
  or after the queue was deleted and created again, fails with CheckpointMismatchError before
  anything is acked). A read limit (``maxMessagesPerTrigger``) caps the engine's
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
  a run that lost it fails with QueueBusyError (``engine/stream/lease.py``). Client ``get()`` fails
  with QueueBusyError while it is held; a second query waits for the lease to lapse and fails
  with QueueBusyError if its holder renews it. When the query ends, Spark ends the reader's
  process with SIGTERM, which ``runner_exit.py`` routes through ``stop`` (the leases go back).
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

from ..engine.core.queues import QueueInfo
from ..engine.store.session import Connection, shared_connection
from ..engine.stream import snapshot
from ..errors import ConfigError, QueueNotFoundError
from .offset import SourceOffset
from .options import SourceSettings, parse_source_settings, resolve_queue
from .partition import KIND_EMPTY, KIND_SNAPSHOT, CassieQPartition, plan_ranges
from .partition_reader import read_partition
from .queue_stream import QueueStream, split_cap
from .runner_exit import StopOnTerminate
from .selection import lookup

log = logging.getLogger(__name__)

# A read limit that caps nothing (a ReadMaxRows that is not ReadAllAvailable: see
# getDefaultReadLimit).
NO_ROW_CAP = 2**62


class CassieQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("cassieq")``: one instance per query run on the driver, plus
    pickled copies whose only job is ``read()``."""

    _LIVE = ("_streams", "_listed", "_terminate")

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
        self.run = uuid.uuid4().hex[:16]  # this run of the query (stream_deliveries.py)
        self._latest: dict | None = None
        self._initial: dict | None = None  # what initialOffset returned in this run
        self._first_plan = True
        self._last_batch_at = time.monotonic()  # pacing: the run's start, then the last batch
        self._turn = 0  # which queue gets the larger share of maxMessagesPerTrigger
        # AvailableNow: the queues this run ends at (queues joining later wait for the next run)
        self._available_now: frozenset[str] | None = None
        self._dropped: set[str] = set()  # queues no longer read, already logged
        # (queue, incarnation) no longer read: last batch acked, lease given back
        self._retired: set[tuple[str, str]] = set()
        self._busy_logged: dict[str, str] = {}  # pattern queues skipped: name -> their holder
        self._reset_live()
        # Spark ends this process with SIGTERM: through stop(), which gives the leases back.
        self._terminate = StopOnTerminate()

    def _reset_live(self) -> None:
        self._streams: dict[str, QueueStream] = {}
        # the queues the last trigger read (selection.listing): a pattern's as listed then
        self._listed: dict[str, QueueInfo | None] = {}

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._LIVE}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_live()

    # -- the queues ----------------------------------------------------------------------------

    def _conn(self) -> Connection:
        return shared_connection(self.settings.common.connection)

    def _names(self) -> list[str]:
        """The queues this trigger reads (a pattern's: those matching now, one read of the
        queue table), kept in ``_listed`` for this trigger's other checks."""
        self._listed = self.settings.selection.listing(self._conn())
        return list(self._listed)

    def _stream(self, name: str) -> QueueStream | None:
        """The driver side of queue ``name``; None for a queue that is not read: a pattern's
        that is gone, or one the checkpoint names that is no longer selected and was deleted
        (a named queue that is missing fails with QueueNotFoundError, or is created with
        createQueue)."""
        qs = self._streams.get(name)
        if qs is None:
            conn = self._conn()
            if name not in self._listed:
                self._names()  # a replay or commit in a fresh run: nothing listed yet
            info = self.settings.selection.find(conn, name, self._listed, self._resolve)
            if info is None:
                return None
            qs = self._streams[name] = QueueStream(conn, info, self.settings, self.owner, self.run)
        return qs

    def _resolve(self, name: str) -> QueueInfo:
        return resolve_queue(self._conn(), self.settings.common, name)

    def _keep(self, qs: QueueStream, o: SourceOffset) -> bool:
        """Whether the checkpoint's offset ``o`` belongs to the queue read now (a named
        queue's must: CheckpointMismatchError); one that was deleted and created again since
        is another queue, read from its start."""
        if self.settings.selection.keep(qs, o):
            return True
        self._drop(qs.name, "was deleted and created again; the new queue is read from its start")
        return False

    def _alive(self, qs: QueueStream, s: SourceOffset) -> bool:
        """A queue deleted while the query runs: a named one fails the query, a pattern's
        one is no longer read."""
        if not self.settings.selection.gone(qs, s, self._listed):
            return True
        self._streams.pop(qs.name, None)
        qs.stop()
        self._drop(qs.name, "was deleted")
        return False

    def _busy_elsewhere(self, qs: QueueStream) -> bool:
        """A queue the selection leaves out while another streaming query consumes it (a
        pattern's: waiting for the lease would fail this query on every restart). It joins
        in a later trigger once it is free."""
        holder = self.settings.selection.busy_elsewhere(qs)
        if holder is None:
            self._busy_logged.pop(qs.name, None)
            return False
        if self._busy_logged.get(qs.name) != holder:
            self._busy_logged[qs.name] = holder
            log.warning(
                "queue %s matches queuePattern but is consumed by %s (another streaming query "
                "holds its lease): not read until that lease is given back; narrow the pattern "
                "to leave it out",
                qs.name,
                holder,
            )
        return True

    def _retire(self, name: str, last: SourceOffset) -> None:
        """Queue ``name`` is no longer read (removed from ``queues``, no longer matching or
        deleted): ack its last committed batch, ending at ``last``, and give its lease back, so
        that clients and other queries can consume it while this query runs. Once per run and
        incarnation (a queue created again under the name may join later)."""
        if (name, last.incarnation) in self._retired:
            return
        self._retired.add((name, last.incarnation))
        qs = self._streams.pop(name, None)
        if qs is None:
            info = lookup(self._conn(), name)
            if info is not None:
                qs = QueueStream(self._conn(), info, self.settings, self.owner, self.run)
        if qs is None or not qs.owns(last):
            self._drop(name, "is no longer among the queues of this query (it was deleted)")
            return
        holder = qs.lease_holder_elsewhere()
        if holder is not None:
            self._drop(
                name,
                f"is no longer among the queues of this query; {holder} consumes it now, so "
                "its last batch is not acked here (that consumer gets those messages again)",
            )
        else:
            qs.ack_through(last)
            self._drop(name, "is no longer among the queues of this query: its last batch is acked")
        qs.stop()

    def _drop(self, name: str, why: str) -> None:
        if name not in self._dropped:
            self._dropped.add(name)
            log.warning("queue %s %s: this query no longer reads its old offset", name, why)

    def _decode(self, d: dict) -> dict[str, SourceOffset]:
        return self.settings.selection.decode(d)

    def _encode(self, offsets: dict[str, SourceOffset]) -> dict:
        return self.settings.selection.encode(offsets)

    # -- offsets -----------------------------------------------------------------------------------

    def _raise_init_error(self) -> None:
        if self._init_error is not None:
            raise self._init_error

    def initialOffset(self) -> dict:
        """Where this run starts when the checkpoint has no committed batch yet. Computed once
        per run: Spark calls this again when it runs batch 0 (and when a restart replays an
        uncommitted batch 0), and a ``latest`` start computed then would have moved on. What
        batch 0 delivers does not depend on it in any case: its end offset's ``from`` holds
        the start it was planned from (``offset.py``). Lost ranges below the start are passed
        in the run's first ``latestOffset``, only if it starts here (``_first_trigger``)."""
        self._raise_init_error()
        if self._initial is not None:
            return self._initial
        entries = {}
        for name in self._names():
            qs = self._stream(name)
            if qs is not None and not self._busy_elsewhere(qs):
                entries[name] = qs.initial(self.settings.starting_position, pass_losses=False)
        self._initial = self._encode(entries)
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
        fixed = []
        for name in self._names():
            qs = self._stream(name)
            if qs is not None and not self._busy_elsewhere(qs):
                target = qs.fix_target()
                fixed.append(name)
                log.info("queue %s: AvailableNow target %s", name, target.to_json())
        self._available_now = frozenset(fixed)

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._raise_init_error()
        starts = self._decode(start)
        self._first_trigger(start, starts)
        ends: dict[str, SourceOffset] = {}
        reading: dict[str, tuple[QueueStream, SourceOffset]] = {}
        for name in self._names():
            qs = self._stream(name)
            if qs is None:
                continue  # a pattern's queue, deleted since it was listed
            s = starts.get(name)
            if s is not None and not self._keep(qs, s):
                s = None
            if s is None:
                if self._busy_elsewhere(qs):
                    continue
                if self._available_now is None or name in self._available_now:
                    # Joins with this batch (as Kafka's new partitions: from the earliest);
                    # the batch delivers nothing from it.
                    log.info("queue %s: read from now on, from its oldest message", name)
                    ends[name] = qs.initial(None)
                continue
            if self._alive(qs, s):
                qs.report_losses()
                reading[name] = (qs, s)
        for name in sorted(set(starts) - set(ends) - set(reading)):
            self._retire(name, starts[name])
        # Spark calls this for batch N+1 only after batch N's commit log: everything below
        # each start is committed, so the ack each queue's planning does first can never
        # precede Spark's commit.
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if max_rows is not None and max_rows >= NO_ROW_CAP:
            max_rows = None
        plans = {}

        def plan_one(name: str, share: int | None) -> int:
            qs, s = reading[name]
            if share == 0:
                # Not this trigger (the cap is spent); its committed batch is acked all the same.
                qs.ack_through(s)
                ends[name] = s
                return 0
            plans[name] = qs.plan(s, share)
            return QueueStream.taken(plans[name])

        split_cap(max_rows, list(reading), self._turn, plan_one)
        self._turn += 1
        held = self._hold_back(limit, plans)
        lags = {}
        for name, plan in plans.items():
            qs, s = reading[name]
            ends[name] = s if plan.end is None or held else qs.offset(plan.end)
            lags[name] = qs.lag(plan, ends[name])
            if ends[name] != s:
                self._last_batch_at = time.monotonic()
        self._latest = self.settings.selection.report(lags)
        return self._encode(ends)

    def _first_trigger(self, start: dict, starts: dict[str, SourceOffset]) -> None:
        """The run's first plan: a query that starts at this run's ``initialOffset`` never
        needed lost ranges below its start, so they are passed rather than reported; a run
        that resumes a checkpoint (a replayed batch 0 included) passes none, and says when
        ``startingPosition`` was ignored."""
        if not self._first_plan:
            return
        self._first_plan = False
        if start == self._initial:
            for name, s in starts.items():
                qs = self._stream(name)
                if qs is not None and qs.owns(s):
                    qs.pass_losses_before(s.id)
            return
        if self.settings.starting_position is not None:
            log.info(
                "option startingPosition (%s) is ignored: the checkpoint already has offsets, "
                "the query resumes at %s",
                self.settings.starting_position.describe(),
                ", ".join(f"{n} id {o.id}" for n, o in sorted(starts.items())) or "no queue",
            )

    def _hold_back(self, limit: ReadLimit, plans: dict) -> bool:
        """``minMessagesPerTrigger``: no batch until that many messages are there (all queues
        together), unless ``maxTriggerDelay`` has passed since the last batch (or the run's
        start). Not for Trigger.Once (ReadAllAvailable) nor AvailableNow, as Kafka's."""
        wanted = self.settings.min_messages_per_trigger
        if wanted is None or isinstance(limit, ReadAllAvailable) or self._available_now is not None:
            return False
        planned = [p for p in plans.values() if p.end is not None]
        if not planned:
            return False
        available = sum(QueueStream.available(p) for p in planned)
        waited = time.monotonic() - self._last_batch_at
        if available >= wanted or waited >= self.settings.max_trigger_delay:
            return False
        log.debug(
            "%s: %d messages available, minMessagesPerTrigger %d: no batch yet "
            "(%.1f s of maxTriggerDelay %.1f s waited)",
            self.settings.selection.describe(),
            available,
            wanted,
            waited,
            self.settings.max_trigger_delay,
        )
        return True

    # -- planning ------------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        starts = self._decode(start)
        out: list[InputPartition] = []
        for name, e in self._decode(end).items():
            s = starts.get(name)
            if s is None:
                continue  # joined with this batch: nothing of it is delivered
            qs = self._replayed_stream(name)
            if qs is None:
                # Deleted (a replay after a restart): its messages are gone with it.
                self._drop(name, "no longer exists: the batch goes on without its messages")
            elif self._keep(qs, s) and self._keep(qs, e):
                out.extend(qs.partitions(s, e))
        return out

    def _replayed_stream(self, name: str) -> QueueStream | None:
        try:
            return self._stream(name)
        except QueueNotFoundError as exc:
            error = self.settings.selection.missing_on_replay(name, exc)
            if error is exc:
                raise
            raise error from None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    # -- acking ----------------------------------------------------------------------------------------

    def commit(self, end: dict) -> None:
        """Ack what the committed batch ending at ``end`` delivered, queue by queue
        (``engine/stream/ack.py``). Idempotent; fenced by each queue's lease: QueueBusyError
        once another run took it over."""
        for name, e in self._decode(end).items():
            if (name, e.incarnation) in self._retired:
                continue
            if not self.settings.selection.matches(name):
                self._retire(name, e)
                continue
            qs = self._stream(name)
            if qs is not None and self._keep(qs, e):
                qs.ack_through(e)

    def stop(self) -> None:
        terminate = getattr(self, "_terminate", None)  # absent on executors' copies
        if terminate is not None:
            terminate.stopping = True
        for qs in self._streams.values():
            qs.stop()


# -- the batch reader ------------------------------------------------------------------------------------


class CassieQBatchReader(DataSourceReader):
    """``spark.read.format("cassieq")``: a snapshot of the unacked messages of the queue (or
    queues, options ``queues``/``queuePattern``). Acks nothing."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None):
        self.settings = parse_source_settings(options)

    def partitions(self) -> Sequence[InputPartition]:
        conn = shared_connection(self.settings.common.connection)
        found = [
            info or resolve_queue(conn, self.settings.common, name)
            for name, info in self.settings.selection.listing(conn).items()
        ]
        out = [p for queue in found for p in self._snapshot(conn, queue)]
        # Spark wants at least one partition, even when no queue matches.
        return out or [CassieQPartition(KIND_EMPTY, self.settings.connection, "", "", 1)]

    def _snapshot(self, conn: Connection, queue: QueueInfo) -> list[CassieQPartition]:
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
        ) or [(snap.lo, snap.lo)]
        return [CassieQPartition(KIND_SNAPSHOT, lo=a, hi=b, **base) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


__all__ = [
    "CassieQBatchReader",
    "CassieQStreamReader",
    "SourceSettings",
    "parse_source_settings",
]
