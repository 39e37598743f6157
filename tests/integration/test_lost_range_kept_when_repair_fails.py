"""A range repair counted ids of as lost keeps its loss report even when repair fails or dies
between marking the range done and publishing the report: the next pass publishes it, once.

Nor when the compare-and-set that marks the range done applied and was sent again (its copy
says "not applied"): the range is still this repair's to count and report.

A dead writer's block of 5 ids is handed to repair by a reader; nothing ever lands there.
"""

from __future__ import annotations

import time

import pytest
from cassandra import WriteTimeout
from support.repair import TIMEOUT, skip_blocks

from cassieq_spark.engine.store import faults
from cassieq_spark.engine.upkeep import lost

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]


class Killed(Exception):
    """The repair process dies here."""


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _abandoned_block(client, name: str):
    client.create_queue(name, repair_timeout=TIMEOUT)
    info = client.get_queue(name)
    skip_blocks(client, info, 1, ids_per_block=5)
    time.sleep(TIMEOUT + 0.2)  # repair waits the repair timeout once more
    return info


def _assert_reported_once(client, name: str, info) -> None:
    stats = client.stats(name)
    assert (stats["lost"], stats["lost_ranges"], stats["lost_ranges_unreported"]) == (5, 1, 1)
    (rng,) = lost.unreported(client.conn, info)
    assert (rng.lost, rng.ids, rng.cause) == (5, (0, 1, 2, 3, 4), lost.CAUSE_NEVER_WRITTEN)


# The injected timeout would be shadowed by the blanket lost-reply mode: run it without.
@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)
def test_repair_whose_loss_report_could_not_be_written_reports_it_on_the_next_pass(
    queue_client, queue_name
):
    """G8: repair marked the range done, counted the ids lost, then its `lost_ranges` insert
    timed out; the next pass skipped the done range, and the forget dropped it: `lost` said
    5 and no streaming query was ever told."""
    info = _abandoned_block(queue_client, queue_name)
    faults.inject(faults.TIMEOUT_BEFORE, r"INSERT INTO \S*lost_ranges", times=None)
    with pytest.raises((WriteTimeout, RuntimeError)):
        queue_client.repair(queue_name)
    faults.reset()
    queue_client.repair(queue_name)
    _assert_reported_once(queue_client, queue_name, info)
    queue_client.repair(queue_name)  # again: nothing counted or reported twice
    _assert_reported_once(queue_client, queue_name, info)


def test_repair_killed_after_marking_a_range_done_reports_its_loss_on_the_next_pass(
    queue_client, queue_name
):
    """G8: the window between the compare-and-set that makes a repair the one that counts a
    range and the loss report it publishes: a repair killed there leaves the report to the
    next pass (forgetting the range waits for it)."""
    info = _abandoned_block(queue_client, queue_name)

    def die(**_):
        raise Killed

    faults.on("ranges.after_done", die)
    with pytest.raises(Killed):
        queue_client.repair(queue_name)
    faults.reset()
    assert lost.unreported(queue_client.conn, info) == []  # pending: not reported yet
    queue_client.repair(queue_name)
    _assert_reported_once(queue_client, queue_name, info)


# The re-sent copy would be shadowed by the blanket lost-reply mode: run it without.
@pytest.mark.parametrize("fault_mode", ["none"], indirect=True)
def test_repair_whose_done_mark_was_sent_again_still_counts_and_records_the_loss(
    queue_client, queue_name
):
    """G6: the compare-and-set that marks a range done was applied, then sent again; the
    copy said "not applied" and repair took the range for another repair's: no `lost`
    counted, no lost range kept, so no streaming query was ever told."""
    info = _abandoned_block(queue_client, queue_name)
    faults.inject(faults.RETRIED, r"SET done = true")
    report = queue_client.repair(queue_name)
    assert (report.lost_reservations, report.lost_ids) == (1, 5), report
    _assert_reported_once(queue_client, queue_name, info)
