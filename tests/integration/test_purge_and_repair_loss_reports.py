"""A purge and a repair that both drop ids of the same range each keep their own loss report,
and a purge counts only what it really dropped.

A writer died after writing id 0 of its block 0..9; producers went on (ids 10..19); readers
handed the block to repair. A purge then drops ids 0 and 10..19, and repair later counts
1..9 as never written. A streaming query stopped meanwhile must be told of both, each once,
whether or not it had already reported the purge.
"""

from __future__ import annotations

import time

import pytest
from support.repair import TIMEOUT

from cassieq_spark.engine.core import monoton
from cassieq_spark.engine.core.messages import write_messages
from cassieq_spark.engine.store import faults
from cassieq_spark.engine.upkeep import lost

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("fault_mode")]


@pytest.fixture(autouse=True)
def _no_faults_left():
    yield
    faults.reset()


def _reports(conn, info) -> dict[str, tuple[int, tuple[int, ...]]]:
    """The unreported lost ranges by cause: (count, ids)."""
    out: dict[str, tuple[int, tuple[int, ...]]] = {}
    for rng in lost.unreported(conn, info):
        assert rng.cause not in out, "one range per cause here"
        out[rng.cause] = (rng.lost, rng.ids)
    return out


@pytest.mark.parametrize(
    "purge_reported_first", [False, True], ids=["purge-unreported", "purge-reported"]
)
def test_purge_and_repair_of_one_range_are_both_reported(
    queue_client, queue_name, purge_reported_first
):
    """G7 (a), (b): both wrote `lost_ranges` at lo = 0. Repair's row overwrote the purge's
    (the purge of 10..19 was never reported), or, when a query had reported the purge
    already, inherited its `reported_by` (the never-written ids were never reported)."""
    conn = queue_client.conn
    info = queue_client.create_queue(queue_name, repair_timeout=TIMEOUT)
    dead = monoton.reserve(conn, info, 10)
    assert (dead.lo, dead.hi) == (0, 10)
    write_messages(conn, info, 0, [b"w0"])  # then the writer died
    assert queue_client.put_many(queue_name, [f"p{i}" for i in range(10, 20)]) == list(
        range(10, 20)
    )
    time.sleep(TIMEOUT + 0.3)  # block 0..9 is abandoned: the purge hands it to repair
    report = queue_client.purge(queue_name)
    assert (report.purged, report.through_id) == (11, 20), report
    purged = (11, (0, *range(10, 20)))
    assert _reports(conn, info) == {lost.CAUSE_PURGED: purged}
    if purge_reported_first:
        (rng,) = lost.unreported(conn, info)
        assert lost.mark_reported(conn, info, rng, "stopped-query")

    time.sleep(TIMEOUT + 0.2)  # repair waits the repair timeout once more
    rep = queue_client.repair(queue_name)
    assert rep.lost_ids == 9, rep

    never_written = (9, tuple(range(1, 10)))
    expected = {lost.CAUSE_NEVER_WRITTEN: never_written}
    if not purge_reported_first:
        expected[lost.CAUSE_PURGED] = purged
    assert _reports(conn, info) == expected
    assert queue_client.stats(queue_name)["lost"] == 9
    assert queue_client.get(queue_name) is None


def test_purge_counts_repaired_originals_once_as_their_copies(queue_client, queue_name):
    """G7 (c): a range repair finished (not yet forgotten: its bucket is still there) keeps
    its plain originals next to their republished copies. Purge counted both: 20 purged and
    20 ids named for 10 messages."""
    conn = queue_client.conn
    info = queue_client.create_queue(queue_name, repair_timeout=TIMEOUT)
    dead = monoton.reserve(conn, info, 10)
    write_messages(conn, info, dead.lo, [f"o{i}".encode() for i in range(10)])  # never closed
    marker = queue_client.put(queue_name, b"marker")
    time.sleep(TIMEOUT + 0.3)
    m = queue_client.get(queue_name)  # passes the block and hands it to repair
    assert m is not None and m.id == marker
    assert queue_client.ack(queue_name, m.pop_receipt)
    time.sleep(TIMEOUT + 0.2)
    rep = queue_client.repair(queue_name)
    assert (rep.republished, rep.lost_ids, rep.buckets_reclaimed) == (10, 0, 0), rep

    report = queue_client.purge(queue_name)
    assert report.purged == 10, report
    (rng,) = lost.unreported(conn, info)
    assert rng.cause == lost.CAUSE_PURGED and rng.lost == 10
    assert set(rng.ids) == set(range(11, 21))  # the copies, not the originals
    assert queue_client.stats(queue_name)["dropped"] == 10
    assert queue_client.get(queue_name) is None
