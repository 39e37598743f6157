"""What one client remembers of the stretch its last scan of a queue read, so that the next scan
from the same reader position need not read it again (docs/internals/protocol.md, "Message
groups", "The stretch memory").

Why a reader needs it: the reader pointer cannot pass a fresh row, and a group's later messages
stay fresh while its head is in flight. A group with many messages waiting (a *hot* group) so
holds the pointer at its next message, and a scan from there would read the whole stretch
again at every call: rows already finished, the hot group's waiting rows, and, once that
stretch is longer than the call's window (``reader.HORIZON_WINDOW``), nothing of the other
groups beyond it.

Invariant: *for a memory of* ``[start, end)`` *made for the reader position* ``start``, *every
row of the stretch that is not remembered needs nothing from the reader path, now or later*:
it is finished (acked, dead, expired: final), in a reservation handed to repair (final),
ungrouped and delivered or delayed (the timer path brings it back; the reader pointer passes
such rows anyway), or was never written (ids below a horizon's safe end stay unwritten). What
is remembered is every other row of the stretch: the grouped rows not finished when read, each
as last read, in id order per group, except that of a group with more than
:data:`MEMORY_ROWS_PER_GROUP` such rows only the first that many are kept: the group is *cut*
after the last one kept (``cut[group]``). So a scan from ``start`` learns everything a read of
``[start, end)`` would tell the gate by looking at the remembered rows alone, and only at the
first one of each group (``Gate.claimable`` only asks for a group's first unfinished row; the
later ones only block the group, as its first does). A cut group's rows after its cut cannot
matter while one of its kept rows is unfinished (that row is the group's first, or blocks what
follows it); once every kept row of a cut group is finished the memory cannot say what comes
next in that group, and the scan does not rely on it (it reads from the reader position, as
without a memory). Those rows may be fresh, so the reader pointer stops at a cut (``cut + 1``)
as it stops at any remembered row it did not look at. Cutting a hot group, rather than the
stretch, keeps the stretch's other groups in the memory however many rows the hot group has
waiting.

- a first row known finished (this client acked it, or ``group_heads.done`` names it or a later
  id) is dropped, and the group's next remembered row is looked at instead;
- a first row remembered in flight whose visibility has not ended, not known finished, blocks
  its group without a read (as it would after a read: a held row blocks its group);
- a first row remembered fresh, or in flight past its visibility, is read again: the gate then
  decides on what the row is now, and the claim's compare-and-set on the row, not the memory,
  decides who holds it.

Being wrong in the safe direction only costs time: a remembered row taken for held while it is
finished keeps its group waiting until this client looks again (its visibility ends, the
memory is dropped by age). Nothing remembered is ever taken for finished unless it is.

The memory follows the reader position: rows below it are forgotten (heads in flight, which
``group_heads`` names), whoever moved the pointer. A claim lost to another consumer at id
``a`` keeps what the call knows below ``a`` (still true: a finished row stays finished, and a
row remembered fresh is read again before it is claimed) and replaces the rest by the rows
read afresh from ``a`` on. It is dropped (the next scan reads from the reader position, as
without it) when the position is past its end, after a stream taking the lease, after
:data:`MEMORY_SECONDS`, and when a cut group's kept rows are all finished; it keeps at most :data:`MEMORY_ROWS` rows (the stretch is cut before the rest). It is one client's cache of its
own reads: other clients, and the timer path, do not depend on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.buckets import bucket_of
from ..core.clock import from_epoch, to_epoch
from ..core.queues import QueueInfo
from ..store.session import Connection
from .groups import is_finished

MEMORY_ROWS = 8192  # rows one memory keeps, at most: the stretch is cut before the rest
# Rows of one group one memory keeps, at most: a hot group is cut after them, so that its
# waiting rows do not crowd the other groups out of the memory. A cut group's memory serves
# this many of its deliveries; then the stretch is read again from the reader position.
MEMORY_ROWS_PER_GROUP = 1024
MEMORY_SECONDS = 10.0  # a memory older than this is dropped: the next scan reads the stretch
IDS_PER_READ = 100  # ids named in one ``id IN`` read of a bucket

_READ_IDS = "SELECT {cols} FROM {{ks}}.messages WHERE queue_id = ? AND bucket = ? AND id IN ?"


@dataclass(frozen=True)
class StretchMemory:
    """``[start, end)`` as one client last read it from the reader position ``start``: per
    group, its rows of the stretch that were not finished, in id order, as last read (scan
    columns). ``made_at`` is when the stretch was first read whole (a memory carried over from
    call to call keeps it, so it ages out). ``cut``: the groups cut after their last kept row
    (that row's id); every cut group has rows in ``groups`` and a cut below ``end - 1``."""

    start: int
    end: int
    made_at: float
    groups: Mapping[str, tuple[Any, ...]]
    cut: Mapping[str, int] = field(default_factory=dict)

    def rows(self) -> int:
        return sum(len(rows) for rows in self.groups.values())

    def usable(self, start: int, now: float) -> bool:
        """Whether a scan from ``start`` at ``now`` may rely on it: young, and ``start`` in its
        stretch (another client may have moved the pointer forward: see :meth:`rebased`)."""
        return self.start <= start < self.end and now - self.made_at < MEMORY_SECONDS

    def rebased(self, start: int) -> StretchMemory | None:
        """The memory of ``[start, end)``: the rows below ``start`` forgotten. Rows of the
        stretch it does not hold need nothing from the reader, whoever moved the pointer."""
        if start == self.start:
            return self
        return remember(start, self.end, self.made_at, self.groups, cut=self.cut)


def remember(
    start: int,
    end: int,
    made_at: float,
    groups: Mapping[str, Sequence[Any]],
    claimed: Mapping[int, Any] | None = None,
    cut: Mapping[str, int] | None = None,
) -> StretchMemory | None:
    """The memory of ``[start, end)`` from rows known unfinished per group (id order; rows
    outside the stretch are left out), each group cut after :data:`MEMORY_ROWS_PER_GROUP` rows
    and the whole to :data:`MEMORY_ROWS` rows; ``claimed`` maps ids to their rows as this
    call's claims left them; ``cut``: groups already cut (their rows after the cut are left
    out: what lies between the cut and these rows is not known). None when nothing of the
    stretch is left, or when a cut group has no row left to show where it stands."""
    claimed = claimed or {}
    cuts = dict(cut or {})
    kept: list[tuple[int, str, Any]] = []
    for g, rows in groups.items():
        limit = cuts.get(g)
        inside = [r for r in rows if start <= r.id < end and (limit is None or r.id <= limit)]
        if len(inside) > MEMORY_ROWS_PER_GROUP:
            inside = inside[:MEMORY_ROWS_PER_GROUP]
            cuts[g] = inside[-1].id
        kept.extend((r.id, g, claimed.get(r.id, r)) for r in inside)
    kept.sort(key=lambda t: t[0])
    if len(kept) > MEMORY_ROWS:
        end = kept[MEMORY_ROWS][0]  # the stretch ends before the first row it cannot keep
        kept = kept[:MEMORY_ROWS]
    if end <= start:
        return None
    out: dict[str, list[Any]] = {}
    for _, g, row in kept:
        out.setdefault(g, []).append(row)
    # A cut at or past the stretch's last id leaves nothing of its group unknown in it.
    cuts = {g: c for g, c in cuts.items() if c + 1 < end}
    if any(g not in out for g in cuts):
        return None
    return StretchMemory(start, end, made_at, {g: tuple(rows) for g, rows in out.items()}, cuts)


def claimed_row(row, now: float, vt: float):
    """``row`` (scan columns, fresh) as a claim by this client left it: in flight until
    ``now + vt``."""
    return row._replace(version=(row.version or 0) + 1, invisible_until=from_epoch(now + vt))


@dataclass
class Recollection:
    """One scan's working copy of a memory: which remembered rows to look at, and, once looked
    at, each remembered group's first unfinished row as it is now.

    ``finished_id(group)`` is the largest id of the group this client knows finished (a group
    delivers a row only after every earlier one finished, so every id up to it is finished)."""

    memory: StretchMemory
    finished_id: Callable[[str], int]
    queue: QueueInfo
    now: float
    pending: dict[str, list[Any]] = field(init=False)
    decided: dict[str, list[Any]] = field(default_factory=dict)
    asked_heads: set[str] = field(default_factory=set)
    read_ids: set[int] = field(default_factory=set)
    # A cut group's kept rows are all finished: the memory cannot say what the group holds
    # next, and the scan must read the stretch from the reader position.
    exhausted: bool = False

    def __post_init__(self) -> None:
        self.pending = {g: list(rows) for g, rows in self.memory.groups.items()}

    def wants(self) -> tuple[list[str], list[int]]:
        """The groups whose ``group_heads`` row to read and the ids to read now; both empty
        once every remembered group is decided. Drops first rows known finished on the way."""
        heads: list[str] = []
        ids: list[int] = []
        for g in list(self.pending):
            rows = self.pending[g]
            known = self.finished_id(g)
            while rows and rows[0].id <= known:
                rows.pop(0)
            if not rows:
                del self.pending[g]
                if g in self.memory.cut:
                    self.exhausted = True
                    return [], []
                continue
            first = rows[0]
            if first.id in self.read_ids:
                self._decide(g)  # read this call: what it is now
            elif first.version is None or to_epoch(first.invisible_until) <= self.now:
                ids.append(first.id)  # fresh (may be claimed now) or due: read it
            elif g not in self.asked_heads:
                heads.append(g)  # held: its head's done mark says if it finished meanwhile
            else:
                self._decide(g)  # held, and nothing says it finished: blocks its group
        return heads, ids

    def learn_heads(self, done: Mapping[str, int | None], asked: Iterable[str]) -> None:
        """``done`` marks read for the groups ``asked``: a first row at or below its group's
        mark is finished."""
        for g in asked:
            self.asked_heads.add(g)
            mark = done.get(g)
            rows = self.pending.get(g)
            while rows and mark is not None and rows[0].id <= mark:
                rows.pop(0)

    def learn_rows(self, found: Mapping[int, Any], asked: Iterable[int]) -> None:
        """Rows read for the ids ``asked`` (absent from ``found``: gone, finished)."""
        by_id = {rows[0].id: g for g, rows in self.pending.items() if rows}
        for mid in asked:
            self.read_ids.add(mid)
            g = by_id.get(mid)
            if g is None:
                continue
            row = found.get(mid)
            rows = self.pending[g]
            if is_finished(row, self.queue, self.now):
                rows.pop(0)
            else:
                rows[0] = row

    def _decide(self, g: str) -> None:
        self.decided[g] = self.pending.pop(g)

    def firsts(self) -> list[Any]:
        """Each remembered group's first unfinished row as known now, in id order: the stretch
        as the gate sees it."""
        return sorted((rows[0] for rows in self.decided.values()), key=lambda r: r.id)

    def later_first(self) -> int | None:
        """The smallest id among the remembered rows after their group's first: rows not looked
        at this call, some possibly fresh, that the reader pointer must not pass."""
        ids = [rows[1].id for rows in self.decided.values() if len(rows) > 1]
        ids.extend(c + 1 for c in self.memory.cut.values())  # a cut group's rows beyond
        return min(ids) if ids else None

    def remaining(self) -> dict[str, list[Any]]:
        """Per group, its rows still unfinished as far as known (the first as read now); the
        memory's cuts still apply to them (``memory.cut``)."""
        return {g: list(rows) for g, rows in self.decided.items()}


def read_rows(conn: Connection, queue: QueueInfo, ids: Sequence[int], columns: str) -> dict:
    """The rows with ``ids`` (``columns``), one ``id IN`` read per bucket and
    :data:`IDS_PER_READ` ids, all in flight at once; ids without a row are absent."""
    by_bucket: dict[int, list[int]] = {}
    for mid in sorted(ids):
        by_bucket.setdefault(bucket_of(mid, queue.bucket_size), []).append(mid)
    cql = _READ_IDS.format(cols=columns)
    futures = [
        conn.execute_async(cql, (queue.queue_id, bucket, chunk[i : i + IDS_PER_READ]))
        for bucket, chunk in by_bucket.items()
        for i in range(0, len(chunk), IDS_PER_READ)
    ]
    return {r.id: r for f in futures for r in f.result()}
