"""The cassieq source: ``spark.readStream.format("cassieq")`` and ``spark.read.format("cassieq")``.

Streaming (see ``offset.py`` for what an offset means):

* **Planning** (``latestOffset``) never moves past an id that may still be in flight: the end is
  the horizon of ``monoton`` (lowest open, young reservation). Reservations older than the
  queue's repair timeout are recorded for repair *before* the offset passes them, and every
  batch excludes those ranges, so repair's republish never duplicates a delivered message.
* **Ack on commit**: Spark calls ``latestOffset(start)`` for batch N+1 only after batch N's sink
  commit and commit log, so everything below ``start`` is committed. There (and again in
  ``commit``) the reader pointer moves to ``start.id`` with one forward-only compare-and-set per
  batch; delayed messages delivered by a batch get a plain ``acked = true`` write. After the
  last batch of an ``AvailableNow`` run Spark calls ``latestOffset`` once more, so that batch is
  acked before the query stops. Nothing is acked in ``read()`` or at planning time.
* **One consumer at a time**: the query holds the queue's consumer lease (``stream:<id>``),
  renewed by a daemon thread in the driver-side reader process. Client ``get()`` fails with
  QueueBusyError while it is held; a second query waits for the lease to lapse and fails with
  QueueBusyError if its holder renews it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

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
from ..engine import clock, monoton, pointers, timers
from ..engine.buckets import bucket_of
from ..engine.clock import to_epoch
from ..engine.consumer import record_skipped
from ..engine.counters import Counters
from ..engine.messages import is_done, read_range
from ..engine.queues import QueueInfo
from ..engine.session import Connection, shared_connection
from ..errors import ConfigError, QueueBusyError
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
READ_WINDOW = 64  # concurrent single-row reads for the timer path
CONSUMER_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:")

READ_COLUMNS = "id, payload, headers, enqueued_at, visible_at, version, deliveries, invisible_until, acked, dead"
STATE_COLUMNS = "id, visible_at, version, invisible_until, acked, dead"

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
        lease_timeout=float(lease),
        consumer_id=consumer_id,
    )


# -- row helpers ---------------------------------------------------------------------------------


def _ms(value) -> int:
    return 0 if value is None else round(to_epoch(value) * 1000)


def due_ms(row) -> int:
    """When a message is due (epoch ms): 0 for a plain message that was never delayed or
    delivered to a client; else its ``visible_at``/``invisible_until``, whichever is later."""
    return max(_ms(row.visible_at), _ms(row.invisible_until))


def _inside(mid: int, ranges: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= mid < hi for lo, hi in ranges)


def _slot(ms: int) -> int:
    return timers.timer_slot(ms / 1000.0)


def _queue_info(p: CassieQPartition) -> QueueInfo:
    return QueueInfo(name=p.queue, queue_id=uuid.UUID(p.queue_id), bucket_size=p.bucket_size)


def read_rows_by_id(
    conn: Connection, queue: QueueInfo, ids: Iterable[int], columns: str
) -> Iterator:
    """Rows of the given ids (missing ones left out), in the order asked, pipelined."""
    stmt = conn.prepare(
        f"SELECT {columns} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id = ?"
    )
    pending: list = []
    for mid in ids:
        pending.append(
            conn.execute_async(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
        )
        if len(pending) >= READ_WINDOW:
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


def timer_candidates(
    conn: Connection, queue: QueueInfo, below_id: int, from_slot: int, to_slot: int
) -> list[int]:
    """Ids below ``below_id`` with a timer in the slots ``[from_slot, to_slot]``."""
    if to_slot < from_slot:
        return []
    found: set[int] = set()
    for slot in timers.due_slots(conn, queue, from_slot, to_slot):
        found.update(mid for mid in timers.ids_in_slot(conn, queue, slot) if mid < below_id)
    return sorted(found)


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
    queue = _queue_info(p)
    if p.kind == KIND_IDS:
        for row in read_range(conn, queue, p.lo, p.hi, READ_COLUMNS):
            if row.acked or row.dead or _inside(row.id, p.excluded):
                continue
            if due_ms(row) <= p.end_ts:
                yield row, (row.deliveries or 0) + 1
    elif p.kind == KIND_TIMERS:
        for row in read_rows_by_id(conn, queue, p.ids, READ_COLUMNS):
            if row.acked or row.dead or _inside(row.id, p.excluded):
                continue
            if p.start_ts < due_ms(row) <= p.end_ts:
                yield row, (row.deliveries or 0) + 1
    elif p.kind == KIND_SNAPSHOT:
        for row in read_range(conn, queue, p.lo, p.hi, READ_COLUMNS):
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

    _LIVE = ("_conn", "_queue", "_lock", "_renewer", "_stop")

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None):
        self.settings = parse_source_settings(options)
        suffix = self.settings.consumer_id or uuid.uuid4().hex[:12]
        self.owner = f"stream:{suffix}"
        self._target: SourceOffset | None = None  # AvailableNow: the end of this run
        self._acked: SourceOffset | None = None  # the last offset acked by this object
        self._latest: dict | None = None
        self._recorded: set[tuple[int, int]] = set()
        self._lease_until = 0.0
        self._lease_lost: pointers.Pointers | None = None
        self._reset_live()

    def _reset_live(self) -> None:
        self._conn: Connection | None = None
        self._queue: QueueInfo | None = None
        self._lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._stop = threading.Event()

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in self._LIVE}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._reset_live()

    # -- plumbing ------------------------------------------------------------------------------

    def _connect(self) -> tuple[Connection, QueueInfo]:
        if self._conn is None or self._queue is None:
            conn = shared_connection(self.settings.common.connection)
            self._queue = resolve_queue(conn, self.settings.common)
            self._conn = conn
        return self._conn, self._queue

    @staticmethod
    def _now_ms() -> int:
        return int(clock.now() * 1000)

    def _busy(self, p: pointers.Pointers) -> QueueBusyError:
        until = pointers.lease_expiry(p)
        holder = (p.lease_owner or "?").removeprefix("stream:")
        return QueueBusyError(
            f"queue {self.settings.common.queue!r} is consumed by streaming query {holder!r} "
            f"(its lease runs until {until.isoformat() if until else '?'}Z and is being renewed); "
            "only one streaming query may consume a queue: stop that one first, or restart it "
            "with the same option consumerId to take over at once"
        )

    # -- the consumer lease ------------------------------------------------------------------------

    def _ensure_lease(self) -> None:
        conn, queue = self._connect()
        timeout = self.settings.lease_timeout
        if self._lease_lost is not None:
            raise self._busy(self._lease_lost)
        now = clock.now()
        if self._lease_until - now > timeout * 2 / 3:
            return
        p = pointers.acquire_lease(conn, queue, self.owner, timeout, now)
        if not p.lease_held(now, by=self.owner):
            p = self._wait_for_lease(p)
        self._lease_until = now + timeout
        if self._renewer is None:
            self._renewer = threading.Thread(
                target=self._renew_loop, name="cassieq-lease", daemon=True
            )
            self._renewer.start()

    def _wait_for_lease(self, seen: pointers.Pointers) -> pointers.Pointers:
        """Another owner holds the lease: take it once it lapses; fail if it is still held
        after two lease periods. A stopped query's reader process can renew once more before
        Spark kills it, so one renewal alone does not prove a live holder."""
        conn, queue = self._connect()
        timeout = self.settings.lease_timeout
        period = max(timeout, seen.lease_until - clock.now())
        deadline = clock.now() + 2 * period + 2.0
        log.info(
            "queue %s: lease held by %s until %s; waiting for it to lapse",
            queue.name,
            seen.lease_owner,
            pointers.lease_expiry(seen),
        )
        while True:
            time.sleep(min(1.0, max(0.1, seen.lease_until - clock.now() + 0.1)))
            now = clock.now()
            p = pointers.acquire_lease(conn, queue, self.owner, timeout, now)
            if p.lease_held(now, by=self.owner):
                log.info("queue %s: took over the consumer lease as %s", queue.name, self.owner)
                return p
            if now > deadline:
                raise self._busy(p)
            seen = p

    def _renew_loop(self) -> None:
        # Keeps the lease while a long batch runs (latestOffset is not called meanwhile). The
        # reader process is killed when the query stops, which ends this thread too.
        interval = self.settings.lease_timeout / 3
        while not self._stop.wait(interval):
            try:
                conn, queue = self._connect()
                now = clock.now()
                p = pointers.acquire_lease(
                    conn, queue, self.owner, self.settings.lease_timeout, now
                )
                if p.lease_held(now, by=self.owner):
                    self._lease_until = now + self.settings.lease_timeout
                elif p.lease_held(now):
                    log.error("queue %s: lost the consumer lease to %s", queue.name, p.lease_owner)
                    self._lease_lost = p
                    return
            except Exception:  # a timeout now and then; the next round or latestOffset retries
                log.warning("renewing the consumer lease failed", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        if self._conn is not None and self._queue is not None:
            try:
                pointers.release_lease(self._conn, self._queue, self.owner)
            except Exception:
                log.warning("releasing the consumer lease failed", exc_info=True)

    # -- offsets -----------------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        conn, queue = self._connect()
        self._ensure_lease()
        p = pointers.read(conn, queue)
        # Timers below the invisibility pointer are resolved; everything due from its slot on
        # that is below the reader pointer comes through the timer path of the first batch.
        return SourceOffset(p.reader, max(-1, p.timer_slot * 1000 - 1)).to_dict()

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.settings.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        conn, queue = self._connect()
        self._ensure_lease()
        reader = pointers.read(conn, queue).reader
        hz = monoton.horizon(conn, queue, reader)
        self._target = SourceOffset(hz.safe_end, self._now_ms())
        log.info("queue %s: AvailableNow target %s", queue.name, self._target.to_json())

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        s = SourceOffset.from_dict(start)
        conn, queue = self._connect()
        self._ensure_lease()
        # Spark calls this for batch N+1 only after batch N's commit log: everything below
        # `start` is committed, so acking it here can never precede Spark's commit.
        self.ack_through(s)
        now_ms = self._now_ms()
        hz = monoton.horizon(conn, queue, s.id, now_ms / 1000.0)
        full_end = max(s.id, hz.safe_end)
        self._latest = SourceOffset(full_end, max(s.ts, now_ms)).to_dict()
        end_id, ts_cap = full_end, now_ms
        if self._target is not None:
            end_id = min(end_id, max(s.id, self._target.id))
            ts_cap = self._target.ts
        if isinstance(limit, ReadMaxRows):
            end_id = min(end_id, s.id + max(1, limit.max_rows))
        end_ts = max(s.ts, ts_cap)
        self._record_abandoned(hz, s.id, end_id)
        if end_id == s.id and not self._timers_due(s, end_ts):
            return s.to_dict()  # nothing new: Spark runs no batch
        return SourceOffset(end_id, end_ts).to_dict()

    def _record_abandoned(self, hz: monoton.Horizon, lo: int, hi: int) -> None:
        """Hand reservations whose writer is presumed dead to repair before passing them."""
        conn, queue = self._connect()
        for rlo, rhi in hz.abandoned:
            if rlo < hi and rhi > lo and (rlo, rhi) not in self._recorded:
                record_skipped(conn, queue, rlo, rhi)
                self._recorded.add((rlo, rhi))

    def _timers_due(self, s: SourceOffset, end_ts: int) -> bool:
        if end_ts <= s.ts:
            return False
        conn, queue = self._connect()
        ids = timer_candidates(conn, queue, s.id, _slot(s.ts), _slot(end_ts))
        return any(
            not (row.acked or row.dead) and s.ts < due_ms(row) <= end_ts
            for row in read_rows_by_id(conn, queue, ids, STATE_COLUMNS)
        )

    # -- planning ------------------------------------------------------------------------------------

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        s, e = SourceOffset.from_dict(start), SourceOffset.from_dict(end)
        if e.id <= s.id and e.ts <= s.ts:
            return []
        conn, queue = self._connect()
        self._ensure_lease()
        base = {
            "connection": self.settings.connection,
            "queue": queue.name,
            "queue_id": str(queue.queue_id),
            "bucket_size": queue.bucket_size,
            "start_ts": s.ts,
            "end_ts": e.ts,
        }
        out: list[InputPartition] = []
        if e.id > s.id:
            excluded = skipped_overlapping(conn, queue, s.id, e.id)
            for lo, hi in plan_ranges(
                s.id,
                e.id,
                queue.bucket_size,
                self.settings.max_ids_per_partition,
                self.settings.min_ids_per_partition,
            ):
                mine = tuple(r for r in excluded if r[0] < hi and r[1] > lo)
                if subtract(lo, hi, mine) > 0:
                    out.append(CassieQPartition(KIND_IDS, lo=lo, hi=hi, excluded=mine, **base))
        if e.ts > s.ts:
            ids = timer_candidates(conn, queue, s.id, _slot(s.ts), _slot(e.ts))
            if ids:
                excluded = tuple(skipped_overlapping(conn, queue, ids[0], ids[-1] + 1))
                for chunk in chunks(ids):
                    mine = tuple(r for r in excluded if r[0] <= chunk[-1] and r[1] > chunk[0])
                    out.append(CassieQPartition(KIND_TIMERS, ids=chunk, excluded=mine, **base))
        log.debug("queue %s: batch %s..%s in %d partitions", queue.name, start, end, len(out))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    # -- acking ----------------------------------------------------------------------------------------

    def commit(self, end: dict) -> None:
        self.ack_through(SourceOffset.from_dict(end))

    def ack_through(self, e: SourceOffset) -> None:
        """Ack every message a committed batch ending at ``e`` delivered. Idempotent.

        Delivered means: not acked, not dead, not in a range repair owns, id below ``e.id`` and
        due at ``e.ts`` (see offset.py). Plain messages are acked by moving the reader pointer;
        delayed or once client-delivered ones get ``acked = true``.
        """
        if self._acked is not None and e.id <= self._acked.id and e.ts <= self._acked.ts:
            return
        conn, queue = self._connect()
        p = pointers.read(conn, queue)
        prev = p.reader
        plain = 0
        to_mark: list[int] = []
        if e.id > prev:
            excluded = skipped_overlapping(conn, queue, prev, e.id)
            for row in read_range(conn, queue, prev, e.id, STATE_COLUMNS):
                if row.acked or row.dead or _inside(row.id, excluded):
                    continue
                due = due_ms(row)
                if due == 0:
                    plain += 1
                elif due <= e.ts:
                    to_mark.append(row.id)
        below = min(prev, e.id)
        end_slot = _slot(e.ts)
        ids = timer_candidates(conn, queue, below, p.timer_slot, end_slot)
        if ids:
            excluded = skipped_overlapping(conn, queue, ids[0], ids[-1] + 1)
            for row in read_rows_by_id(conn, queue, ids, STATE_COLUMNS):
                if row.acked or row.dead or _inside(row.id, excluded):
                    continue
                if 0 < due_ms(row) <= e.ts:
                    to_mark.append(row.id)
        self._mark_acked(conn, queue, to_mark)
        moved = e.id > prev and pointers.advance(conn, queue, "reader", e.id)
        acked = len(to_mark) + (plain if moved else 0)
        Counters(conn).add(queue, "acked", acked)
        # Every timer in a slot wholly at or before e.ts is resolved now: ids below e.id were
        # acked above, ids from e.id on are due by then and the id path will deliver them.
        if end_slot > p.timer_slot:
            pointers.advance(conn, queue, "timer_slot", end_slot)
        self._acked = e if self._acked is None else max(self._acked, e)
        log.info(
            "queue %s: acked through %s (%d messages, reader pointer %d -> %d)",
            queue.name,
            e.to_json(),
            acked,
            prev,
            max(prev, e.id),
        )

    @staticmethod
    def _mark_acked(conn: Connection, queue: QueueInfo, ids: Sequence[int]) -> None:
        stmt = conn.prepare(
            "UPDATE {ks}.messages SET acked = true WHERE queue_id = ? AND bucket = ? AND id = ?"
        )
        futures = []
        for mid in ids:
            futures.append(
                conn.execute_async(stmt, (queue.queue_id, bucket_of(mid, queue.bucket_size), mid))
            )
            if len(futures) >= READ_WINDOW:
                futures.pop(0).result()
        for f in futures:
            f.result()


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
        base = {
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
    "due_ms",
    "parse_source_settings",
]
