"""The rule a replayed stream batch reads its rows by (``read.as_planned``), on row values alone.

A replay sees each row as the batch's planning (at ``end_ts``) found it as far as the row tells:
an ack or a first delivery written since is undone; anything the row cannot tell stays.
"""

from __future__ import annotations

from collections import namedtuple

from cassieq_spark.engine.core.clock import from_epoch
from cassieq_spark.engine.stream.read import as_planned, id_path_delivers, is_message

Row = namedtuple(
    "Row",
    "id enqueued_at visible_at version deliveries invisible_until acked dead changed_at acked_at",
)
END = 1_000_000  # the batch's time, ms
BEFORE, AFTER = (END - 5) * 1000, (END + 5) * 1000  # write times, us
DUE_LATER = from_epoch(1.0e9)  # far after the batch


def fresh(**kw) -> Row:
    values = dict(
        id=7, enqueued_at=from_epoch(900.0), visible_at=None, version=None, deliveries=None,
        invisible_until=None, acked=None, dead=None, changed_at=None, acked_at=None,
    )  # fmt: skip
    values.update(kw)
    return Row(**values)


def delivers(row: Row) -> bool:
    return id_path_delivers(as_planned(row, END), END, ())


def test_a_message_a_client_received_once_and_acked_after_the_batch_is_read_as_fresh():
    row = fresh(
        version=1, deliveries=1, invisible_until=DUE_LATER, changed_at=AFTER, acked=True,
        acked_at=AFTER,
    )  # fmt: skip
    seen = as_planned(row, END)
    assert (seen.version, seen.deliveries, seen.invisible_until, seen.acked) == (None,) * 4
    assert delivers(row) and not id_path_delivers(row, END, ())


def test_states_written_before_the_batch_stand():
    assert not delivers(fresh(acked=True, acked_at=BEFORE))
    held = fresh(version=1, deliveries=1, invisible_until=DUE_LATER, changed_at=BEFORE)
    assert as_planned(held, END) == held and not delivers(held)


def test_what_the_row_cannot_tell_stays_as_it_is():
    twice = fresh(version=2, deliveries=2, invisible_until=DUE_LATER, changed_at=AFTER)
    assert as_planned(twice, END) == twice and not delivers(twice)
    moved = fresh(dead=True)
    assert not delivers(moved)


def test_a_row_without_its_message_is_never_delivered():
    phantom = fresh(enqueued_at=None, version=1, invisible_until=from_epoch(1.0), changed_at=BEFORE)
    assert not is_message(phantom) and not id_path_delivers(phantom, END, ())
