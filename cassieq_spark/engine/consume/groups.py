"""Message groups on the consuming side: which fresh message of a group a reader may claim, the
group's head written before the claim, and the done mark written after a grouped ack.

Invariant (docs/internals/protocol.md, "Message groups"): the messages of a group are delivered
in id order, at most one at a time; a group is blocked from its head's delivery until the head
is acked, dead-lettered or its visibility expires (then the head is delivered again).

Why a scan may decide this without a lock: the reader pointer passes only rows that need
nothing more from the reader (delivered, delayed, handed to repair, never written). Of one group,
the rows above the scan's start are in the stretch the scan reads, in id order; below it, the
only row that is not finished is the one the group's last delivery made (one in flight at a
time), and ``group_heads.head`` names it: every reader writes ``head = m`` *before* it claims
the fresh message ``m``, so whoever passes ``m`` (only possible once it is claimed) reads it
there. A group's first unfinished row in the stretch is claimable when it is fresh and the head
is that row or above, or finished.

Both cells of ``group_heads`` are written with the message id as their timestamp, so the
largest id wins whatever order the writes land in: a reader that stalls between its scan and
its head write cannot move a head back (ids only grow within a group: a redelivery keeps its
id, a republished copy gets a larger one). Never delete these rows with a current timestamp:
it would shadow every later write of the partition.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cassandra.query import BatchStatement, BatchType

from ..core.buckets import bucket_of
from ..core.messages import is_expired
from ..core.queues import QueueInfo
from ..store.session import Connection

log = logging.getLogger(__name__)

HEADS_PER_READ = 100  # groups named in one ``grp IN`` read of the heads partition
KNOWN_GROUPS = 100_000  # groups whose finished head one client remembers, at most

_READ_HEADS = "SELECT grp, head, done FROM {ks}.group_heads WHERE queue_id = ? AND grp IN ?"
_WRITE_HEAD = (
    "UPDATE {ks}.group_heads USING TIMESTAMP ? SET head = ? WHERE queue_id = ? AND grp = ?"
)
_WRITE_DONE = (
    "UPDATE {ks}.group_heads USING TIMESTAMP ? SET done = ? WHERE queue_id = ? AND grp = ?"
)
_READ_ROW = (
    "SELECT id, version, acked, dead, enqueued_at FROM {ks}.messages "
    "WHERE queue_id = ? AND bucket = ? AND id = ?"
)


def is_finished(row, queue: QueueInfo, now: float) -> bool:
    """Nothing of ``row`` will be delivered any more: acked, dead (dead-lettered, republished,
    rolled back) or expired. A missing row (its bucket reclaimed) is finished too."""
    return row is None or bool(row.acked or row.dead) or is_expired(row, queue, now)


@dataclass
class Gate:
    """One call's view of the groups it meets: the groups it must not claim from any more (an
    unfinished row of theirs was met earlier in the call, or their head is held), and the
    verdicts on the heads it read, per (group, first candidate)."""

    heads: GroupHeads
    queue: QueueInfo
    now: float
    skipped: list[tuple[int, int]]
    blocked: set[str] = field(default_factory=set)
    verdicts: dict[tuple[str, int], bool] = field(default_factory=dict)

    def claimable(self, rows: Sequence, fresh: list) -> list:
        """The rows of ``fresh`` (the candidates among ``rows``, a stretch read in id order) this
        call may claim: the ungrouped ones, and of each group its first unfinished row of the
        stretch if that row is fresh and the group is neither blocked in this call nor held by
        its head."""
        fresh_ids = {r.id for r in fresh}
        first: dict[str, Any] = {}
        held: set[str] = set()
        for row in rows:
            g = row.grp
            if g is None or g in self.blocked or g in first or g in held:
                continue
            if row.id in fresh_ids:
                first[g] = row
            elif not self.settled(row):
                held.add(g)
        unknown = [(g, r) for g, r in first.items() if (g, r.id) not in self.verdicts]
        if unknown:
            self.verdicts.update(self.heads.verdicts(self.queue, unknown, rows, self.now))
        ok = {r.id for g, r in first.items() if self.verdicts[(g, r.id)]}
        return [r for r in fresh if r.grp is None or r.id in ok]

    def passed(self, rows: Iterable, below: int) -> None:
        """The stretch's rows under ``below`` are behind the call now: their groups with a row
        not finished (claimed just now, left unclaimed, held) are blocked for the rest of it."""
        for row in rows:
            if row.grp is not None and row.id < below and not self.settled(row):
                self.blocked.add(row.grp)

    def settled(self, row) -> bool:
        """Finished, or handed to repair (repair republishes it under a new id)."""
        return is_finished(row, self.queue, self.now) or any(
            lo <= row.id < hi for lo, hi in self.skipped
        )


class GroupHeads:
    """One client's access to ``group_heads``, with what it knows of finished heads (final:
    an acked or dead row never comes back)."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self._finished: dict[tuple, int] = {}  # (queue_id, group) -> largest id known finished

    def gate(self, queue: QueueInfo, now: float, skipped: list[tuple[int, int]]) -> Gate:
        return Gate(self, queue, now, skipped)

    def finished_id(self, queue: QueueInfo, group: str) -> int:
        """The largest id of ``group`` this client knows finished (-1: none). A group delivers
        a message only after every earlier one finished, so every id up to it is finished."""
        return self._finished.get((queue.queue_id, group), -1)

    def read(self, queue: QueueInfo, groups: Sequence[str]) -> dict[str, Any]:
        """The ``group_heads`` rows (``grp, head, done``) of ``groups``, one read per
        :data:`HEADS_PER_READ` groups, all in flight at once; groups without a row are absent."""
        futures = [
            self.conn.execute_async(_READ_HEADS, (queue.queue_id, groups[i : i + HEADS_PER_READ]))
            for i in range(0, len(groups), HEADS_PER_READ)
        ]
        return {r.grp: r for f in futures for r in f.result()}

    def _known(self, queue: QueueInfo, group: str, message_id: int) -> None:
        if len(self._finished) > KNOWN_GROUPS:
            self._finished.clear()
        key = (queue.queue_id, group)
        if self._finished.get(key, -1) < message_id:
            self._finished[key] = message_id

    def verdicts(
        self, queue: QueueInfo, firsts: list[tuple[str, Any]], rows: Sequence, now: float
    ) -> dict[tuple[str, int], bool]:
        """For each (group, its first fresh row ``m``): may ``m`` be claimed? Yes when the
        group's head is absent, at or above ``m``, marked done, known finished, or its row
        reads finished or never delivered (a head written for a claim that did not apply)."""
        heads = self.read(queue, [g for g, _ in firsts])
        in_stretch = {r.id: r for r in rows}
        out: dict[tuple[str, int], bool] = {}
        to_read: list[tuple[str, int, int]] = []
        for g, m in firsts:
            mid = m.id
            head = heads.get(g)
            h = head.head if head is not None else None
            done = head.done if head is not None else None
            if (
                h is None
                or h >= mid
                or (done is not None and done >= h)
                or self._finished.get((queue.queue_id, g), -1) >= h
            ):
                out[(g, mid)] = True
            elif h in in_stretch:
                out[(g, mid)] = self._head_lets_go(queue, g, in_stretch[h], now)
            else:
                to_read.append((g, mid, h))
        reads = [
            (
                g,
                mid,
                self.conn.execute_async(
                    _READ_ROW, (queue.queue_id, bucket_of(h, queue.bucket_size), h)
                ),
            )
            for g, mid, h in to_read
        ]
        for g, mid, f in reads:
            out[(g, mid)] = self._head_lets_go(queue, g, f.result().one(), now)
        return out

    def _head_lets_go(self, queue: QueueInfo, group: str, row, now: float) -> bool:
        if is_finished(row, queue, now):
            if row is not None:
                self._known(queue, group, row.id)
            return True
        # Never delivered: a head written for a claim that did not apply. It lies at or above
        # the scan's start (the pointer passes no fresh row), so the scan met it first if it
        # is of this group; below it, it is in a range handed to repair.
        return row.version is None

    def write_heads(self, queue: QueueInfo, rows: Sequence) -> None:
        """``head = m`` for the fresh grouped rows about to be claimed, before the claim: one
        batch on the queue's heads partition, each write stamped with its message id."""
        grouped = [r for r in rows if r.grp is not None and r.version is None]
        if not grouped:
            return
        stmt = self.conn.prepare(_WRITE_HEAD)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.is_idempotent = True  # the same cells with the same timestamps: a replay is a no-op
        for r in grouped:
            batch.add(stmt, (r.id, r.id, queue.queue_id, r.grp))
        self.conn.execute(batch)

    def write_done(self, queue: QueueInfo, acked: Sequence[tuple[str, int]]) -> None:
        """``done = id`` for grouped messages just acked (``(group, id)`` pairs): a hint that
        spares the next reader a read of the head's row; if it is lost, the row is read."""
        if not acked:
            return
        for g, mid in acked:
            self._known(queue, g, mid)
        stmt = self.conn.prepare(_WRITE_DONE)
        batch = BatchStatement(batch_type=BatchType.UNLOGGED)
        batch.is_idempotent = True
        for g, mid in acked:
            batch.add(stmt, (mid, mid, queue.queue_id, g))
        try:
            self.conn.execute(batch)
        except Exception:  # a hint: the next reader reads the head's row instead
            log.warning("queue %s: could not mark %d group head(s) done", queue.name, len(acked))
