"""The cassieq source: ``spark.readStream.format("cassieq")`` and ``spark.read.format("cassieq")``.

This module maps Spark's stream reader onto ``engine/stream.py``, which plans, reads and acks
batches (see ``offset.py`` for what an offset means):

* **Planning** (``latestOffset``) never moves past an id that may still be in flight: the end is
  the horizon of ``monoton`` (lowest open, young reservation). Reservations older than the
  queue's repair timeout are recorded for repair *before* the offset passes them, and every
  batch excludes those ranges, so repair's republish never duplicates a delivered message.
  A batch starts at the queue's reader pointer if another consumer moved it past the previous
  offset, and its time is Cassandra's, never the driver's (a driver clock running ahead would
  deliver delayed messages early: finding F29).
* **One queue per checkpoint**: offsets name the queue and its incarnation; a checkpoint used
  with another queue, or after the queue was deleted and created again, fails with
  CheckpointMismatchError before anything is acked (F24).
* **Ack on commit**: Spark calls ``latestOffset(start)`` for batch N+1 only after batch N's sink
  commit and commit log, so everything below ``start`` is committed. There (and again in
  ``commit``) the batch is acked: the reader pointer moves to ``start.id`` with one
  forward-only compare-and-set, delayed messages it delivered get ``acked = true``. After the
  last batch of an ``AvailableNow`` run Spark calls ``latestOffset`` once more, so that batch is
  acked before the query stops. Nothing is acked in ``read()`` or at planning time.
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
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ..config import CONNECTION_OPTIONS, connection_from_options
from ..engine import monoton, pointers, stream
from ..engine.messages import is_done, read_range
from ..engine.queues import QueueInfo
from ..engine.session import Connection, shared_connection
from ..errors import ConfigError, QueueNotFoundError
from .offset import SourceOffset
from .options import CommonOptions, resolve_queue, source_options
from .partition import (
    KIND_IDS,
    KIND_SNAPSHOT,
    KIND_TIMERS,
    CassieQPartition,
    chunks,
    plan_ranges,
    subtract,
)
from .schema import SOURCE_SCHEMA

log = logging.getLogger(__name__)

DEFAULT_LEASE_TIMEOUT = 15.0
DEFAULT_MIN_IDS_PER_PARTITION = 10_000
DEFAULT_MAX_IDS_PER_PARTITION = 100_000
MIN_LEASE_TIMEOUT = 3.0
ROWS_PER_BATCH = 4096
# With maxMessagesPerTrigger, the latest offset Spark shows (backlog) looks this many batches ahead.
LATEST_LOOKAHEAD = 10
TARGET_POLL_SECONDS = 0.25
FUTURE_TS_WARN_SECONDS = 60.0  # AvailableNow: how often to look again at a block being written
CONSUMER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")

ARROW_SCHEMA = to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")


# -- options -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSettings:
    common: CommonOptions
    connection: tuple[tuple[str, str], ...]
    max_messages_per_trigger: int | None
    max_ids_per_partition: int | None
    min_ids_per_partition: int | None
    lease_timeout: float
    consumer_id: str | None


def parse_source_settings(options: Mapping[str, str]) -> SourceSettings:
    """Check every option of the source; a ConfigError names the option and what is allowed."""
    parsed = source_options(options)
    raw = parsed.common.raw
    connection = tuple(sorted((k, str(v)) for k, v in raw.items() if k in CONNECTION_OPTIONS))
    max_ids = parsed.int_option("maxIdsPerPartition", DEFAULT_MAX_IDS_PER_PARTITION, 1)
    given_min = parsed.int_option("minIdsPerPartition", None, 1)
    # A Spark task costs a few hundred ms here; a 1,000-id bucket is far less work than that,
    # so small buckets are grouped by default.
    min_ids = min(DEFAULT_MIN_IDS_PER_PARTITION, max_ids) if given_min is None else given_min
    if min_ids > max_ids:
        raise ConfigError(
            f"option 'minIdsPerPartition' ({min_ids}) must not exceed 'maxIdsPerPartition' ({max_ids})"
        )
    lease = parsed.float_option("leaseTimeout", DEFAULT_LEASE_TIMEOUT, MIN_LEASE_TIMEOUT)
    consumer_id = parsed.str_option("consumerId")
    if consumer_id is not None:
        consumer_id = consumer_id.strip()
        if not 1 <= len(consumer_id) <= 100 or not set(consumer_id) <= CONSUMER_ID_CHARS:
            raise ConfigError(
                f"option 'consumerId' must be 1-100 characters from letters, digits, '_', '-', "
                f"'.', ':', got {consumer_id!r}"
            )
    return SourceSettings(
        common=parsed.common,
        connection=connection,
        max_messages_per_trigger=parsed.int_option("maxMessagesPerTrigger", None, 1),
        max_ids_per_partition=max_ids,
        min_ids_per_partition=min_ids,
        lease_timeout=float(lease or DEFAULT_LEASE_TIMEOUT),
        consumer_id=consumer_id,
    )


# -- reading (executors) ---------------------------------------------------------------------------


class _BatchBuilder:
    """Collects message rows and cuts them into RecordBatches of exactly ``ARROW_SCHEMA``."""

    def __init__(self, queue: str, bucket_size: int):
        self.queue = queue
        self.bucket_size = bucket_size
        self._clear()

    def _clear(self) -> None:
        self.cols: list[list] = [[] for _ in ARROW_SCHEMA]

    def add(self, row, delivery_count: int) -> pa.RecordBatch | None:
        c = self.cols
        c[0].append(row.id)
        c[1].append(row.payload or b"")
        c[2].append(list(row.headers.items()) if row.headers else [])
        c[3].append(row.enqueued_at)
        c[4].append(row.id // self.bucket_size)
        c[5].append(delivery_count)
        c[6].append(self.queue)
        return self.flush() if len(c[0]) >= ROWS_PER_BATCH else None

    def flush(self) -> pa.RecordBatch | None:
        if not self.cols[0]:
            return None
        arrays = [
            pa.array(col, type=f.type) for col, f in zip(self.cols, ARROW_SCHEMA, strict=True)
        ]
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _selected_rows(conn: Connection, p: CassieQPartition) -> Iterator[tuple[object, int]]:
    """(row, delivery_count) of the messages partition ``p`` delivers."""
    queue = QueueInfo(name=p.queue, queue_id=uuid.UUID(p.queue_id), bucket_size=p.bucket_size)
    if p.kind == KIND_IDS:
        for row in stream.read_id_path(conn, queue, p.lo, p.hi, p.end_ts, p.excluded):
            yield row, (row.deliveries or 0) + 1
    elif p.kind == KIND_TIMERS:
        for row in stream.read_timer_path(conn, queue, p.ids, p.end_ts, p.excluded):
            yield row, (row.deliveries or 0) + 1
    elif p.kind == KIND_SNAPSHOT:
        for row in read_range(conn, queue, p.lo, p.hi, stream.READ_COLUMNS):
            if not is_done(row, p.reader):  # the same rule as stats() for what is unacked
                yield row, row.deliveries or 0
    else:
        raise ValueError(f"unknown partition kind {p.kind!r}")


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, CassieQPartition):
        raise TypeError(f"not a cassieq partition: {partition!r}")
    conn = shared_connection(connection_from_options(dict(partition.connection)))
    builder = _BatchBuilder(partition.queue, partition.bucket_size)
    for row, deliveries in _selected_rows(conn, partition):
        batch = builder.add(row, deliveries)
        if batch is not None:
            yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch


# -- the stream reader (driver) ------------------------------------------------------------------------


class CassieQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("cassieq")``: one instance per query run on the driver, plus
    pickled copies whose only job is ``read()``."""

    _LIVE = ("_conn", "_queue", "_stream")

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
        self._target: SourceOffset | None = None  # AvailableNow: the end of this run
        self._acked: SourceOffset | None = None  # the last offset acked by this object
        self._latest: dict | None = None
        # (start, end) of the batch planned last, with its timer path: partitions() reuses it
        self._planned: tuple[SourceOffset, SourceOffset, list[int]] | None = None
        self._scan_from: dict[tuple[int, int], int] = {}  # end position -> first timer slot
        self._warned_future = False
        self._reset_live()

    def _reset_live(self) -> None:
        self._conn: Connection | None = None
        self._queue: QueueInfo | None = None
        self._stream: stream.StreamConsumer | None = None

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._LIVE}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_live()

    def _connect(self) -> tuple[QueueInfo, stream.StreamConsumer]:
        if self._stream is None or self._queue is None:
            conn = shared_connection(self.settings.common.connection)
            self._queue = resolve_queue(conn, self.settings.common)
            self._conn = conn
            self._stream = stream.StreamConsumer(
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

    def _make(self, from_id: int, end_id: int, ts: int) -> SourceOffset:
        queue, _ = self._connect()
        return SourceOffset(queue.name, str(queue.queue_id), from_id, end_id, ts)

    # -- offsets -----------------------------------------------------------------------------------

    def _raise_init_error(self) -> None:
        if self._init_error is not None:
            raise self._init_error

    def initialOffset(self) -> dict:
        self._raise_init_error()
        _, st = self._connect()
        st.lease.ensure()
        p = st.pointers()
        # The first batch starts at the reader pointer, and its timer path at the invisibility
        # pointer (the ack of this offset, which delivered nothing, scans no slot at all).
        return self._make(p.reader, p.reader, max(-1, p.timer_slot * 1000 - 1)).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        self._raise_init_error()
        n = self.settings.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._raise_init_error()
        queue, st = self._connect()
        st.lease.ensure()
        # Everything reserved by now, including blocks still being written: latestOffset
        # waits for those rather than ending the run before them (F23).
        hz = st.horizon(st.pointers().reader)
        self._target = self._make(hz.next_id, hz.next_id, st.clock.now_ms())
        log.info("queue %s: AvailableNow target %s", queue.name, self._target.to_json())

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        self._raise_init_error()
        s = self._offset(start)
        queue, st = self._connect()
        self._check_alive(s)
        st.lease.ensure()
        # Spark calls this for batch N+1 only after batch N's commit log: everything below
        # `start` is committed, so acking it here can never precede Spark's commit.
        self.ack_through(s)
        # Ids another consumer took since `start` (an older checkpoint, clients) stay taken.
        from_id = max(s.id, st.pointers().reader)
        ahead = (s.ts - st.clock.now_ms()) / 1000
        if ahead > FUTURE_TS_WARN_SECONDS and not self._warned_future:
            self._warned_future = True
            log.warning(
                "queue %s: the checkpoint's time is %.0f s ahead of Cassandra's clock (written "
                "by a driver whose clock ran ahead); messages due before it were delivered "
                "early, and the stream's time stays there until Cassandra's clock catches up",
                queue.name,
                ahead,
            )
        waited_since = None
        while True:
            now_ms = st.clock.now_ms()
            hz = st.horizon(from_id, self._window(from_id, limit))
            full_end = max(from_id, hz.safe_end)
            self._latest = self._make(from_id, full_end, max(s.ts, now_ms)).to_dict()
            end_id, ts_cap = full_end, now_ms
            if self._target is not None:
                end_id = min(end_id, max(from_id, self._target.id))
                ts_cap = self._target.ts
            if isinstance(limit, ReadMaxRows):
                end_id = min(end_id, from_id + max(1, limit.max_rows))
            end_ts = max(s.ts, ts_cap)
            st.record_abandoned(hz, from_id, end_id)
            due = st.timer_ids(from_id, s.ts, end_ts) if end_ts > s.ts else []
            if end_id > s.id or due:
                break
            if not self._target_blocked(from_id, hz, waited_since):
                return s.to_dict()  # nothing new: Spark runs no batch
            waited_since = waited_since or time.monotonic()
            time.sleep(TARGET_POLL_SECONDS)
        e = self._make(from_id, end_id, end_ts)
        self._planned = (s, e, due)
        return e.to_dict()

    def _window(self, from_id: int, limit: ReadLimit) -> int | None:
        """How far ahead planning looks for reservations: the cost of a trigger then follows
        the batch, not the backlog (F17). Unlimited batches look at everything."""
        window = None
        if self._target is not None:
            window = max(1, self._target.id - from_id)
        if isinstance(limit, ReadMaxRows):
            ahead = max(1, limit.max_rows) * LATEST_LOOKAHEAD
            window = ahead if window is None else min(window, ahead)
        return window

    def _target_blocked(
        self, from_id: int, hz: monoton.Horizon, waited_since: float | None
    ) -> bool:
        """AvailableNow: is the run's target held back by a block still being written? Then
        wait (Spark would take "no new data" for the end of the run), but no longer than the
        queue's repair timeout, after which readers pass the block anyway."""
        if self._target is None or from_id >= self._target.id:
            return False
        queue, _ = self._connect()
        limit = queue.repair_timeout + 2 * TARGET_POLL_SECONDS
        if waited_since is not None and time.monotonic() - waited_since > limit:
            log.warning(
                "queue %s: AvailableNow ends at id %d before its target %d: a block stayed open "
                "longer than the repair timeout",
                queue.name,
                from_id,
                self._target.id,
            )
            return False
        if waited_since is None:
            log.info(
                "queue %s: waiting for ids from %d (%d open reservations) to reach the "
                "AvailableNow target %d",
                queue.name,
                hz.safe_end,
                hz.open_count,
                self._target.id,
            )
        return True

    # -- planning ------------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s, e = self._offset(start), self._offset(end)
        lo = max(s.id, e.from_id)
        if e.id <= lo and e.ts <= s.ts:
            return []
        queue, st = self._connect()
        st.lease.ensure()
        base: dict[str, Any] = {  # fields every partition of this batch shares
            "connection": self.settings.connection,
            "queue": queue.name,
            "queue_id": str(queue.queue_id),
            "bucket_size": queue.bucket_size,
            "end_ts": e.ts,
        }
        out: list[InputPartition] = []
        if e.id > lo:
            excluded = st.excluded(lo, e.id)
            for plo, phi in plan_ranges(
                lo,
                e.id,
                queue.bucket_size,
                self.settings.max_ids_per_partition,
                self.settings.min_ids_per_partition,
            ):
                mine = tuple(r for r in excluded if r[0] < phi and r[1] > plo)
                if subtract(plo, phi, mine) > 0:
                    out.append(CassieQPartition(KIND_IDS, lo=plo, hi=phi, excluded=mine, **base))
        if e.ts > s.ts:
            if self._planned is not None and self._planned[:2] == (s, e):
                ids = self._planned[2]
            else:  # a replay on a new reader, or the batch was planned elsewhere
                ids = st.timer_ids(lo, s.ts, e.ts)
            self._scan_from = {
                **dict(list(self._scan_from.items())[-3:]),
                e.position: stream.timer_scan_start(s.ts),
            }
            if ids:
                excluded = st.excluded(ids[0], ids[-1] + 1)
                for chunk in chunks(ids):
                    mine = tuple(r for r in excluded if r[0] <= chunk[-1] and r[1] > chunk[0])
                    out.append(CassieQPartition(KIND_TIMERS, ids=chunk, excluded=mine, **base))
        log.debug("queue %s: batch %s..%s in %d partitions", queue.name, start, end, len(out))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    # -- acking ----------------------------------------------------------------------------------------

    def commit(self, end: dict) -> None:
        self.ack_through(self._offset(end))

    def ack_through(self, e: SourceOffset) -> None:
        """Ack what the committed batch ending at ``e`` delivered (see engine/stream.py).
        Idempotent; fenced by the lease: QueueBusyError once another run took it over."""
        if self._acked is not None and self._acked.covers(e):
            return
        _, st = self._connect()
        st.lease.ensure()
        st.ack(e.id, e.ts, self._scan_from.get(e.position))
        self._acked = e if self._acked is None or e.covers(self._acked) else self._acked

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
        p = pointers.read(conn, queue)
        hz = monoton.horizon(conn, queue, p.reader)
        base: dict[str, Any] = {
            "connection": self.settings.connection,
            "queue": queue.name,
            "queue_id": str(queue.queue_id),
            "bucket_size": queue.bucket_size,
            "reader": p.reader,
        }
        lo = p.repair * queue.bucket_size
        ranges = plan_ranges(
            lo,
            max(lo, hz.next_id),
            queue.bucket_size,
            self.settings.max_ids_per_partition,
            self.settings.min_ids_per_partition,
        )
        if not ranges:
            ranges = [(lo, lo)]  # Spark wants at least one partition
        return [CassieQPartition(KIND_SNAPSHOT, lo=a, hi=b, **base) for a, b in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


__all__ = [
    "CassieQBatchReader",
    "CassieQStreamReader",
    "SourceSettings",
    "parse_source_settings",
]
