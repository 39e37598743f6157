"""The delivery rules over whole pages (``engine/stream/columns.py``) give exactly what the row
rules (``engine/stream/read.py``, ``messages.is_done``) give, row for row: the same rows
delivered, the same delivery counts, the same replayed state. The row rules decide what the
driver acks (``ack.py``), so any difference would deliver a row that is acked unseen or ack a
row never delivered.

Rows are generated over every case the rules tell apart: acked (before and after the batch),
dead, no ``enqueued_at``, delayed (due before, at and after the batch's time), delivered to a
client (version 1 written before and after the batch, version 2, timers before and after),
plain rows (the timer path leaves them to the reader pointer), ids inside, at the edges of and
outside the ranges repair owns, behind and past the snapshot's reader pointer.
"""

from __future__ import annotations

import itertools
import random
from collections import namedtuple

import pyarrow as pa
import pytest
from cassandra.util import datetime_from_timestamp

from cassieq_spark.engine.core.messages import is_done
from cassieq_spark.engine.stream import columns
from cassieq_spark.engine.stream import deliveries as stream_deliveries
from cassieq_spark.engine.stream.read import (
    as_planned,
    id_path_delivers,
    timer_path_delivers,
)

pytestmark = [pytest.mark.unit, pytest.mark.fast]

END = 1_790_000_000_000  # the batch's end_ts (epoch ms)
EXCLUDED = [(40, 50), (70, 71), (100, 140)]
READER = 90

# The driver's named row of read.READ_COLUMNS: timestamps as naive UTC datetimes.
Row = namedtuple("Row", columns.FIELDS)  # type: ignore[misc]

TIMES = [None, END - 60_000, END - 1, END, END + 1, END + 60_000, 0]
WRITTEN = [None, (END - 5) * 1000, END * 1000 - 1, END * 1000, END * 1000 + 1, (END + 9) * 1000]
IDS = [0, 39, 40, 49, 50, 69, 70, 71, 89, 90, 91, 99, 100, 139, 140, 200]


def _row(values: dict) -> tuple:
    return tuple(values[f] for f in columns.FIELDS)


def _named(t: tuple) -> Row:
    """What the driver's named tuple holds for the same cells."""
    v = dict(zip(columns.FIELDS, t, strict=True))
    for f in ("enqueued_at", "visible_at", "invisible_until"):
        if v[f] is not None:
            v[f] = datetime_from_timestamp(v[f] / 1000.0)
    return Row(**v)


def _generated(seed: int, n: int) -> list[tuple]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        out.append(
            _row(
                {
                    "id": rnd.choice(IDS),
                    "payload": rnd.choice([None, b"", b"x" * rnd.randrange(1, 50)]),
                    "headers": rnd.choice([None, {"k": "v"}, {"cassieq-group": "g"}]),
                    "enqueued_at": rnd.choice([None, END - 10_000, END - 10_000, END + 5]),
                    "visible_at": rnd.choice(TIMES),
                    "version": rnd.choice([None, None, 1, 1, 2, 3]),
                    "deliveries": rnd.choice([None, None, 0, 1, 2, 7]),
                    "invisible_until": rnd.choice(TIMES),
                    "acked": rnd.choice([None, None, True, False]),
                    "dead": rnd.choice([None, None, True, False]),
                    "changed_at": rnd.choice(WRITTEN),
                    "acked_at": rnd.choice(WRITTEN),
                }
            )
        )
    return out


def _every_case() -> list[tuple]:
    """Every combination of the cells the rules read, on a few ids."""
    out = []
    for acked, dead, enq, vis, version, inv, changed, acked_at in itertools.product(
        [None, True, False],
        [None, True],
        [None, END - 10_000],
        [None, END - 1, END, END + 1],
        [None, 1, 2],
        [None, END, END + 1],
        [None, END * 1000 - 1, END * 1000],
        [None, END * 1000 - 1, END * 1000],
    ):
        for mid in (39, 40, 89, 90, 140):
            out.append(
                _row(
                    {
                        "id": mid,
                        "payload": b"p",
                        "headers": None,
                        "enqueued_at": enq,
                        "visible_at": vis,
                        "version": version,
                        "deliveries": None if version is None else version,
                        "invisible_until": inv,
                        "acked": acked,
                        "dead": dead,
                        "changed_at": changed,
                        "acked_at": acked_at,
                    }
                )
            )
    return out


CASES = {
    "every-combination": _every_case(),
    "random-1": _generated(1, 3000),
    "random-2": _generated(2, 3000),
    "plain-page": [
        _row(
            dict.fromkeys(columns.FIELDS)
            | {"id": i, "payload": b"x" * 100, "enqueued_at": END - 1000}
        )
        for i in range(200)
    ],
    # Plain messages but for the cells that make a row no message: no enqueued_at.
    "plain-page-with-gaps": [
        _row(
            dict.fromkeys(columns.FIELDS)
            | {"id": i, "payload": b"x", "enqueued_at": None if i % 7 == 3 else END - 1000}
        )
        for i in range(150)
    ],
    "one-row": _generated(3, 1),
}


def _rows(tuples: list[tuple], width: int = 12) -> columns.Rows:
    """The rows as the executors convert a page the driver hands them."""
    return columns.Rows.from_tuples([t[:width] for t in tuples])


def _pairs(d: columns.Deliveries) -> list[tuple[int, int]]:
    return list(zip(d.rows.id.to_pylist(), d.counts.to_pylist(), strict=True))


def _reference(tuples, end_ts, excluded, replay, rule) -> list[tuple[int, int]]:
    """read.read_id_path / read_timer_path's loop, over named rows."""
    out = []
    for t in tuples:
        row = _named(t)
        if replay:
            row = as_planned(row, end_ts)
        if rule(row, end_ts, excluded):
            out.append((row.id, (row.deliveries or 0) + 1))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("replay", [False, True], ids=["first-run", "replay"])
@pytest.mark.parametrize("excluded", [(), EXCLUDED], ids=["no-excluded", "excluded"])
def test_id_path_over_columns_delivers_what_the_row_rule_delivers(case, replay, excluded):
    tuples = CASES[case]
    # A first run reads without the write times (FIRST_RUN_SELECT), a replay with them.
    got = columns.deliver_id_path(_rows(tuples, 12 if replay else 10), END, excluded, replay)
    assert _pairs(got) == _reference(tuples, END, excluded, replay, id_path_delivers)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("replay", [False, True], ids=["first-run", "replay"])
@pytest.mark.parametrize("excluded", [(), EXCLUDED], ids=["no-excluded", "excluded"])
def test_timer_path_over_columns_delivers_what_the_row_rule_delivers(case, replay, excluded):
    tuples = CASES[case]
    got = columns.deliver_timer_path(_rows(tuples, 12 if replay else 10), END, excluded, replay)
    assert _pairs(got) == _reference(tuples, END, excluded, replay, timer_path_delivers)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("width", [10, 12])
def test_a_page_converted_at_once_equals_its_columns_converted_one_by_one(case, width):
    """``Rows.from_tuples`` (one struct array for a page without headers) and
    ``Rows.from_columns`` (a Python transposition) give the same columns, nulls included."""
    page = [t[:width] for t in CASES[case]]
    at_once = columns.Rows.from_tuples(page)
    by_column = columns.Rows.from_columns(tuple(zip(*page, strict=True)))
    for f in columns.FIELDS[:width]:
        a, b = getattr(at_once, f), getattr(by_column, f)
        if f == "headers":
            assert list(a) == list(b)
        else:
            assert a.type == b.type, f
            assert a.to_pylist() == b.to_pylist(), f
    for f in columns.FIELDS[width:]:
        assert getattr(at_once, f) is None


def test_timer_path_leaves_plain_rows_to_the_reader_pointer():
    tuples = CASES["plain-page"]
    assert len(columns.deliver_id_path(_rows(tuples), END, ())) == len(tuples)
    assert len(columns.deliver_timer_path(_rows(tuples), END, ())) == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_replayed_rows_over_columns_are_the_rows_as_planned(case):
    tuples = CASES[case]
    got = columns.as_planned(_rows(tuples), END)
    for i, t in enumerate(tuples):
        want = as_planned(_named(t), END)
        have = got.row(i)
        for f in ("acked", "version", "invisible_until", "deliveries", "dead", "visible_at"):
            assert getattr(have, f) == getattr(want, f), (f, t)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("reader", [0, READER, 10_000])
def test_snapshot_over_columns_keeps_what_is_done_leaves(case, reader):
    tuples = CASES[case]
    got = columns.deliver_unacked(_rows(tuples, width=10), reader)
    want = [(t[0], _named(t).deliveries or 0) for t in tuples if not is_done(_named(t), reader)]
    assert _pairs(got) == want


def test_a_row_taken_out_of_the_columns_is_the_drivers_row():
    tuples = CASES["random-1"][:300]
    rows = _rows(tuples)
    for i, t in enumerate(tuples):
        assert rows.row(i) == _named(t)


def test_rows_without_some_rows_keep_their_headers_in_step():
    tuples = CASES["random-2"][:500]
    d = columns.deliver_id_path(_rows(tuples), END + 10**9, ())
    gone = list(range(0, len(d), 3))
    rest = d.without(gone)
    kept = [i for i in range(len(d)) if i not in set(gone)]
    assert rest.rows.id.to_pylist() == [d.rows.id[i].as_py() for i in kept]
    assert list(rest.rows.headers) == [d.rows.headers[i] for i in kept]
    assert rest.counts.to_pylist() == [d.counts[i].as_py() for i in kept]


def test_rows_past_the_delivery_limit_are_found_over_the_count_column():
    tuples = CASES["random-1"]
    d = columns.deliver_id_path(_rows(tuples), END, ())
    for limit in (1, 2, 3, 8, 100):
        want = [i for i, c in enumerate(d.counts.to_pylist()) if c - 1 >= limit]
        assert d.over_limit(limit) == want


def test_pages_below_the_delivery_limit_pass_whole_without_a_query():
    """No row past the limit and no poison batch: counting never reads Cassandra (conn None)."""
    d = columns.deliver_id_path(_rows(CASES["plain-page"]), END, ())
    out = list(stream_deliveries.with_counts_pages(None, None, iter([d]), 0, 5))  # type: ignore[arg-type]
    assert out == [d]


def test_columns_of_a_page_keep_the_drivers_nulls():
    rows = _rows(CASES["plain-page"])
    assert rows.visible_at.null_count == len(rows) and rows.version.type == pa.int32()
    assert rows.enqueued_at.null_count == 0 and rows.payload.type == pa.binary()
