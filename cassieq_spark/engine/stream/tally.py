"""What a stream task's read of an id-path range delivered, kept for the ack of its batch.

The ack of a committed batch moves the reader pointer over its id path (that acks its plain
messages), marks the other messages it delivered ``acked = true`` and adds what it delivered to
the queue's ``acked`` counter (``ack.py``). To know that without a tally, the ack must scan
every row of the id path in Cassandra. The executors read those rows anyway: each task that
reads an id-path range *whole*, in the run that planned its batch, records a tally, one row
keyed by ``(queue, run, batch time, range start)``:

* ``plain``: how many plain messages it delivered (never delayed, never delivered to a
  client): the pointer's move acks them, nothing per message;
* ``others``: the ids of the other messages it delivered (a due redelivery, a delayed message
  now due): the ack reads those rows again and marks the ones still unchanged since the batch's
  time, as it would have after a scan.

The ack then reads the tallies of its batch with one statement and scans only the parts of the
id path no tally covers (a task that stopped early, a replay, a tally that expired or whose
write failed). So the cost of acking a batch of plain messages does not grow with the batch.

Invariants:

* A tally is written only after the task's last page was handed on, so it always describes a
  whole read of its range; a task that stopped early writes none.
* Only the run that planned the batch writes or uses tallies (``run`` is part of the key, and a
  replay writes none): a read by an earlier run that never committed (a batch later moved to
  the dead-letter queue, say) can never stand in for the committing run's read. A replay's
  rows are shown as planned, not as they are, so a replay is acked by the scan.
* Ranges of tallies of one batch never overlap unless the batch was cut into partitions twice
  (two reads of one batch in one run with other partition options); :func:`cover` then takes
  ranges that do not overlap and leaves the rest to the scan.
* A tally is a hint with a short TTL: a write that fails is logged and costs only the scan.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pyarrow.compute as pc

from ..store.session import Connection
from .columns import Rows

log = logging.getLogger(__name__)

__all__ = ["Tally", "TallyRecorder", "cover", "others_of", "read_tallies"]

# The ack follows the commit within seconds to minutes; a tally expires with the table's
# default TTL (schema.STREAM_TALLIES_TTL_SECONDS, one hour), and its batch is then acked by the
# scan.
# A range with more messages that are not plain than this is left to the scan: their ids
# travel in one cell, and the ack reads each of those rows anyway.
MAX_OTHERS = 5000

_WRITE = (
    "INSERT INTO {ks}.stream_tallies (queue_id, run, end_ts, lo, hi, plain, others) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_READ = (
    "SELECT lo, hi, plain, others FROM {ks}.stream_tallies "
    "WHERE queue_id = ? AND run = ? AND end_ts = ? AND lo >= ? AND lo < ?"
)


@dataclass(frozen=True)
class Tally:
    """What one whole read of ``[lo, hi)`` delivered."""

    lo: int
    hi: int
    plain: int
    others: tuple[int, ...] = ()


@dataclass
class TallyRecorder:
    """Counts the pages a task hands on (:meth:`add`), then records them (:meth:`record`)."""

    queue_id: uuid.UUID
    run: str
    end_ts: int
    lo: int
    hi: int
    plain: int = 0
    others: list[int] = field(default_factory=list)

    def add(self, rows: Rows) -> None:
        """A page of delivered rows."""
        plain = pc.and_(pc.is_null(rows.version), pc.is_null(rows.visible_at))
        n_plain = pc.sum(plain.cast("int64")).as_py() or 0
        self.plain += n_plain
        if n_plain < len(rows):
            self.others.extend(pc.filter(rows.id, pc.invert(plain)).to_pylist())

    def record(self, conn: Connection) -> bool:
        """Write the tally (the task's last page was handed on); False if none was written."""
        if len(self.others) > MAX_OTHERS:
            return False
        values = (
            self.queue_id,
            self.run,
            self.end_ts,
            self.lo,
            self.hi,
            self.plain,
            self.others or None,
        )
        # Any failure of the write, and only of the write: the driver raises errors of several
        # families (its own, the server's error messages, a connection shut down), and a
        # tally is a hint; the ack scans this range instead.
        try:
            conn.execute(_WRITE, values)
        except Exception as exc:
            log.warning(
                "queue %s: the tally of ids %d..%d was not recorded (%s); the ack of its batch "
                "scans that range instead",
                self.queue_id,
                self.lo,
                self.hi - 1,
                exc,
            )
            return False
        return True


def read_tallies(
    conn: Connection, queue_id: uuid.UUID, run: str, end_ts: int, lo: int, hi: int
) -> list[Tally]:
    """The tallies of the batch at ``end_ts`` of ``run`` whose ranges start in ``[lo, hi)``.
    A failed read is an empty answer (the ack scans instead)."""
    try:
        rows = list(conn.execute(_READ, (queue_id, run, end_ts, lo, hi)))
    except Exception as exc:  # as for the write: any failure of the read, the ack scans
        log.warning(
            "queue %s: the tallies of a batch could not be read (%s); scanning", queue_id, exc
        )
        return []
    return [Tally(r.lo, r.hi, r.plain, tuple(r.others or ())) for r in rows]


def cover(lo: int, hi: int, tallies: Iterable[Tally]) -> tuple[list[Tally], list[tuple[int, int]]]:
    """Tallies inside ``[lo, hi)`` whose ranges do not overlap, taken from the lowest, and the
    parts of ``[lo, hi)`` they leave uncovered (in order)."""
    used: list[Tally] = []
    gaps: list[tuple[int, int]] = []
    pos = lo
    for t in sorted(tallies, key=lambda t: (t.lo, t.hi)):
        if t.lo < pos or t.hi > hi or t.hi <= t.lo:
            continue  # overlaps one taken, sticks out of the range, or is empty
        if t.lo > pos:
            gaps.append((pos, t.lo))
        used.append(t)
        pos = t.hi
    if pos < hi:
        gaps.append((pos, hi))
    return used, gaps


def others_of(tallies: Sequence[Tally]) -> list[int]:
    return sorted({i for t in tallies for i in t.others})
