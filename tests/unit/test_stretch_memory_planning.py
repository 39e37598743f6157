"""The stretch memory's planning, without a server (engine/consume/stretch_memory.py): which
remembered rows a scan reads again, which it may decide without a read, and what a memory keeps.
The reads themselves, and the memory inside the reader, are in
tests/integration/test_stretch_memory_of_a_hot_group.py."""

from __future__ import annotations

import datetime as dt
import uuid
from collections import namedtuple

import pytest

from cassieq_spark.engine.consume.stretch_memory import (
    MEMORY_ROWS,
    MEMORY_ROWS_PER_GROUP,
    MEMORY_SECONDS,
    Recollection,
    claimed_row,
    remember,
)
from cassieq_spark.engine.core.clock import from_epoch
from cassieq_spark.engine.core.queues import QueueInfo

pytestmark = pytest.mark.unit

Row = namedtuple(
    "Row",
    "id enqueued_at visible_at version deliveries invisible_until acked dead moved grp",
)
NOW = 1_800_000_000.0
QUEUE = QueueInfo(name="q", queue_id=uuid.uuid4())


def fresh(mid: int, grp: str | None = "g") -> Row:
    put = from_epoch(NOW - 10)
    return Row(mid, put, put, None, None, None, None, None, None, grp)


def held(mid: int, grp: str = "g", until: float = NOW + 30) -> Row:
    return fresh(mid, grp)._replace(version=1, deliveries=1, invisible_until=from_epoch(until))


def acked(row: Row) -> Row:
    return row._replace(acked=True)


def memory(*rows: Row, start: int = 0, end: int = 1000):
    groups: dict[str, list[Row]] = {}
    for r in rows:
        assert r.grp is not None
        groups.setdefault(r.grp, []).append(r)
    made = remember(start, end, NOW, groups)
    assert made is not None
    return made


def recall(mem, finished=None, heads=None, table=None) -> tuple[Recollection, list[list[int]]]:
    """Run the planning loop as the reader does, against ``table`` (id -> row now) and
    ``heads`` (group -> done mark); returns the recollection and the ids read per round."""
    finished = finished or {}
    rec = Recollection(mem, lambda g: finished.get(g, -1), QUEUE, NOW)
    rounds = []
    while True:
        groups, ids = rec.wants()
        if not groups and not ids:
            return rec, rounds
        if groups:
            rec.learn_heads({g: (heads or {}).get(g) for g in groups}, groups)
        if ids:
            rounds.append(sorted(ids))
            found = {i: (table or {})[i] for i in ids if (table or {}).get(i) is not None}
            rec.learn_rows(found, ids)


def test_a_head_this_client_acked_is_dropped_without_a_read_and_its_next_row_is_read():
    h1, h2, h3 = held(10, "hot"), fresh(12, "hot"), fresh(14, "hot")
    rec, rounds = recall(memory(h1, h2, h3), finished={"hot": 10}, table={12: h2, 14: h3})
    assert rounds == [[12]]  # not 10 (known acked), not 14 (not the group's first)
    assert [r.id for r in rec.firsts()] == [12]
    assert rec.later_first() == 14  # maybe fresh, never looked at: the pointer stays below it


def test_a_held_head_is_decided_from_the_heads_table_without_reading_its_row():
    h1, h2 = held(10, "a"), fresh(11, "a")
    rec, rounds = recall(memory(h1, h2), heads={"a": None}, table={11: h2})
    assert rounds == []  # in flight and not due: blocks its group, no read
    assert [r.id for r in rec.firsts()] == [10] and rec.firsts()[0].version == 1


def test_a_head_another_client_acked_shows_in_the_done_mark_and_the_next_row_is_read():
    h1, h2 = held(10, "a"), fresh(11, "a")
    rec, rounds = recall(memory(h1, h2), heads={"a": 10}, table={11: h2})
    assert rounds == [[11]]
    assert [r.id for r in rec.firsts()] == [11]


def test_a_remembered_fresh_row_is_read_again_and_taken_as_it_is_now():
    a1, b1 = fresh(10, "a"), fresh(11, "b")
    taken = held(10, "a")  # another client claimed it since
    rec, rounds = recall(memory(a1, b1), table={10: taken, 11: b1})
    assert rounds == [[10, 11]]
    assert {r.id: r.version for r in rec.firsts()} == {10: 1, 11: None}


def test_a_due_head_is_read_again_and_finished_rows_fall_out_round_by_round():
    a1, a2, a3 = held(10, "a", until=NOW - 1), fresh(11, "a"), fresh(12, "a")
    table = {10: acked(a1), 11: acked(a2), 12: a3}  # acked by others, no done mark
    rec, rounds = recall(memory(a1, a2, a3), table=table)
    assert rounds == [[10], [11], [12]]
    assert [r.id for r in rec.firsts()] == [12] and rec.remaining() == {"a": [a3]}


def test_a_row_that_is_gone_is_finished_and_a_group_with_nothing_left_is_forgotten():
    a1 = fresh(10, "a")
    rec, rounds = recall(memory(a1), table={})
    assert rounds == [[10]] and rec.firsts() == [] and rec.remaining() == {}
    assert rec.later_first() is None


def test_remember_keeps_the_stretch_from_the_new_position_and_the_claims_as_they_left_rows():
    a1, a2, b1 = fresh(10, "a"), fresh(20, "a"), fresh(5, "b")
    mine = claimed_row(a1, NOW, 30)
    kept = remember(8, 100, NOW, {"a": [a1, a2], "b": [b1]}, {10: mine})
    assert kept is not None and (kept.start, kept.end) == (8, 100)
    assert dict(kept.groups) == {"a": (mine, a2)}  # b1 is behind the pointer now
    assert mine.version == 1 and mine.invisible_until == from_epoch(NOW + 30)
    assert remember(100, 100, NOW, {"a": [a2]}) is None


def test_remember_cuts_the_stretch_before_the_rows_it_cannot_keep():
    rows = [fresh(i, f"g{i}") for i in range(MEMORY_ROWS + 5)]
    kept = remember(0, 10**6, NOW, {r.grp: [r] for r in rows})
    assert kept is not None and kept.rows() == MEMORY_ROWS and kept.end == MEMORY_ROWS


def test_a_memory_is_used_from_a_position_inside_its_stretch_and_while_young():
    a1, b1 = fresh(10, "a"), fresh(30, "b")
    mem = memory(a1, b1, start=5, end=50)
    assert mem.usable(5, NOW) and mem.rebased(5) is mem
    assert not mem.usable(4, NOW) and not mem.usable(50, NOW)
    assert not mem.usable(5, NOW + MEMORY_SECONDS)
    moved = mem.rebased(20)  # another client moved the pointer past a1
    assert moved is not None and (moved.start, moved.end) == (20, 50)
    assert dict(moved.groups) == {"b": (b1,)} and moved.made_at == mem.made_at


def test_claimed_rows_keep_their_other_columns():
    r = fresh(10)
    c = claimed_row(r, NOW, 5)
    assert (c.id, c.grp, c.enqueued_at, c.acked) == (r.id, r.grp, r.enqueued_at, r.acked)
    assert c.invisible_until == dt.datetime.fromtimestamp(NOW + 5, dt.timezone.utc).replace(
        tzinfo=None
    )


def test_a_hot_group_is_cut_after_its_kept_rows_and_the_others_stay_in_the_memory():
    hot = [fresh(i, "hot") for i in range(MEMORY_ROWS + 10)]
    others = [fresh(MEMORY_ROWS + 100 + i, f"o{i}") for i in range(50)]
    groups = {"hot": hot, **{r.grp: [r] for r in others}}
    kept = remember(0, 10**6, NOW, groups)
    assert kept is not None and kept.end == 10**6  # the stretch is not cut before the others
    assert len(kept.groups["hot"]) == MEMORY_ROWS_PER_GROUP
    assert dict(kept.cut) == {"hot": MEMORY_ROWS_PER_GROUP - 1}
    assert all(r.grp in kept.groups for r in others)


def test_rows_of_a_cut_group_read_later_are_not_remembered_past_the_cut():
    hot = [fresh(i, "hot") for i in range(MEMORY_ROWS_PER_GROUP + 5)]
    first = remember(0, 2000, NOW, {"hot": hot})
    assert first is not None and first.cut == {"hot": MEMORY_ROWS_PER_GROUP - 1}
    # The next call read [2000, 3000) and found more of the group: what lies between the cut
    # and them is not known, so they are left out and the cut stays.
    later = [fresh(2500, "hot"), fresh(2600, "hot")]
    again = remember(0, 3000, NOW, {"hot": [*first.groups["hot"], *later]}, cut=first.cut)
    assert again is not None and again.groups["hot"][-1].id == MEMORY_ROWS_PER_GROUP - 1
    assert again.cut == first.cut


def test_a_cut_at_the_stretch_s_end_leaves_nothing_unknown_and_is_dropped():
    hot = [fresh(i, "hot") for i in range(MEMORY_ROWS_PER_GROUP + 5)]
    kept = remember(0, MEMORY_ROWS_PER_GROUP, NOW, {"hot": hot})
    assert kept is not None and kept.cut == {}


def test_a_cut_group_s_rows_beyond_the_cut_hold_the_pointer_below_them():
    hot = [held(i, "hot") for i in range(MEMORY_ROWS_PER_GROUP + 5)]
    mem = remember(0, 5000, NOW, {"hot": hot})
    assert mem is not None
    cut = mem.cut["hot"]
    # Only the first kept row is left unfinished (the others gone): nothing remembered after
    # it, but the group's unremembered rows after the cut may be fresh.
    short = remember(0, 5000, NOW, {"hot": [hot[cut]]}, cut=mem.cut)
    assert short is not None
    rec, _ = recall(short, heads={"hot": None})
    assert rec.later_first() == cut + 1


def test_a_cut_group_whose_kept_rows_are_all_finished_makes_the_memory_unusable():
    hot = [fresh(i, "hot") for i in range(MEMORY_ROWS_PER_GROUP + 5)]
    b = fresh(4000, "b")
    mem = remember(0, 5000, NOW, {"hot": hot, "b": [b]})
    assert mem is not None and "hot" in mem.cut
    rec, _ = recall(mem, finished={"hot": MEMORY_ROWS_PER_GROUP - 1}, table={4000: b})
    assert rec.exhausted
    not_cut = remember(0, 5000, NOW, {"hot": hot[:3], "b": [b]})
    assert not_cut is not None
    rec2, _ = recall(not_cut, finished={"hot": 2}, table={4000: b})
    assert not rec2.exhausted and [r.id for r in rec2.firsts()] == [4000]


def test_a_memory_rebased_past_a_cut_group_s_kept_rows_is_dropped():
    hot = [fresh(i, "hot") for i in range(MEMORY_ROWS_PER_GROUP + 5)]
    mem = remember(0, 5000, NOW, {"hot": hot, "b": [fresh(4000, "b")]})
    assert mem is not None and mem.rebased(MEMORY_ROWS_PER_GROUP) is None
