"""The cassieq sink: ``df.writeStream.format("cassieq")`` and ``df.write.format("cassieq")``.

Every row becomes one message. Each Spark task is one keyed write (``engine/write/keyed_write.py``:
chunks of ``idBlockSize`` rows, one block of ids reserved per chunk under a key, found again by
a replay): this module only says what the key is and how Spark's parts map onto it. The key is
(query id, batch id, partition id, chunk index); for ``df.write`` the write id, random or the
``writeId`` option, instead of query and batch (a ``writeId`` is keyed with its streaming
query's id and batch id, which Spark's stream thread or the options ``batchId`` and
``queryCheckpoint`` give; without either it is refused: ``write_key``). Spark replays a micro-batch with the same
batch id after a crash and retries failed tasks, so a replay or a retry asks for the same keys
and writes each row once; a replay with other rows fails with ``ReplayMismatchError`` unless
``replayMismatch=writeAgain``. The task pulls its input: ``sink_input.py`` checks Spark's
Arrow batches or rows into slices (it sees the input's layout, option 'queue' and a queue
resolver, never the task), and the keyed write adds each slice before it asks for the next.

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

Routing: an input column ``queue`` names each row's queue (null: option 'queue'), as Kafka's
``topic`` column does. The task then runs one keyed write per destination, all under the same
key (keys are per queue), so each destination is written exactly once on a replay
(``engine/write/routed_write.py``). Destinations are only known on the executors: each task looks up
(or, with createQueue=true, creates) every distinct queue of a slice (an Arrow batch, or
``ROWS_PER_SLICE`` rows) before any of its rows is buffered; an unknown one fails the task, which
rolls back what earlier slices flushed. The checkpoint records option 'queue', or without it
the keyspace and cluster the rows' queues are in.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from ..engine.core.queues import QueueInfo
from ..engine.store.schema import require_schema
from ..engine.store.session import shared_connection
from ..engine.write.keyed_write import KeyedWrite, Slice
from ..engine.write.routed_write import QueueResolver, RoutedReport, RoutedWrite
from ..errors import CassieQError, ConfigError
from .options import SinkOptions, resolve_queue, sink_options
from .sink_input import InputCheck, InputLayout, arrow_slices, check_input_schema, row_slices
from .sink_target import Target, check_query_target, check_target, query_id_of

log = logging.getLogger(__name__)

# What a user can do about a replayed batch whose rows differ from its first attempt's.
REPLAY_MISMATCH_HINT = (
    "The replayed input differs from the first attempt (the partition layout changed, e.g. "
    "maxIdsPerPartition, repartition(n), spark.sql.files.maxPartitionBytes or the core count; "
    "a queue of the source was deleted, or clients, TTL or a purge took messages of the batch; "
    "or the input is not deterministic); skipping it would lose messages. Each task checks "
    "only its own keys: tasks of this attempt that found a free key wrote their rows, so going "
    "back to the first attempt's settings helps only if no attempt with other settings ran "
    "since. Otherwise set option replayMismatch=writeAgain to write such chunks again (an "
    "earlier attempt's messages may then be enqueued twice, none is lost)"
)


@dataclass(frozen=True)
class SinkPlan:
    """Everything a task needs, resolved on the driver and pickled into the writer."""

    options: SinkOptions
    queue: QueueInfo | None  # option 'queue'; None when only the input's column names queues
    layout: InputLayout
    streaming: bool
    write_id: str  # batch writes: one id per df.write, shared by retried tasks
    # a writeId's streaming query and batch named by options batchId and queryCheckpoint:
    # "{query id}:{batch id}" (None: not named)
    batch_scope: str | None = None


def plan_sink(options, schema: StructType, overwrite: bool, streaming: bool) -> SinkPlan:
    layout = check_input_schema(schema)
    opts = sink_options(options, streaming, queue_column=layout.queue is not None)
    if overwrite:
        raise ConfigError(
            "the cassieq sink only appends messages; use mode('append') / outputMode('append')"
        )
    conn = shared_connection(opts.common.connection)
    queue = None
    if opts.default_queue is not None:
        queue = resolve_queue(conn, opts.common)
    else:
        require_schema(conn)  # destinations are looked up by the tasks
    if streaming:
        target = Target.of(conn, queue)
        check_target(opts.checkpoint_location, target, opts.allow_target_change)
    scope = None
    if opts.batch_id is not None and opts.query_checkpoint is not None:
        scope = f"{query_id_of(opts.query_checkpoint)}:{opts.batch_id}"
    return SinkPlan(opts, queue, layout, streaming, opts.write_id or uuid.uuid4().hex, scope)


# -- the task side ----------------------------------------------------------------------------


@dataclass
class CassieQCommitMessage(RoutedReport, WriterCommitMessage):
    """What one task did (``RoutedReport``: per queue too); the driver sums these per batch."""


def _task_key(plan: SinkPlan, partition: int | None) -> tuple[int, str, str]:
    """(partition, key prefix, what) of the running task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if partition is None:
        partition = ctx.partitionId() if ctx is not None else 0
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
        if query_from_spark := ctx.getLocalProperty("sql.streaming.queryId") if ctx else None:
            conn = shared_connection(plan.options.common.connection)
            check_query_target(
                conn,
                query_from_spark,
                Target.of(conn, plan.queue),
                plan.options.allow_target_change,
            )
        key_prefix = f"s:{query}:{batch_id}:{partition}"
        what = f"micro-batch {batch_id} of query {query}"
    else:
        key_prefix = f"{write_key(plan, ctx)}:{partition}"
        what = f"batch write {plan.write_id}"
    return partition, key_prefix, what


def write_key(plan: SinkPlan, ctx) -> str:
    """The key of a ``df.write``: its write id, random or option ``writeId``.

    A ``writeId`` is keyed with its streaming query's id and batch id (``writeIdScope=batch``,
    the default): a replay of the batch finds the same key, while a query started on a new
    checkpoint (a new query id, batch ids from 0 again) never meets the keys of an old
    checkpoint's batches, which live for two weeks. Spark sets both ids on the jobs of its
    stream thread only; over Spark Connect (every action of ``foreachBatch`` is a request of
    its own) and in a thread the user starts, the options ``batchId`` and ``queryCheckpoint``
    must name them. Where neither does, the write is refused: the bare ``writeId`` would meet
    the keys of every other batch with the same ``writeId``, and rows equal to an earlier
    batch's would be skipped as written. ``writeIdScope=global`` makes the ``writeId`` alone
    the key (a write outside any streaming query)."""
    opts = plan.options
    if opts.write_id is None:
        return f"w:{plan.write_id}"
    if opts.write_id_scope == "global":
        return f"w:{opts.write_id}"
    query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
    batch_id = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    seen = f"{query}:{batch_id}" if query and batch_id is not None else None
    if plan.batch_scope is not None:
        if seen is not None and seen != plan.batch_scope:
            raise ConfigError(
                f"options batchId and queryCheckpoint name the batch {plan.batch_scope} (query "
                f"id:batch id), but Spark runs this write for the batch {seen}; pass "
                "foreachBatch's batch_id as batchId and the query's own checkpointLocation as "
                "queryCheckpoint"
            )
        return f"w:{plan.batch_scope}:{opts.write_id}"
    if seen is not None:
        return f"w:{seen}:{opts.write_id}"
    raise ConfigError(WRITE_SCOPE_MISSING.format(write_id=opts.write_id))


# Why a writeId cannot be keyed by its batch here, and what to do.
WRITE_SCOPE_MISSING = (
    "option writeId={write_id!r}: this write does not run on a streaming query's own thread "
    "(it runs over Spark Connect, or in a thread started inside foreachBatch, or outside any "
    "streaming query), so the sink cannot see which query and batch it belongs to, and the "
    "writeId alone would meet the keys of every other batch written with it (rows equal to an "
    "earlier batch's would be skipped as already written). Inside foreachBatch(func) pass "
    "option batchId=<func's batch_id> and option queryCheckpoint=<the query's "
    "checkpointLocation>; for a write outside any streaming query set option "
    "writeIdScope=global (the writeId must then be unique per job run)"
)


def _keyed(plan: SinkPlan, queue: QueueInfo, key: tuple[int, str, str]) -> dict:
    partition, key_prefix, what = key
    return dict(
        conn=shared_connection(plan.options.common.connection),
        queue=queue,
        key_prefix=key_prefix,
        block_size=plan.options.id_block_size,
        what=what,
        partition=partition,
        rewrite_mismatch=plan.options.replay_mismatch == "writeagain",
        mismatch_hint=REPLAY_MISMATCH_HINT,
    )


class TaskWrite(KeyedWrite):
    """One Spark task's keyed write to option 'queue': its key comes from the task's context.
    ``input`` checks its rows (:func:`arrow_slices`, :func:`row_slices`)."""

    def __init__(self, plan: SinkPlan, partition: int | None = None):
        if plan.queue is None:
            raise ValueError("a TaskWrite writes to option 'queue': plan.queue must be set")
        super().__init__(**_keyed(plan, plan.queue, _task_key(plan, partition)))
        self.plan = plan
        self.input = InputCheck(plan.layout, plan.queue, partition=self.partition)

    def run(self, slices: Iterable[Slice]) -> CassieQCommitMessage:
        """Pull ``slices`` (checked rows) and write them; anything that fails rolls it back."""
        r = super().run(slices)
        return CassieQCommitMessage(**vars(r), queues={self.queue.name: (r.written, r.replayed)})


class RoutedTask(RoutedWrite):
    """One Spark task whose rows name their queues: a keyed write per destination, same key."""

    def __init__(self, plan: SinkPlan, partition: int | None = None):
        key = _task_key(plan, partition)
        common = plan.options.common
        resolver = QueueResolver(
            shared_connection(common.connection),
            create=common.create_queue,
            settings=common.queue_settings,
            compare=common.queue_settings_given,
            known=[plan.queue] if plan.queue else [],
        )
        super().__init__(
            resolver,
            lambda q: KeyedWrite(**_keyed(plan, q, key)),
            partition=key[0],
            key_prefix=key[1],
            what=key[2],
            rewrite_mismatch=plan.options.replay_mismatch == "writeagain",
            mismatch_hint=REPLAY_MISMATCH_HINT,
        )
        self.plan = plan
        self.input = InputCheck(plan.layout, plan.queue, resolver.resolve, self.partition)

    def run(self, slices: Iterable[Slice]) -> CassieQCommitMessage:
        """Pull ``slices`` (checked rows naming their queues) and write each to its queue."""
        return CassieQCommitMessage(**vars(super().run(slices)))


# -- driver-side commit ---------------------------------------------------------------------


def _summarize(plan: SinkPlan, messages, what: str) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, CassieQCommitMessage)]
    written = sum(m.written for m in done)
    replayed = sum(m.replayed for m in done)
    per: dict[str, list[int]] = {}
    for m in done:
        for q, (w, r) in m.queues.items():
            totals = per.setdefault(q, [0, 0])
            totals[0] += w
            totals[1] += r
    for q, (w, r) in sorted(per.items()):
        log.info(
            "cassieq sink: %s wrote %d messages to queue %r (%d rows skipped: already written "
            "by an earlier attempt) from %d tasks",
            what,
            w,
            q,
            r,
            len(done),
        )
    return written, replayed


class _Base:
    def __init__(self, plan: SinkPlan):
        self.plan = plan

    def _run(
        self, slices: Callable[[InputCheck, Iterator], Iterator[Slice]], iterator: Iterator
    ) -> CassieQCommitMessage:
        """One task: a routed write when the input has a ``queue`` column, else a keyed write
        to option 'queue'; either pulls the task's checked slices."""
        task: TaskWrite | RoutedTask
        task = RoutedTask(self.plan) if self.plan.layout.queue is not None else TaskWrite(self.plan)
        return task.run(slices(task.input, iterator))

    def _run_rows(self, iterator: Iterator) -> CassieQCommitMessage:
        return self._run(row_slices, iterator)

    def _run_arrow(self, iterator: Iterator) -> CassieQCommitMessage:
        return self._run(arrow_slices, iterator)


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
                "the batch write failed after some tasks finished; their %d messages stay",
                written,
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


__all__ = [
    "CassieQCommitMessage",
    "InputLayout",
    "SinkPlan",
    "batch_writer",
    "check_input_schema",
    "plan_sink",
    "stream_writer",
]
