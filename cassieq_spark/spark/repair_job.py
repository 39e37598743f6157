"""The repair job, spread over Spark's DataFrame API: what runs where the job is called, and what
runs in tasks.

Per queue and pass:

1. the caller: read the pointers, *then* the skipped ranges (a reader records a range before it
   moves the pointer past it, so every range below the pointer read is in the list);
2. tasks: repair the due ranges in parallel (a DataFrame of range indexes, ``mapInArrow``; each
   task: ``shared_connection`` + ``repair_range``; republishing is keyed per original id and
   completion is a compare-and-set, so a retried task or a second job repeats nothing);
3. tasks: check the buckets between the repair pointer and the reader pointer in parallel
   (``spark.range`` of bucket numbers, ``mapInArrow`` calling ``bucket_finished``), a wave at a
   time, stopping after the first wave that holds one that is not finished;
4. the caller: drop the partitions of the contiguous prefix of finished buckets and move the
   repair pointer (forward-only compare-and-set) over them.

Only DataFrames, no ``SparkContext`` and no RDD: the same code runs on a classic session
(``spark-submit``, ``local[N]``) and on a Spark Connect session (``sc://``), where RDDs and the
``SparkContext`` do not exist. Steps 1 and 4 run in the caller's process (the Connect client,
the notebook, the driver), so it must reach Cassandra as the tasks do. :func:`run_repair` is
the entry point for a notebook cell or any Python code holding a session.

Nothing here holds state between passes, so a pass killed at any point is simply run again.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ConnectionConfig, connection_from_options, validate_queue_name
from ..engine.core import clock, pointers, queues
from ..engine.core.counters import Counters
from ..engine.core.queues import QueueInfo
from ..engine.store.schema import require_schema
from ..engine.store.session import Connection, shared_connection
from ..engine.upkeep.repair import (
    RepairReport,
    SkippedRange,
    assume_repaired,
    bucket_finished,
    buckets_to_check,
    due_ranges,
    finish_pass,
    repair_range,
    skipped_ranges,
)
from ..errors import ConfigError
from ..validate import repair_timeout_seconds
from . import is_connect

log = logging.getLogger(__name__)

# Buckets checked per task slot and wave. A Spark job costs about a second of overhead, a bucket
# check a few milliseconds: waves are large, and the work wasted past a bucket that holds the
# pointer back is at most one wave, spread over all slots.
WAVE_PER_SLOT = 512


@dataclass(frozen=True)
class RepairSettings:
    repair_timeout: float | None = None  # None: each queue's own setting
    dry_run: bool = False
    max_buckets: int | None = None  # at most this many buckets checked per queue and pass


# -- what runs in Spark tasks -------------------------------------------------------------------

RANGE_RESULT = "lo long, republished long, lost long"
BUCKET_RESULT = "bucket long, finished boolean"


def _range_task(
    config: ConnectionConfig,
    queue: QueueInfo,
    due: list[SkippedRange],
    timeout: float,
    dry_run: bool,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``mapInArrow`` over a DataFrame of indexes into ``due`` (column ``id``): repairs those
    ranges, one result row per range."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        conn = shared_connection(config)
        counters = Counters(conn)
        for batch in batches:
            out: dict[str, list] = {"lo": [], "republished": [], "lost": []}
            for index in batch.column("id").to_pylist():
                rng = due[index]
                republished, lost = repair_range(
                    conn, counters, queue, rng, dry_run, repair_timeout=timeout
                )
                out["lo"].append(rng.lo)
                out["republished"].append(republished)
                out["lost"].append(lost)
            yield pa.RecordBatch.from_pydict(
                out, schema=pa.schema([(k, pa.int64()) for k in ("lo", "republished", "lost")])
            )

    return run


def _bucket_task(
    config: ConnectionConfig, queue: QueueInfo, reader: int, ranges: list[SkippedRange]
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """``mapInArrow`` over ``spark.range`` of bucket numbers: is each bucket finished?"""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        conn = shared_connection(config)
        schema = pa.schema([("bucket", pa.int64()), ("finished", pa.bool_())])
        for batch in batches:
            buckets = batch.column("id").to_pylist()
            finished = [bucket_finished(conn, queue, b, reader, ranges) for b in buckets]
            yield pa.RecordBatch.from_pydict(
                {"bucket": buckets, "finished": finished}, schema=schema
            )

    return run


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """Task progress of the running Spark job: a bar on a terminal, else a log line every
    ``interval`` seconds (and at the end of each phase). Over Spark Connect, where the status
    tracker of the ``SparkContext`` is out of reach, one log line per phase."""

    def __init__(self, spark: Any, interval: float = 10.0, tty: bool | None = None):
        self.sc = None if is_connect(spark) else spark.sparkContext
        self.interval = interval
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.label = ""
        self.group = ""

    def phase(self, label: str, group: str) -> Progress:
        self.label, self.group = label, group
        if self.sc is not None:
            self.sc.setJobGroup(group, label)
        else:
            log.info("%s", label)
        return self

    def __enter__(self) -> Progress:
        if self.sc is None:
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sc is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _counts(self) -> tuple[int, int]:
        assert self.sc is not None
        tracker = self.sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else []:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def _watch(self) -> None:
        last_log = time.monotonic()
        while not self._stop.wait(0.5 if self.tty else 1.0):
            done, total = self._counts()
            if self.tty and total:
                width = 30
                filled = width * done // total
                sys.stderr.write(
                    f"\r{self.label}: [{'#' * filled}{'.' * (width - filled)}] {done}/{total} tasks"
                )
                sys.stderr.flush()
            elif time.monotonic() - last_log >= self.interval:
                last_log = time.monotonic()
                log.info("%s: %d/%d tasks done", self.label, done, total)


# -- the caller's side --------------------------------------------------------------------------


def task_slots(spark: Any) -> int:
    """How many tasks the session runs at once (Spark's default parallelism).

    Over Spark Connect there is no ``SparkContext`` to ask: ``spark.range`` without a partition
    count gets the default parallelism's number of partitions, and the only row of
    ``spark.range(1)`` is in the last of them (one small job)."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    from pyspark.sql import functions as F

    row = spark.range(1).select(F.spark_partition_id().alias("p")).first()
    return max(1, int(row["p"]) + 1)


def repair_queue_distributed(
    spark: Any,
    config: ConnectionConfig,
    queue: QueueInfo,
    settings: RepairSettings,
    slots: int | None = None,
) -> RepairReport:
    """One repair pass over one queue with range repairs and bucket checks as Spark tasks."""
    started = time.monotonic()
    conn = shared_connection(config)
    slots = task_slots(spark) if slots is None else slots
    progress = Progress(spark)
    timeout = queue.repair_timeout if settings.repair_timeout is None else settings.repair_timeout
    report = RepairReport(queue=queue.name, dry_run=settings.dry_run)

    ptrs = pointers.read(conn, queue)  # before the ranges: see bucket_finished
    ranges = skipped_ranges(conn, queue)
    due = due_ranges(ranges, timeout, clock.now())
    log.info(
        "queue %s: reader pointer %d, repair pointer bucket %d, %d skipped ranges (%d due)",
        queue.name,
        ptrs.reader,
        ptrs.repair,
        len(ranges),
        len(due),
    )
    if due:
        task = _range_task(config, queue, due, timeout, settings.dry_run)
        frame = spark.range(0, len(due), 1, min(len(due), slots * 4))
        with progress.phase(
            f"{queue.name}: repairing {len(due)} ranges", f"repair-ranges-{queue.queue_id}"
        ):
            results = frame.mapInArrow(task, RANGE_RESULT).collect()
        for row in results:
            report.republished += row["republished"]
            report.lost_ids += row["lost"]
            report.lost_reservations += 1 if row["lost"] else 0
        report.ranges_repaired = len(results)
        log.info(
            "queue %s: %d ranges repaired: %d republished, %d reservations lost (%d ids)",
            queue.name,
            len(results),
            report.republished,
            report.lost_reservations,
            report.lost_ids,
        )
        ranges = assume_repaired(ranges, due) if settings.dry_run else skipped_ranges(conn, queue)
    report.pending_ranges = sum(1 for r in ranges if not r.done)
    # Only ranges that are not done can hold a bucket back; ship just those to the tasks.
    open_ranges = [r for r in ranges if not r.done]

    todo = buckets_to_check(queue, ptrs, settings.max_buckets)
    checks: dict[int, bool] = {}
    wave = slots * WAVE_PER_SLOT
    bucket_task = _bucket_task(config, queue, ptrs.reader, open_ranges)
    for start in range(todo.start, todo.stop, wave):
        stop = min(todo.stop, start + wave)
        frame = spark.range(start, stop, 1, min(stop - start, slots * 2))
        with progress.phase(
            f"{queue.name}: checking buckets {start}..{stop - 1} of {todo.start}..{todo.stop - 1}",
            f"repair-buckets-{queue.queue_id}",
        ):
            rows = frame.mapInArrow(bucket_task, BUCKET_RESULT).collect()
        checks.update((row["bucket"], row["finished"]) for row in rows)
        if not all(checks.get(b) for b in range(start, stop)):
            break  # the pointer cannot pass this wave: later buckets can wait for the next pass
    finish_pass(conn, queue, ptrs, checks, report)
    report.seconds = round(time.monotonic() - started, 3)
    log.info(
        "queue %s: %d buckets checked, %d reclaimed, repair pointer now bucket %d (%.1f s)",
        queue.name,
        report.buckets_scanned,
        report.buckets_reclaimed,
        report.repair_pointer,
        report.seconds,
    )
    return report


def resolve_queues(conn: Connection, names: list[str] | None) -> list[QueueInfo]:
    """The queues to repair (all of them for ``None``); raises QueueNotFoundError early."""
    require_schema(conn)
    if names is None:
        return queues.list_queues(conn)
    return [queues.get_queue(conn, n) for n in names]


def run_pass(
    spark: Any, config: ConnectionConfig, names: list[str] | None, settings: RepairSettings
) -> list[RepairReport]:
    """One pass over the named queues (or all queues), one after the other."""
    conn = shared_connection(config)
    chosen = resolve_queues(conn, names)
    slots = task_slots(spark) if chosen else 1
    return [repair_queue_distributed(spark, config, q, settings, slots) for q in chosen]


def run_repair(
    spark: Any,
    connection: Mapping[str, str] | ConnectionConfig,
    queue_names: list[str] | str | None = None,
    *,
    repair_timeout: float | None = None,
    dry_run: bool = False,
    max_buckets: int | None = None,
) -> list[RepairReport]:
    """One repair pass from any Python code that holds a SparkSession: a notebook cell, a Spark
    Connect client (``sc://``), a job of one's own. The same pass as ``cassieq-repair``.

    ``connection``: the connector's connection options (``{"contactPoints": ..., "port": ...,
    "keyspace": ...}``, as given to ``format("cassieq")``) or a ``ConnectionConfig``;
    ``queue_names``: a name, a list, or None for every queue; ``repair_timeout``: override the
    queues' own (seconds); ``max_buckets``: at most this many buckets checked per queue.
    Returns one :class:`RepairReport` per queue (``.as_dict()`` for the JSON of the command).
    Raises ``QueueNotFoundError`` for a name that is not a queue, ``ConfigError`` for a bad
    value, before any Spark job runs."""
    if isinstance(connection, ConnectionConfig):
        config = connection
    else:
        config = connection_from_options(connection, known_only=True)
    names: list[str] | None
    if queue_names is None:
        names = None
    else:
        given = [queue_names] if isinstance(queue_names, str) else list(queue_names)
        names = [validate_queue_name(n) for n in dict.fromkeys(given)]
    if repair_timeout is not None:
        repair_timeout = repair_timeout_seconds(repair_timeout, "repair_timeout")
    if max_buckets is not None and (
        isinstance(max_buckets, bool) or not isinstance(max_buckets, int) or max_buckets < 1
    ):
        raise ConfigError(f"max_buckets must be a positive integer or None, got {max_buckets!r}")
    return run_pass(spark, config, names, RepairSettings(repair_timeout, dry_run, max_buckets))
