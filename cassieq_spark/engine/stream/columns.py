"""Stream batches and snapshots read as columns: each page of message rows becomes Arrow arrays
at once, and the delivery rules are evaluated over whole columns (``pyarrow.compute``).

The rules are those of ``read.py`` (the id path, the timer path, :func:`read.as_planned` for
a replay) and of ``messages.is_done`` (what a snapshot counts as unacked). The row functions
there stay the reference: the driver's ack (``ack.py``) decides with them what it acks, so a
row is acked only if a reader would have delivered it, and these must give the same answer on
every row (``tests/unit/test_stream_column_rules.py`` compares the two on generated rows of
every kind).

What stays a Python step per row, and why:

- the driver's decoding of each row into a tuple of cells (its compiled row parser; one
  Python object per non-null cell), then converted into columns in one call (a page as one
  Arrow struct array, split into its fields);
- the headers of rows that have any: the driver hands each as a map object, so a page with
  headers is transposed in Python and turned into the Arrow map and the group column row by
  row (pages without headers cost nothing per row);
- the rows a batch moves instead of delivering (past their delivery limit, or a poison
  batch: ``deliveries.with_counts_pages``), which are rare.

Timestamps are read as epoch milliseconds (``toUnixTimestamp``), never as ``datetime``
objects. Needs pyarrow (the connector's ``[spark]`` extra): only the Spark layer imports this
module.
"""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import itemgetter

import pyarrow as pa
import pyarrow.compute as pc
from cassandra.util import datetime_from_timestamp

from ..core.messages import read_pages
from ..core.queues import QueueInfo
from ..store.session import Connection
from .read import read_rows_by_id

__all__ = [
    "FIRST_RUN_SELECT",
    "READ_SELECT",
    "SNAPSHOT_SELECT",
    "Deliveries",
    "Rows",
    "as_planned",
    "deliver_id_path",
    "deliver_timer_path",
    "deliver_unacked",
    "id_path_mask",
    "read_id_path",
    "read_timer_path",
    "read_unacked",
    "timer_path_mask",
    "unacked_mask",
]

# The columns of read.READ_COLUMNS in the same order, timestamps as epoch ms. A replay needs
# the write times (as_planned); a first run and a snapshot read the first ten
# (messages.COLUMNS), which spares Cassandra two write-time lookups per row.
READ_SELECT = (
    "id, payload, headers, toUnixTimestamp(enqueued_at), toUnixTimestamp(visible_at), version, "
    "deliveries, toUnixTimestamp(invisible_until), acked, dead, writetime(invisible_until), "
    "writetime(acked)"
)
SNAPSHOT_SELECT = ", ".join(READ_SELECT.split(", ")[:10])
FIRST_RUN_SELECT = SNAPSHOT_SELECT
FIELDS = (
    "id",
    "payload",
    "headers",
    "enqueued_at",
    "visible_at",
    "version",
    "deliveries",
    "invisible_until",
    "acked",
    "dead",
    "changed_at",
    "acked_at",
)
_TYPES = {
    "id": pa.int64(),
    "payload": pa.binary(),
    "enqueued_at": pa.int64(),
    "visible_at": pa.int64(),
    "version": pa.int32(),
    "deliveries": pa.int32(),
    "invisible_until": pa.int64(),
    "acked": pa.bool_(),
    "dead": pa.bool_(),
    "changed_at": pa.int64(),
    "acked_at": pa.int64(),
}
# A page without headers as one struct array (the headers field typed null: every row has
# none), per read width: 10 columns (a first run, a snapshot) or 12 (a replay).
_PAGE_STRUCTS = {
    width: pa.struct([pa.field(name, _TYPES.get(name, pa.null())) for name in FIELDS[:width]])
    for width in (10, 12)
}
_AT_HEADERS = FIELDS.index("headers")
TIMER_CHUNK_ROWS = 4096  # the timer path's rows come one read per id: columns per this many
_TIMESTAMPS = ("enqueued_at", "visible_at", "invisible_until")

# A message row as the driver's named rows have it (timestamps as datetime), for the rare rows
# handled one by one (deadletter.take).
Row = namedtuple("Row", FIELDS)  # type: ignore[misc]


def _array(values: Sequence, type_: pa.DataType) -> pa.Array:
    if values.count(None) == len(values):  # columns of plain messages: mostly all null
        return pa.nulls(len(values), type_)
    return pa.array(values, type=type_)


@dataclass(frozen=True)
class Rows:
    """Message rows as columns: timestamps in epoch ms, the write times ``changed_at`` and
    ``acked_at`` in microseconds (None when the read has none: a snapshot); ``headers`` stays
    a Python value per row (a mapping, or None)."""

    id: pa.Array
    payload: pa.Array
    headers: Sequence
    enqueued_at: pa.Array
    visible_at: pa.Array
    version: pa.Array
    deliveries: pa.Array
    invisible_until: pa.Array
    acked: pa.Array
    dead: pa.Array
    changed_at: pa.Array | None = None
    acked_at: pa.Array | None = None

    @classmethod
    def from_tuples(cls, rows: Sequence[tuple]) -> Rows:
        """Rows of a page as the driver hands it (plain tuples read with ``READ_SELECT`` or
        ``SNAPSHOT_SELECT``). A page where no row has headers is converted in one call, as a
        struct array split into its fields; a page with headers goes through
        :meth:`from_columns`. Both give the same Rows."""
        n = len(rows)
        if n == 0 or list(map(itemgetter(_AT_HEADERS), rows)).count(None) != n:
            return cls.from_columns(tuple(zip(*rows, strict=True)))
        page = pa.array(rows, type=_PAGE_STRUCTS[len(rows[0])])
        values: dict = {"headers": (None,) * n}
        for name, col in zip(FIELDS, page.flatten(), strict=False):
            if name != "headers":
                values[name] = col
        return cls(**values)

    @classmethod
    def from_columns(cls, cols: Sequence[Sequence]) -> Rows:
        """Rows of a page read with ``READ_SELECT`` (12 columns) or ``SNAPSHOT_SELECT`` (10)."""
        values = {}
        for name, col in zip(FIELDS, cols, strict=False):
            values[name] = col if name == "headers" else _array(col, _TYPES[name])
        return cls(**values)

    def __len__(self) -> int:
        return len(self.id)

    def take(self, indices: pa.Array) -> Rows:
        """The rows at ``indices`` (in that order)."""
        changes: dict = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "headers":
                if value.count(None) == len(value):
                    changes[f.name] = (None,) * len(indices)
                else:
                    changes[f.name] = [value[i] for i in indices.to_pylist()]
            elif value is not None:
                changes[f.name] = value.take(indices)
        return dataclasses.replace(self, **changes)

    def filter(self, mask: pa.Array) -> Rows:
        """The rows where ``mask`` is true (itself when it is true everywhere)."""
        if pc.all(mask).as_py() is not False:  # all true, or no rows
            return self
        return self.take(pc.indices_nonzero(mask))

    def row(self, i: int):
        """Row ``i`` as the driver's named rows have it (timestamps as naive UTC datetimes)."""
        out: list = []
        for name in FIELDS:
            value = getattr(self, name)
            if value is None:
                out.append(None)
                continue
            v = value[i] if name == "headers" else value[i].as_py()
            if name in _TIMESTAMPS and v is not None:
                v = datetime_from_timestamp(v / 1000.0)
            out.append(v)
        return Row(*out)


@dataclass(frozen=True)
class Deliveries:
    """Rows a partition delivers, with the delivery count each carries (int32)."""

    rows: Rows
    counts: pa.Array

    def __len__(self) -> int:
        return len(self.rows)

    def over_limit(self, max_delivery_count: int) -> list[int]:
        """Positions of the rows clients already received ``max_delivery_count`` times (the
        count a stream gives is the client deliveries plus one)."""
        over = pc.greater_equal(pc.subtract(self.counts, 1), max_delivery_count)
        if not pc.any(over).as_py():
            return []
        return pc.indices_nonzero(over).to_pylist()

    def row(self, i: int):
        return self.rows.row(i)

    def count(self, i: int) -> int:
        return self.counts[i].as_py()

    def without(self, positions: Iterable[int]) -> Deliveries:
        drop = set(positions)
        keep = pa.array([i for i in range(len(self)) if i not in drop], pa.int64())
        return Deliveries(self.rows.take(keep), self.counts.take(keep))


# -- the rules over columns (the same as read.py's over rows) ----------------------------------


def _true(a: pa.Array) -> pa.Array:
    return pc.fill_null(a, False)


def _ms(a: pa.Array) -> pa.Array:
    return pc.fill_null(a, 0)


def as_planned(rows: Rows, end_ts: int) -> Rows:
    """:func:`read.as_planned` over columns: an ack written at or after ``end_ts`` is
    dropped, and a first delivery written since (version 1) is undone (version, timer and
    delivery count back to none). Needs the write times (``READ_SELECT``)."""
    if rows.acked_at is None or rows.changed_at is None:
        raise ValueError("as_planned needs the rows' write times: read them with READ_SELECT")
    cut = end_ts * 1000
    changes: dict = {}
    late_ack = pc.and_(_true(rows.acked), _true(pc.greater_equal(rows.acked_at, cut)))
    if pc.any(late_ack).as_py():
        changes["acked"] = pc.if_else(late_ack, pa.scalar(None, pa.bool_()), rows.acked)
    first = pc.and_(_true(pc.equal(rows.version, 1)), _true(pc.greater_equal(rows.changed_at, cut)))
    if pc.any(first).as_py():
        for name in ("version", "invisible_until", "deliveries"):
            col = getattr(rows, name)
            changes[name] = pc.if_else(first, pa.scalar(None, col.type), col)
    return dataclasses.replace(rows, **changes) if changes else rows


def _inside(ids: pa.Array, ranges: Sequence[tuple[int, int]]) -> pa.Array | None:
    out = None
    for lo, hi in ranges:
        m = pc.and_(pc.greater_equal(ids, lo), pc.less(ids, hi))
        out = m if out is None else pc.or_(out, m)
    return out


def _none(*arrays: pa.Array) -> bool:
    """Whether every value of every array is null (a state column of plain messages)."""
    return all(a.null_count == len(a) for a in arrays)


def id_path_mask(rows: Rows, end_ts: int, excluded: Sequence[tuple[int, int]]) -> pa.Array:
    """:func:`read.id_path_delivers` of every row: a message, not acked or dead, outside the
    ranges repair owns, due at ``end_ts``."""
    if _none(rows.acked, rows.dead, rows.visible_at, rows.invisible_until):
        # A page of plain messages, none claimed: every message is due (end_ts > 0).
        ok = pc.is_valid(rows.enqueued_at)
    else:
        due = pc.max_element_wise(_ms(rows.visible_at), _ms(rows.invisible_until))
        ok = pc.and_(
            pc.invert(pc.or_(_true(rows.acked), _true(rows.dead))), pc.is_valid(rows.enqueued_at)
        )
        ok = pc.and_(ok, pc.less_equal(due, end_ts))
    inside = _inside(rows.id, excluded)
    return ok if inside is None else pc.and_(ok, pc.invert(inside))


def _plain(rows: Rows) -> pa.Array:
    return pc.and_(pc.is_null(rows.version), pc.is_null(rows.visible_at))


def timer_path_mask(rows: Rows, end_ts: int, excluded: Sequence[tuple[int, int]]) -> pa.Array:
    """:func:`read.timer_path_delivers` of every row: the id path's rule, plain rows left
    to the reader pointer."""
    return pc.and_(pc.invert(_plain(rows)), id_path_mask(rows, end_ts, excluded))


def unacked_mask(rows: Rows, reader: int) -> pa.Array:
    """Not ``messages.is_done``: not acked, not dead, and not a plain message behind the
    reader pointer ``reader``."""
    behind = pc.and_(_plain(rows), pc.less(rows.id, reader))
    return pc.invert(pc.or_(pc.or_(_true(rows.acked), _true(rows.dead)), behind))


def _delivered(rows: Rows, mask: pa.Array, plus: int) -> Deliveries:
    kept = rows.filter(mask)
    if _none(kept.deliveries):  # no client delivered any of them
        counts = pa.repeat(pa.scalar(plus, pa.int32()), len(kept))
        return Deliveries(kept, counts)
    counts = _ms(kept.deliveries)
    return Deliveries(kept, pc.add(counts, plus).cast(pa.int32()) if plus else counts)


def deliver_id_path(
    rows: Rows, end_ts: int, excluded: Sequence[tuple[int, int]], replay: bool = False
) -> Deliveries:
    """What the id path of a batch at ``end_ts`` delivers of ``rows``, each with its delivery
    count (client deliveries plus one): the loop of :func:`read.read_id_path` over columns."""
    if replay:
        rows = as_planned(rows, end_ts)
    return _delivered(rows, id_path_mask(rows, end_ts, excluded), 1)


def deliver_timer_path(
    rows: Rows, end_ts: int, excluded: Sequence[tuple[int, int]], replay: bool = False
) -> Deliveries:
    """The loop of :func:`read.read_timer_path` over columns."""
    if replay:
        rows = as_planned(rows, end_ts)
    return _delivered(rows, timer_path_mask(rows, end_ts, excluded), 1)


def deliver_unacked(rows: Rows, reader: int) -> Deliveries:
    """The loop of :func:`snapshot.read_unacked` over columns: the unacked rows with the
    delivery counts clients gave them."""
    return _delivered(rows, unacked_mask(rows, reader), 0)


# -- reading -----------------------------------------------------------------------------------


def read_id_path(
    conn: Connection,
    queue: QueueInfo,
    lo: int,
    hi: int,
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
    replay: bool = False,
) -> Iterator[Deliveries]:
    """:func:`read.read_id_path` page by page: the delivered rows of each page of
    ``[lo, hi)`` with their delivery counts (client deliveries plus one)."""
    select = READ_SELECT if replay else FIRST_RUN_SELECT
    for page in read_pages(conn, queue, lo, hi, select):
        d = deliver_id_path(Rows.from_tuples(page), end_ts, excluded, replay)
        if len(d):
            yield d


def _chunks(rows: Iterator[tuple], size: int) -> Iterator[list[tuple]]:
    chunk: list[tuple] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def read_timer_path(
    conn: Connection,
    queue: QueueInfo,
    ids: Sequence[int],
    end_ts: int,
    excluded: Sequence[tuple[int, int]],
    replay: bool = False,
) -> Iterator[Deliveries]:
    """:func:`read.read_timer_path` in chunks of columns (the rows are read one by one)."""
    select = READ_SELECT if replay else FIRST_RUN_SELECT
    rows_by_id = read_rows_by_id(conn, queue, ids, select, tuples=True)
    for chunk in _chunks(rows_by_id, TIMER_CHUNK_ROWS):
        d = deliver_timer_path(Rows.from_tuples(chunk), end_ts, excluded, replay)
        if len(d):
            yield d


def read_unacked(
    conn: Connection, queue: QueueInfo, lo: int, hi: int, reader: int
) -> Iterator[Deliveries]:
    """:func:`snapshot.read_unacked` page by page: the unacked rows of ``[lo, hi)`` with the
    delivery counts clients gave them."""
    for page in read_pages(conn, queue, lo, hi, SNAPSHOT_SELECT):
        d = deliver_unacked(Rows.from_tuples(page), reader)
        if len(d):
            yield d
