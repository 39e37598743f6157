"""The cassieq sink: ``df.writeStream.format("cassieq")`` and ``df.write.format("cassieq")``.

Every row becomes one message. A task buffers its rows into chunks of ``idBlockSize`` rows and
reserves one block of ids per chunk under a key (query id, batch id, partition id, chunk
index; for ``df.write`` the write id, random or the ``writeId`` option, instead of query and
batch); a typical task has one chunk, so one reservation. Spark replays a micro-batch with the
same batch id after a crash and retries failed tasks; the replay asks for the same key and gets
the same block back (``engine/writes.py``, ``engine/settle.py``):

- closed: the first attempt finished, so the chunk is skipped (nothing enqueued twice), but
  only if the chunk has the same rows: each key records a fingerprint of its rows, and a
  replay with other rows fails with ``ReplayMismatchError`` (or, with
  ``replayMismatch=writeAgain``, writes them under a key of their own) instead of skipping
  rows that were never written;
- open: the first attempt died mid-write, or runs alongside (speculation); the same rows are
  rewritten into the same ids;
- handed to repair: the write goes on if repair can still be made to wait for it; rows of a
  block repair already finished move to a new block.

A task keeps all its blocks open (so readers do not pass them) until every row of the task is
written, then closes them. A task that fails before its first close (a null ``value``, an
oversize payload, Cassandra errors) rolls back the blocks it reserved itself: rows marked dead,
blocks given back, keys forgotten, so the retry starts afresh. It never rolls back a block
another attempt reserved, nor anything once closing began: the retry completes those by key.

Observability: the query progress (and so any ``StreamingQueryListener``) reports the rows
handed to the sink per micro-batch as ``progress.sink.numOutputRows``; the driver-side
``commit`` logs (logger ``cassieq_spark.spark.sink``, INFO) how many of them were new messages
and how many a replay skipped. The queue's ``enqueued`` counter counts new messages only.

Limits a reviewer should know:
- Replays skip chunks only if the replayed input is the same rows in the same order per
  partition (true for Spark's file and Kafka sources, and for any deterministic plan);
  otherwise they fail closed, see above.
- Open reservations hold readers back only for the queue's ``repairTimeout``; a task that
  writes for longer than that lets readers pass its blocks (repair takes over). Keep tasks
  shorter than the repair timeout, or raise it.
- The driver looks the queue up when a write is planned (every micro-batch), so nothing is
  written for a missing queue; ~10 ms, as Spark reuses the planning worker and its connection
  (a connect, ~0.35 s, only when the worker is new).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from .. import validate
from ..engine import faults, settle, writes
from ..engine.counters import Counters
from ..engine.messages import Pipeline
from ..engine.queues import QueueInfo
from ..engine.session import Connection, shared_connection
from ..errors import CassieQError, ConfigError, PayloadTooLargeError, ReplayMismatchError
from ..validate import MAX_DELAY_SECONDS
from .options import SinkOptions, resolve_queue, sink_options
from .schema import SINK_COLUMNS, SINK_DELAY, SINK_HEADERS, SINK_VALUE
from .sink_target import Target, check_target

log = logging.getLogger(__name__)

# A chunk is also cut when its payloads reach this size, so buffering stays bounded for big
# messages. Cuts depend only on the rows, so a replay cuts at the same places.
CHUNK_MAX_BYTES = 32 * 1024 * 1024
ROWS_PER_SLICE = 2048  # the row writer hands rows on in slices of this many

_DELAY_TYPES = (DoubleType, FloatType, IntegerType, LongType)


# -- schema check (driver) --------------------------------------------------------------------


@dataclass(frozen=True)
class InputLayout:
    """Where the accepted columns are in the input rows."""

    value: int
    value_is_string: bool
    headers: int | None
    delay: int | None


def _type_name(t: DataType) -> str:
    return t.simpleString()


def check_input_schema(schema: StructType) -> InputLayout:
    """Fail before anything is written if the input has columns the sink cannot take."""
    allowed = "value (string or binary, required), headers (map<string,string>), delay (double)"
    names = [f.name.lower() for f in schema.fields]
    if SINK_VALUE not in names:
        raise ConfigError(
            f"the cassieq sink needs a column 'value' (string or binary) with the payload; "
            f"the input has {', '.join(schema.fieldNames()) or 'no columns'}; allowed columns: "
            f"{allowed}"
        )
    found: dict[str, int] = {}
    for i, f in enumerate(schema.fields):
        name = names[i]
        if name not in SINK_COLUMNS:
            raise ConfigError(
                f"column {f.name!r} ({_type_name(f.dataType)}) is not accepted by the cassieq "
                f"sink; allowed columns: {allowed}. Select or drop columns before writing"
            )
        if name in found:
            raise ConfigError(f"column {f.name!r} appears twice in the input")
        found[name] = i
    value_type = schema.fields[found[SINK_VALUE]].dataType
    if not isinstance(value_type, (StringType, BinaryType)):
        raise ConfigError(
            f"column 'value' must be string or binary, got {_type_name(value_type)}; "
            "cast it, e.g. col('value').cast('string')"
        )
    if SINK_HEADERS in found:
        t = schema.fields[found[SINK_HEADERS]].dataType
        if not (
            isinstance(t, MapType)
            and isinstance(t.keyType, StringType)
            and isinstance(t.valueType, StringType)
        ):
            raise ConfigError(f"column 'headers' must be map<string,string>, got {_type_name(t)}")
    if SINK_DELAY in found:
        t = schema.fields[found[SINK_DELAY]].dataType
        if not isinstance(t, _DELAY_TYPES):
            raise ConfigError(
                f"column 'delay' must be double (seconds of initial invisibility), got "
                f"{_type_name(t)}"
            )
    return InputLayout(
        found[SINK_VALUE],
        isinstance(value_type, StringType),
        found.get(SINK_HEADERS),
        found.get(SINK_DELAY),
    )


@dataclass(frozen=True)
class SinkPlan:
    """Everything a task needs, resolved on the driver and pickled into the writer."""

    options: SinkOptions
    queue: QueueInfo
    layout: InputLayout
    streaming: bool
    write_id: str  # batch writes: one id per df.write, shared by retried tasks


def plan_sink(options, schema: StructType, overwrite: bool, streaming: bool) -> SinkPlan:
    opts = sink_options(options, streaming)
    if overwrite:
        raise ConfigError(
            "the cassieq sink only appends messages; use mode('append') / outputMode('append')"
        )
    layout = check_input_schema(schema)
    conn = shared_connection(opts.common.connection)
    queue = resolve_queue(conn, opts.common)
    if streaming:
        check_target(opts.checkpoint_location, Target.of(conn, queue), opts.allow_target_change)
    return SinkPlan(opts, queue, layout, streaming, opts.write_id or uuid.uuid4().hex)


# -- the task side ----------------------------------------------------------------------------


@dataclass
class CassieQCommitMessage(WriterCommitMessage):
    """What one task did; the driver sums these per batch."""

    partition: int
    written: int  # messages this attempt enqueued
    replayed: int  # rows an earlier attempt of the same batch had already enqueued
    blocks: tuple[tuple[int, int], ...]


def _where(partition: int, position: int) -> str:
    return f"row {position} (0-based) of partition {partition}"


def _headers(h: dict | None, partition: int, position: int) -> dict | None:
    """A row's headers within the limits of the client's (count, bytes), the row named."""
    if not h:
        return None
    h = dict(h)
    try:
        return validate.headers(h)
    except ConfigError as exc:
        raise type(exc)(f"column 'headers' at {_where(partition, position)}: {exc}") from None


class _TaskWrite:
    """One task's write: chunked keyed blocks, pipelined writes, all-or-nothing close."""

    def __init__(self, plan: SinkPlan, partition: int | None = None):
        from pyspark import TaskContext

        self.plan = plan
        self.queue = plan.queue
        ctx = TaskContext.get()
        if partition is None:
            partition = ctx.partitionId() if ctx is not None else 0
        self.partition = partition
        if plan.streaming:
            batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx else None
            query = (ctx.getLocalProperty("sql.streaming.queryId") if ctx else None) or (
                plan.options.checkpoint_location
            )
            if batch_id is None or query is None:
                raise CassieQError(
                    "the cassieq stream writer cannot see the micro-batch id or query id; "
                    "it only runs inside a streaming query"
                )
            self.key_prefix = f"s:{query}:{batch_id}:{self.partition}"
            self.what = f"micro-batch {batch_id} of query {query}"
        else:
            self.key_prefix = f"w:{plan.write_id}:{self.partition}"
            self.what = f"batch write {plan.write_id}"
        self.conn: Connection = shared_connection(plan.options.common.connection)
        self.pipe = Pipeline(self.conn)
        self.block = plan.options.id_block_size
        self.payloads: list[bytes] = []
        self.sizes: list[int] = []
        self.headers: list[dict | None] = []
        self.delays: list[float] = []
        self.buffered_bytes = 0
        self.any_headers = False
        self.any_delay = False
        self.position = 0  # rows of this task seen so far
        self.chunk = 0
        self.placed = writes.Placed()
        self.written = 0
        self.closing = False  # from the first close on, nothing may be rolled back

    # rows arrive here already checked and converted
    def add(
        self,
        payloads: list[bytes],
        headers: list[dict | None] | None,
        delays: list[float] | None,
        sizes: list[int],
    ) -> None:
        n = len(payloads)
        self.payloads.extend(payloads)
        self.sizes.extend(sizes)
        self.buffered_bytes += sum(sizes)
        if headers is not None:
            self.any_headers = True
            self.headers.extend(headers)
        else:
            self.headers.extend([None] * n)
        if delays is not None:
            self.any_delay = True
            self.delays.extend(delays)
        else:
            self.delays.extend([0.0] * n)
        self.position += n
        while True:
            if self.buffered_bytes >= CHUNK_MAX_BYTES:
                total, cut = 0, 0
                for cut, size in enumerate(self.sizes, 1):  # noqa: B007 - cut is used below
                    total += size
                    if total >= CHUNK_MAX_BYTES:
                        break
                self._flush(min(cut, self.block))
            elif len(self.payloads) >= self.block:
                self._flush(self.block)
            else:
                break

    def _flush(self, count: int | None = None) -> None:
        n = len(self.payloads) if count is None else count
        if n == 0:
            return
        payloads, self.payloads = self.payloads[:n], self.payloads[n:]
        headers, self.headers = self.headers[:n], self.headers[n:]
        delays, self.delays = self.delays[:n], self.delays[n:]
        self.buffered_bytes -= sum(self.sizes[:n])
        del self.sizes[:n]
        key = f"{self.key_prefix}:{self.chunk}"
        rows = writes.Rows(
            payloads, headers if self.any_headers else None, delays if self.any_delay else None
        )
        try:
            writes.place(
                self.conn,
                self.queue,
                key,
                rows,
                placed=self.placed,
                pipeline=self.pipe,
                rewrite_mismatch=self.plan.options.replay_mismatch == "writeagain",
            )
        except ReplayMismatchError as exc:
            raise ReplayMismatchError(
                f"{self.what}: chunk {self.chunk} of partition {self.partition} is not what an "
                f"earlier attempt of this batch wrote: {exc}. The replayed input differs from the "
                "first attempt (the partition layout changed, e.g. maxIdsPerPartition, "
                "repartition(n), spark.sql.files.maxPartitionBytes or the core count, or the "
                "input is not deterministic); skipping it would lose messages. Run the replay "
                "with the first attempt's settings until this batch commits, or set option "
                "replayMismatch=writeAgain to write such chunks again (an earlier attempt's "
                "messages may then be enqueued twice, none is lost)"
            ) from None
        self.chunk += 1

    def finish(self) -> CassieQCommitMessage:
        self._flush()
        self.pipe.drain()
        faults.point("sink.before_close", task=self)
        self.closing = True
        failed = []
        for block in self.placed.blocks:
            outcome = settle.settle(self.conn, self.queue, block)
            if outcome in (settle.Settled.REPAIRED, settle.Settled.ROLLED_BACK):
                failed.append((block, outcome))
            else:
                self.written += block.res.count
        faults.point("sink.closed", task=self)
        if failed:
            block, outcome = failed[0]
            # Nothing is rolled back: the other blocks are visible. The retry finds every
            # chunk by its key and writes only what is not delivered.
            raise CassieQError(
                f"{self.what}, partition {self.partition}: ids {block.res.lo}..{block.res.hi} "
                f"of queue {self.queue.name!r} were {outcome.value}; the retry of this task "
                "writes what is not delivered again. (A task that writes for longer than the "
                "queue's repairTimeout lets readers hand its blocks to repair: raise "
                "repairTimeout or make tasks smaller)"
            )
        try:
            Counters(self.conn).add(self.queue, "enqueued", self.written)
        except Exception:  # the rows are enqueued: a lost count must not undo them (F11)
            log.warning(
                "could not count %d messages enqueued to queue %s; the enqueued counter is "
                "short by that much",
                self.written,
                self.queue.name,
                exc_info=True,
            )
        if self.placed.replayed:
            log.info(
                "%s, partition %d: %d rows were written by an earlier attempt",
                self.what,
                self.partition,
                self.placed.replayed,
            )
        return CassieQCommitMessage(
            self.partition, self.written, self.placed.replayed, tuple(sorted(self.placed.ranges))
        )

    def rollback(self) -> None:
        if self.closing:
            # Some blocks may be closed, so readers may have their rows already: undoing any
            # block now would deliver part of the task twice. A retry completes it by key.
            log.warning(
                "%s, partition %d failed while closing its blocks; nothing is rolled back, the "
                "retry finds them by key",
                self.what,
                self.partition,
            )
            return
        try:
            self.pipe.drain()
        except Exception:  # the write already failed; what matters is marking its rows dead
            log.debug("pending writes failed during rollback", exc_info=True)
        for block in self.placed.blocks:
            res = block.res
            if not block.own:
                # Another attempt reserved it and may have finished it: its rows are not ours
                # to undo (F4). Left open, it is finished by a retry or handed to repair.
                continue
            try:
                settle.roll_back(self.conn, self.queue, res)
            except Exception:
                log.exception(
                    "rollback of ids %d..%d of queue %s failed; the block stays open and a "
                    "retry rewrites the same ids",
                    res.lo,
                    res.hi,
                    self.queue.name,
                )

    def run(self, slices: Iterator[None]) -> CassieQCommitMessage:
        """``slices`` feeds rows into ``self.add``; anything that fails rolls the task back."""
        try:
            for _ in slices:
                pass
            return self.finish()
        except BaseException:
            self.rollback()
            raise


def _first_true(mask: pa.Array) -> int:
    return int(pc.index(mask, True).as_py())


def _arrow_slices(task: _TaskWrite, batches: Iterator[pa.RecordBatch]) -> Iterator[None]:
    layout = task.plan.layout
    limit = task.queue.max_payload_bytes
    for rb in batches:
        if rb.num_rows == 0:
            continue
        base = task.position
        value = rb.column(layout.value)
        if value.null_count:
            i = _first_true(pc.is_null(value))
            raise ConfigError(
                f"column 'value' is null at {_where(task.partition, base + i)}; every message "
                "needs a payload (filter or fill nulls before writing)"
            )
        if layout.value_is_string:
            value = value.cast(
                pa.large_binary() if pa.types.is_large_string(value.type) else pa.binary()
            )
        lengths = pc.binary_length(value)
        longest = pc.max(lengths).as_py()
        if longest > limit:
            i = _first_true(pc.greater(lengths, limit))
            raise PayloadTooLargeError(
                f"column 'value' at {_where(task.partition, base + i)} has {lengths[i].as_py()} "
                f"bytes; queue {task.queue.name!r} allows at most {limit} (maxPayloadBytes)"
            )
        headers = None
        if layout.headers is not None:
            col = rb.column(layout.headers)
            if col.null_count < len(col):
                if col.items.null_count:
                    for i, h in enumerate(col.to_pylist()):
                        if h and any(v is None for _, v in h):
                            raise ConfigError(
                                f"column 'headers' has a null value at "
                                f"{_where(task.partition, base + i)}; header values must be strings"
                            )
                headers = [
                    _headers(h, task.partition, base + i) for i, h in enumerate(col.to_pylist())
                ]
        delays = None
        if layout.delay is not None:
            d = pc.fill_null(rb.column(layout.delay).cast(pa.float64()), 0.0)
            bad = pc.or_(
                pc.or_(pc.less(d, 0.0), pc.invert(pc.is_finite(d))),
                pc.greater(d, MAX_DELAY_SECONDS),
            )
            if pc.any(bad).as_py():
                i = _first_true(bad)
                raise ConfigError(
                    f"column 'delay' is {d[i].as_py()} at {_where(task.partition, base + i)}; "
                    f"it must be a finite number of seconds from 0 to {MAX_DELAY_SECONDS:g}"
                )
            if pc.max(d).as_py() > 0:
                delays = d.to_pylist()
        task.add(value.to_pylist(), headers, delays, lengths.to_pylist())
        yield None


def _row_slices(task: _TaskWrite, rows: Iterator) -> Iterator[None]:
    layout = task.plan.layout
    limit = task.queue.max_payload_bytes
    vi, hi_, di = layout.value, layout.headers, layout.delay
    payloads: list[bytes] = []
    headers: list | None = [] if hi_ is not None else None
    delays: list | None = [] if di is not None else None
    sizes: list[int] = []
    any_delay = False
    for pos, row in enumerate(rows):
        v = row[vi]
        if v is None:
            raise ConfigError(
                f"column 'value' is null at {_where(task.partition, pos)}; every message "
                "needs a payload (filter or fill nulls before writing)"
            )
        data = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        if len(data) > limit:
            raise PayloadTooLargeError(
                f"column 'value' at {_where(task.partition, pos)} has {len(data)} bytes; "
                f"queue {task.queue.name!r} allows at most {limit} (maxPayloadBytes)"
            )
        payloads.append(data)
        sizes.append(len(data))
        if headers is not None:
            h = row[hi_]
            if h and any(x is None for x in h.values()):
                raise ConfigError(
                    f"column 'headers' has a null value at {_where(task.partition, pos)}; "
                    "header values must be strings"
                )
            headers.append(_headers(h, task.partition, pos))
        if delays is not None:
            d = row[di]
            d = 0.0 if d is None else float(d)
            if not (0 <= d <= MAX_DELAY_SECONDS):
                raise ConfigError(
                    f"column 'delay' is {d} at {_where(task.partition, pos)}; it must be a "
                    f"finite number of seconds from 0 to {MAX_DELAY_SECONDS:g}"
                )
            any_delay = any_delay or d > 0
            delays.append(d)
        if len(payloads) >= ROWS_PER_SLICE:
            task.add(payloads, headers, delays if any_delay else None, sizes)
            yield None
            payloads, sizes = [], []
            headers = [] if hi_ is not None else None
            delays = [] if di is not None else None
            any_delay = False
    if payloads:
        task.add(payloads, headers, delays if any_delay else None, sizes)
        yield None


# -- driver-side commit ---------------------------------------------------------------------


def _summarize(plan: SinkPlan, messages, what: str) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, CassieQCommitMessage)]
    written = sum(m.written for m in done)
    replayed = sum(m.replayed for m in done)
    log.info(
        "cassieq sink: %s wrote %d messages to queue %r (%d rows skipped: already written by an "
        "earlier attempt) from %d tasks",
        what,
        written,
        plan.queue.name,
        replayed,
        len(done),
    )
    return written, replayed


class _Base:
    def __init__(self, plan: SinkPlan):
        self.plan = plan

    def _run_rows(self, iterator) -> CassieQCommitMessage:
        task = _TaskWrite(self.plan)
        return task.run(_row_slices(task, iterator))

    def _run_arrow(self, iterator) -> CassieQCommitMessage:
        task = _TaskWrite(self.plan)
        return task.run(_arrow_slices(task, iterator))


class CassieQStreamWriter(_Base, DataSourceStreamWriter):
    """Row-at-a-time stream writer (``writerType=rows``)."""

    def write(self, iterator) -> CassieQCommitMessage:
        return self._run_rows(iterator)

    def commit(self, messages, batchId: int) -> None:
        _summarize(self.plan, messages, f"micro-batch {batchId}")

    def abort(self, messages, batchId: int) -> None:
        written, _ = _summarize(self.plan, messages, f"failed micro-batch {batchId}")
        if written:
            log.warning(
                "micro-batch %d failed after some tasks finished; their %d messages stay, and the "
                "replay of batch %d skips them",
                batchId,
                written,
                batchId,
            )


class CassieQStreamArrowWriter(_Base, DataSourceStreamArrowWriter):
    """Stream writer fed with Arrow record batches (default, ``writerType=arrow``)."""

    def write(self, iterator) -> CassieQCommitMessage:
        return self._run_arrow(iterator)

    commit = CassieQStreamWriter.commit
    abort = CassieQStreamWriter.abort


class CassieQBatchWriter(_Base, DataSourceWriter):
    """``df.write.format("cassieq")`` row by row (``writerType=rows``)."""

    def write(self, iterator) -> CassieQCommitMessage:
        return self._run_rows(iterator)

    def commit(self, messages) -> None:
        _summarize(self.plan, messages, "batch write")

    def abort(self, messages) -> None:
        written, _ = _summarize(self.plan, messages, "failed batch write")
        if written:
            log.warning(
                "the batch write failed after some tasks finished; their %d messages stay in "
                "queue %r",
                written,
                self.plan.queue.name,
            )


class CassieQBatchArrowWriter(_Base, DataSourceArrowWriter):
    """``df.write.format("cassieq")`` fed with Arrow record batches (default)."""

    def write(self, iterator) -> CassieQCommitMessage:
        return self._run_arrow(iterator)

    commit = CassieQBatchWriter.commit
    abort = CassieQBatchWriter.abort


def stream_writer(options, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
    plan = plan_sink(options, schema, overwrite, streaming=True)
    if plan.options.writer_type == "rows":
        return CassieQStreamWriter(plan)
    return CassieQStreamArrowWriter(plan)


def batch_writer(options, schema: StructType, overwrite: bool) -> DataSourceWriter:
    plan = plan_sink(options, schema, overwrite, streaming=False)
    if plan.options.writer_type == "rows":
        return CassieQBatchWriter(plan)
    return CassieQBatchArrowWriter(plan)
