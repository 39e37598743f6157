"""The repair job, spread over Spark: what runs on the driver and what runs in tasks.

Per queue and pass:

1. driver: read the pointers, *then* the skipped ranges (a reader records a range before it
   moves the pointer past it, so every range below the pointer read is in the list);
2. tasks: repair the due ranges in parallel (each task: ``shared_connection`` +
   ``repair_range``; republishing is keyed per original id and completion is a compare-and-set,
   so a retried task or a second job repeats nothing);
3. tasks: check the buckets between the repair pointer and the reader pointer in parallel
   (``bucket_finished``), a wave at a time, stopping after the first wave that holds one that
   is not finished;
4. driver: drop the partitions of the contiguous prefix of finished buckets and move the repair
   pointer (forward-only compare-and-set) over them.

Nothing here holds state between passes, so a pass killed at any point is simply run again.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ..config import ConnectionConfig
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


def _range_task(
    config: ConnectionConfig, queue: QueueInfo, timeout: float, dry_run: bool
) -> Callable[[Iterable[SkippedRange]], Iterator[tuple[int, int, int]]]:
    def run(ranges: Iterable[SkippedRange]) -> Iterator[tuple[int, int, int]]:
        conn = shared_connection(config)
        counters = Counters(conn)
        for rng in ranges:
            republished, lost = repair_range(
                conn, counters, queue, rng, dry_run, repair_timeout=timeout
            )
            yield rng.lo, republished, lost

    return run


def _bucket_task(
    config: ConnectionConfig, queue: QueueInfo, reader: int, ranges: list[SkippedRange]
) -> Callable[[Iterable[int]], Iterator[tuple[int, bool]]]:
    def run(buckets: Iterable[int]) -> Iterator[tuple[int, bool]]:
        conn = shared_connection(config)
        for bucket in buckets:
            yield bucket, bucket_finished(conn, queue, bucket, reader, ranges)

    return run


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """Task progress of the running Spark job: a bar on a terminal, else a log line every
    ``interval`` seconds (and at the end of each phase)."""

    def __init__(self, spark, interval: float = 10.0, tty: bool | None = None):
        self.sc = spark.sparkContext
        self.interval = interval
        self.tty = sys.stderr.isatty() if tty is None else tty
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.label = ""
        self.group = ""

    def phase(self, label: str, group: str) -> Progress:
        self.label, self.group = label, group
        self.sc.setJobGroup(group, label)
        return self

    def __enter__(self) -> Progress:
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _counts(self) -> tuple[int, int]:
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


# -- the driver -------------------------------------------------------------------------------


def _slots(spark) -> int:
    return max(1, spark.sparkContext.defaultParallelism)


def repair_queue_distributed(
    spark, config: ConnectionConfig, queue: QueueInfo, settings: RepairSettings
) -> RepairReport:
    """One repair pass over one queue with range repairs and bucket checks as Spark tasks."""
    started = time.monotonic()
    conn = shared_connection(config)
    sc = spark.sparkContext
    slots = _slots(spark)
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
        rdd = sc.parallelize(due, min(len(due), slots * 4))
        task = _range_task(config, queue, timeout, settings.dry_run)
        with progress.phase(
            f"{queue.name}: repairing {len(due)} ranges", f"repair-ranges-{queue.queue_id}"
        ):
            results = rdd.mapPartitions(task).collect()
        for _lo, republished, lost in results:
            report.republished += republished
            report.lost_ids += lost
            report.lost_reservations += 1 if lost else 0
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
        batch = list(range(start, min(todo.stop, start + wave)))
        rdd = sc.parallelize(batch, min(len(batch), slots * 2))
        with progress.phase(
            f"{queue.name}: checking buckets {batch[0]}..{batch[-1]} of {todo.start}..{todo.stop - 1}",
            f"repair-buckets-{queue.queue_id}",
        ):
            checks.update(rdd.mapPartitions(bucket_task).collect())
        if not all(checks[b] for b in batch):
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
    spark, config: ConnectionConfig, names: list[str] | None, settings: RepairSettings
) -> list[RepairReport]:
    """One pass over the named queues (or all queues), one after the other."""
    conn = shared_connection(config)
    return [
        repair_queue_distributed(spark, config, q, settings) for q in resolve_queues(conn, names)
    ]
