"""A keyed write: one writer's rows, enqueued exactly once however often the writer is replayed.

This is what a Spark sink task does (``spark/sink.py`` only maps Spark's task onto it), and
what any batch producer that may run twice needs. The write pulls its input: :meth:`KeyedWrite.run`
takes an iterable of :class:`Slice` (checked rows, e.g. ``spark/sink_input.py``'s Arrow or row
slices) and adds each one before it asks for the next, so a slice that fails its checks fails
the write with every earlier slice buffered or written and nothing of its own. The writer buffers its rows into chunks of
``block_size`` rows and reserves one block of ids per chunk under a key (``key_prefix`` plus
the chunk index; a typical writer has one chunk, so one reservation). A replay of the same
write asks for the same keys and gets the same blocks back (``writes.py``, ``settle.py``):

- closed: the first attempt finished, so the chunk is skipped (nothing enqueued twice), but
  only if the chunk has the same rows: each key records a fingerprint of its rows, and a
  replay with other rows fails with ``ReplayMismatchError`` (or, with ``rewrite_mismatch``,
  writes them under a key of their own) instead of skipping rows that were never written;
- open: the first attempt died mid-write, or runs alongside (speculation); the same rows are
  rewritten into the same ids;
- handed to repair: the write goes on if repair can still be made to wait for it; rows of a
  block repair already finished move to a new block.

Rows with a deduplication id are not part of the chunks: each is written, once the chunks are
closed, into the keyed block of its id (``producer.enqueue_deduplicated``), so it is enqueued
once per id within the deduplication window, whoever puts it (another task, a producer), and a
replay within the window finds it there. A replay later than the window writes it again.

A writer keeps all its blocks open (so readers do not pass them) until every row is written,
then closes them. A writer that fails before its first close (a bad row, Cassandra errors)
rolls back the blocks it reserved itself: rows marked dead, blocks given back, keys forgotten,
so the retry starts afresh. It never rolls back a block another attempt reserved, nor anything
once closing began: the retry completes those by key.

Open reservations hold readers back only for the queue's repair timeout; a writer that writes
for longer than that lets readers pass its blocks (repair takes over and delivers them later).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ...errors import CassieQError, ReplayMismatchError
from ..core.counters import Counters
from ..core.messages import Pipeline
from ..core.queues import QueueInfo
from ..store import faults
from ..store.session import Connection
from . import settle, writes
from .producer import enqueue_deduplicated

log = logging.getLogger(__name__)

# A chunk is also cut when its payloads reach this size, so buffering stays bounded for big
# messages. Cuts depend only on the rows, so a replay cuts at the same places.
CHUNK_MAX_BYTES = 32 * 1024 * 1024
DEDUP_CHUNK = 1000  # rows with a deduplication id written per call, after the chunks closed


@dataclass(frozen=True)
class Slice:
    """Checked rows handed to a write, in input order: payload bytes, their lengths (``sizes``),
    each row's headers and initial delay in seconds (None: no row has any), each row's
    queue name (``dests``; None: every row goes to the write's one queue) and deduplication
    id (``dedup_ids``; None: no row has one)."""

    payloads: list[bytes]
    headers: list[dict | None] | None
    delays: list[float] | None
    sizes: list[int]
    dests: list[str] | None = None
    dedup_ids: list[str | None] | None = None


R_co = TypeVar("R_co", covariant=True)
R = TypeVar("R")


class SliceWrite(Protocol[R_co]):
    """A write that takes checked slices, then finishes or rolls back whole."""

    def add_slice(self, rows: Slice) -> None: ...

    def finish(self) -> R_co: ...

    def rollback(self) -> None: ...


def pull_slices(write: SliceWrite[R], slices: Iterable[Slice]) -> R:
    """Pull ``slices`` one at a time into ``write``, then finish it; anything that fails (a
    slice's checks, Cassandra, the close) rolls the write back, so a task either wrote what it
    was given or left nothing a retry could not redo."""
    try:
        for rows in slices:
            write.add_slice(rows)
        return write.finish()
    except BaseException:
        write.rollback()
        raise


@dataclass
class WriteReport:
    """What one attempt of a keyed write did."""

    partition: int
    written: int  # messages this attempt enqueued
    replayed: int  # rows an earlier attempt of the same write had already enqueued
    blocks: tuple[tuple[int, int], ...]  # the id ranges its rows are in


class KeyedWrite:
    """One attempt of a keyed write: chunked keyed blocks, pipelined writes, all-or-nothing
    close. Feed checked rows with :meth:`add` (or :meth:`add_slice`), then :meth:`finish`; on any
    failure :meth:`rollback` (or let :meth:`run` pull the slices and do both).

    ``what`` and ``partition`` name the write in errors and logs (``partition`` is also part
    of its report); ``mismatch_hint`` is appended to a ``ReplayMismatchError``: what the
    caller's user can do about a replay with other rows."""

    def __init__(
        self,
        conn: Connection,
        queue: QueueInfo,
        key_prefix: str,
        *,
        block_size: int,
        what: str,
        partition: int = 0,
        rewrite_mismatch: bool = False,
        mismatch_hint: str = "",
    ):
        self.conn = conn
        self.queue = queue
        self.key_prefix = key_prefix
        self.block = block_size
        self.what = what
        self.partition = partition
        self.rewrite_mismatch = rewrite_mismatch
        self.mismatch_hint = mismatch_hint
        self.pipe = Pipeline(conn)
        self.payloads: list[bytes] = []
        self.sizes: list[int] = []
        self.headers: list[dict | None] = []
        self.delays: list[float] = []
        self.buffered_bytes = 0
        self.any_headers = False
        self.any_delay = False
        self.position = 0  # rows seen so far
        self.chunk = 0
        self.placed = writes.Placed()
        self.written = 0
        self.closing = False  # from the first close on, nothing may be rolled back
        # rows with a deduplication id, written after the chunks are closed
        self.dedup_rows: list[tuple[bytes, dict | None, float, str]] = []

    # rows arrive here already checked and converted
    def add(
        self,
        payloads: list[bytes],
        headers: list[dict | None] | None,
        delays: list[float] | None,
        sizes: list[int],
        dedup_ids: list[str | None] | None = None,
    ) -> None:
        """Buffer rows (``sizes``: their payload lengths); full chunks are written at once.
        Rows with a deduplication id wait for :meth:`finish`."""
        if dedup_ids is not None and any(d is not None for d in dedup_ids):
            keep = [i for i, d in enumerate(dedup_ids) if d is None]
            for i, d in enumerate(dedup_ids):
                if d is not None:
                    self.dedup_rows.append(
                        (
                            payloads[i],
                            None if headers is None else headers[i],
                            0.0 if delays is None else delays[i],
                            d,
                        )
                    )
            payloads = [payloads[i] for i in keep]
            headers = None if headers is None else [headers[i] for i in keep]
            delays = None if delays is None else [delays[i] for i in keep]
            sizes = [sizes[i] for i in keep]
            self.position += len(dedup_ids) - len(keep)
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

    def add_slice(self, rows: Slice) -> None:
        """:meth:`add` a slice; its rows must not name queues (that is a routed write's input)."""
        if rows.dests is not None:
            raise ValueError(
                f"{self.what}: a keyed write goes to one queue ({self.queue.name!r}) but the slice "
                "names each row's queue; write such slices with a RoutedWrite"
            )
        self.add(rows.payloads, rows.headers, rows.delays, rows.sizes, rows.dedup_ids)

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
                rewrite_mismatch=self.rewrite_mismatch,
                encoded=True,
            )
        except ReplayMismatchError as exc:
            raise ReplayMismatchError(
                f"{self.what}: chunk {self.chunk} of partition {self.partition} is not what an "
                f"earlier attempt of this batch wrote: {exc}. {self.mismatch_hint}".rstrip()
            ) from None
        self.chunk += 1

    def finish(self) -> WriteReport:
        """Write what is buffered, wait for every write, close every block, count them."""
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
        counters = Counters(self.conn)
        counters.count_enqueued(self.queue, self.written)
        if self.dedup_rows:
            rows = self.dedup_rows
            for start in range(0, len(rows), DEDUP_CHUNK):
                part = rows[start : start + DEDUP_CHUNK]
                enqueue_deduplicated(
                    self.conn,
                    counters,
                    self.queue,
                    [r[0] for r in part],
                    [r[3] for r in part],
                    [r[1] for r in part] if any(r[1] for r in part) else None,
                    [r[2] for r in part] if any(r[2] for r in part) else None,
                )
            self.written += len(rows)
        if self.placed.replayed:
            log.info(
                "%s, partition %d: %d rows were written by an earlier attempt",
                self.what,
                self.partition,
                self.placed.replayed,
            )
        return WriteReport(
            self.partition, self.written, self.placed.replayed, tuple(sorted(self.placed.ranges))
        )

    def rollback(self) -> None:
        """Undo the blocks this attempt reserved, unless closing began (then nothing)."""
        if self.closing:
            # Some blocks may be closed, so readers may have their rows already: undoing any
            # block now would deliver part of the write twice. A retry completes it by key.
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
                # to undo. Left open, it is finished by a retry or handed to repair.
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

    def run(self, slices: Iterable[Slice]) -> WriteReport:
        """:func:`pull_slices` into this write."""
        return pull_slices(self, slices)
