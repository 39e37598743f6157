"""Input partitions of the cassieq source and how a micro-batch is cut into them.

A partition is one Spark task. It carries everything ``read()`` needs (connection options as
plain strings, the queue's incarnation id and bucket size, the id range or timer ids, the
batch's time window, the ranges handed to repair), because ``read()`` runs in an executor on a
reader that never saw the planning.

Planning is pure: bucket slices of the id range (one Cassandra partition each), big slices
split to at most ``max_ids`` ids, consecutive small ones grouped until a task has at least
``min_ids`` ids. The same inputs always give the same partitions, which Spark's replay of a
logged batch relies on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from ..engine.core.buckets import split_by_bucket

KIND_IDS = "ids"  # the id path: ids in [lo, hi) due at end_ts
KIND_TIMERS = "timers"  # the timer path: the listed ids, if still due at end_ts and not acked
KIND_SNAPSHOT = "snapshot"  # batch read: every unacked message in [lo, hi)
KIND_EMPTY = "empty"  # batch read of no queue at all (a pattern that matches none)

TIMER_IDS_PER_PARTITION = 2_000


@dataclass(frozen=True)
class CassieQPartition(InputPartition):
    kind: str
    connection: tuple[tuple[str, str], ...]  # connection options, sorted (no live objects)
    queue: str
    queue_id: str
    bucket_size: int
    lo: int = 0
    hi: int = 0
    end_ts: int = 0  # epoch ms, inclusive
    excluded: tuple[tuple[int, int], ...] = ()  # [lo, hi) ranges repair owns
    ids: tuple[int, ...] = ()  # timer path candidates
    reader: int = 0  # snapshot: the reader pointer when planned
    # stream batches: the query run reading them ("": the stream does not count its
    # deliveries, option countDeliveries=false), the queue's max_delivery_count, how many runs
    # may read a batch without a commit before its messages move, and whether a move without
    # a dead-letter queue may drop them (failOnDataLoss=false)
    run: str = ""
    max_delivery_count: int = 0
    max_batch_attempts: int = 0
    drop_allowed: bool = False
    replay: bool = False  # stream batches: read by a run that did not plan them (a replay)
    # id-path partitions of a stream batch read by the run that planned it: that run, whose
    # ack uses the tally the task records of its read (engine/stream/tally.py); "": none
    tally_run: str = ""

    def overlapping(self, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
        return tuple(r for r in self.excluded if r[0] < hi and r[1] > lo)


def plan_ranges(
    lo: int,
    hi: int,
    bucket_size: int,
    max_ids: int | None = None,
    min_ids: int | None = None,
) -> list[tuple[int, int]]:
    """Cut ``[lo, hi)`` into contiguous ranges: per bucket, split big, group small."""
    if bucket_size < 1:
        raise ValueError(f"bucket size must be >= 1, got {bucket_size}")
    if max_ids is not None and max_ids < 1:
        raise ValueError(f"max_ids must be >= 1, got {max_ids}")
    pieces: list[tuple[int, int]] = []
    for _bucket, blo, bhi in split_by_bucket(lo, hi, bucket_size):
        if max_ids is None:
            pieces.append((blo, bhi))
            continue
        for plo in range(blo, bhi, max_ids):
            pieces.append((plo, min(bhi, plo + max_ids)))
    if not min_ids or min_ids <= 1:
        return pieces
    grouped: list[tuple[int, int]] = []
    for plo, phi in pieces:
        if grouped:
            glo, ghi = grouped[-1]
            small = ghi - glo < min_ids
            fits = max_ids is None or phi - glo <= max_ids
            if small and fits:
                grouped[-1] = (glo, phi)
                continue
        grouped.append((plo, phi))
    return grouped


def subtract(lo: int, hi: int, excluded: Sequence[tuple[int, int]]) -> int:
    """How many ids of ``[lo, hi)`` lie outside the ``excluded`` ranges."""
    covered = 0
    pos = lo
    for elo, ehi in sorted(excluded):
        a, b = max(pos, elo), min(hi, ehi)
        if a < b:
            covered += b - a
            pos = b
    return (hi - lo) - covered


def chunks(ids: Sequence[int], size: int = TIMER_IDS_PER_PARTITION) -> list[tuple[int, ...]]:
    ordered = sorted(set(ids))
    return [tuple(ordered[i : i + size]) for i in range(0, len(ordered), size)]
